"""pytest plugin: run kazoo's own test suite against an already-running server.

kazoo's harness (kazoo.testing.harness) normally launches a 3-node Java
ZooKeeper cluster itself. This plugin replaces
``kazoo.testing.harness.get_global_cluster`` with a function returning a
list-like "cluster" of exactly one server at ``127.0.0.1:$ZLOCK_TEST_PORT``.

* cluster.start/stop/terminate/reset/get_logs do nothing (the server's
  lifetime is owned by compat/kazoo/run.sh);
* the server's ``stop``/``run``/``secure_address`` raise, so the tests that
  need to restart servers or use SSL fail loudly instead of silently passing.

It also records a per-test outcome file (``$ZLOCK_KAZOO_OUTCOMES``) with
stable, path-independent test ids such as
``kazoo/tests/test_lock.py::TestLock::test_lock_one``, one
``<OUTCOME> <id>`` per line, where OUTCOME is PASSED, FAILED, ERROR or SKIPPED.

Usage:
    PYTHONPATH=compat/kazoo ZLOCK_TEST_PORT=2181 python -m pytest \
        -p zlock_kazoo_plugin --pyargs kazoo.tests -p no:cacheprovider
"""

import os

import pytest

import kazoo.testing.harness as _harness


class ExternalServerUnsupported(RuntimeError):
    """Raised when a test tries to manage the (external) server's lifecycle."""


class ExternalServer:
    """Stands in for kazoo.testing.common.ManagedZooKeeper."""

    def __init__(self, host, port):
        self.host = host
        self.port = int(port)

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def client_port(self):
        return self.port

    @property
    def running(self):
        return True

    @property
    def secure_address(self):
        raise ExternalServerUnsupported(
            "external server harness: no TLS port is available"
        )

    @property
    def secure_client_port(self):
        raise ExternalServerUnsupported(
            "external server harness: no TLS port is available"
        )

    def run(self):
        raise ExternalServerUnsupported(
            "external server harness: cannot (re)start the server under test"
        )

    def stop(self):
        raise ExternalServerUnsupported(
            "external server harness: cannot stop the server under test"
        )

    def reset(self):
        raise ExternalServerUnsupported(
            "external server harness: cannot reset the server under test"
        )

    destroy = stop

    def get_logs(self, num_lines=100):
        return []

    def __repr__(self):
        return "ExternalServer(%s)" % self.address


class ExternalCluster:
    """Stands in for kazoo.testing.common.ZookeeperCluster: the servers under test
    (one, or every member of an ensemble: kazoo's clients get all of them)."""

    def __init__(self, addresses):
        self._servers = [ExternalServer(h, p) for h, p in addresses]

    def __getitem__(self, k):
        return self._servers[k]

    def __iter__(self):
        return iter(self._servers)

    def __len__(self):
        return len(self._servers)

    def start(self):
        pass

    def stop(self):
        pass

    def terminate(self):
        pass

    def reset(self):
        pass

    def get_logs(self):
        return []

    def get_ssl_client_configuration(self):
        raise ExternalServerUnsupported(
            "external server harness: no TLS configuration is available"
        )


_CLUSTER = None


def get_external_cluster():
    global _CLUSTER
    if _CLUSTER is None:
        port = os.environ.get("ZLOCK_TEST_PORT")
        if not port:
            raise RuntimeError(
                "zlock_kazoo_plugin: set ZLOCK_TEST_PORT to the port of the "
                "server under test (on 127.0.0.1)"
            )
        host = os.environ.get("ZLOCK_TEST_HOST", "127.0.0.1")
        hosts = os.environ.get("ZLOCK_TEST_HOSTS") or "%s:%s" % (host, port)
        _CLUSTER = ExternalCluster([a.rsplit(":", 1) for a in hosts.split(",")])
    return _CLUSTER


# Patch at import time: pytest imports `-p` plugins before collecting
# kazoo.tests, and the harness looks the name up as a module global on every
# call (KazooTestHarness.cluster, KazooTestCase.tearDownClass).
_harness.get_global_cluster = get_external_cluster
_harness.CLUSTER = None


def pytest_configure(config):
    _harness.get_global_cluster = get_external_cluster


def pytest_report_header(config):
    return "zlock_kazoo_plugin: kazoo tests against %s" % (
        os.environ.get("ZLOCK_TEST_HOSTS")
        or "127.0.0.1:%s" % os.environ.get("ZLOCK_TEST_PORT", "<unset>"),
    )


# ---------------------------------------------------------------- outcomes

_OUTCOMES = {}  # stable id -> outcome so far, until its teardown report


def stable_id(report):
    """``kazoo/tests/<file>.py::<Class>::<test>``, independent of the venv path.

    (For files outside rootdir pytest's nodeid has an empty path part, so the
    file comes from report.location.)
    """
    path = report.location[0].replace(os.sep, "/") if report.location else ""
    i = path.find("kazoo/tests/")
    if i >= 0:
        path = path[i:]
    nodeid = report.nodeid
    j = nodeid.find("::")
    if j < 0:
        return path or nodeid
    if path.endswith(".py"):
        return path + nodeid[j:]
    i = nodeid.find("kazoo/tests/")
    return nodeid[i:] if i >= 0 else nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    tid = stable_id(report)
    prev = _OUTCOMES.get(tid)
    outcome = prev
    if report.failed:
        # a teardown error after a failed call stays FAILED
        if prev not in ("FAILED", "ERROR"):
            outcome = "FAILED" if report.when == "call" else "ERROR"
    elif report.skipped:
        if prev is None:
            outcome = "SKIPPED"
    elif report.when == "call" and report.passed:
        if prev is None:
            outcome = "PASSED"
    _OUTCOMES[tid] = outcome
    if report.when == "teardown":
        # The teardown report is the last one for a test: record it now, so a
        # run that is killed half-way still leaves its results behind.
        _record(tid, _OUTCOMES.pop(tid) or "ERROR")


def _record(tid, outcome):
    path = os.environ.get("ZLOCK_KAZOO_OUTCOMES")
    if path:
        with open(path, "a") as f:
            f.write("%s %s\n" % (outcome, tid))
