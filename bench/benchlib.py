"""Helpers shared by the benchmark report scripts (lock-report.py, server-report.py)."""

import os


def read_env(path):
    """key=value lines of a file as a dict; an empty dict if the file is missing."""
    d = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                d[k] = v
    return d
