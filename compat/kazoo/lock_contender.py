"""A kazoo lock contender for zlock's mixed-contender test
(crates/zlock/tests/it/curator_interop.rs, scenario `mixed`).

    lock_contender.py <hosts> <lock_path> <counter_path> <log_path> <n>

n times: take kazoo's Lock on <lock_path>, read the counter znode, sleep 1 ms, write
counter + 1, append "kazoo:<sequence>," to the log znode, release. Prints READY once
connected and DONE <n> at the end; exit 0.

The lock uses Curator's node names (`<uuid>-lock-NNNNNNNNNN`, kazoo's
extra_lock_patterns mechanism), so Curator, zlock's recipe and zlock's native path see
kazoo's nodes in the same queue and kazoo sees theirs.
"""

import sys
import time

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock


class CuratorNamedLock(Lock):
    _NODE_NAME = "-lock-"
    _EXCLUDE_NAMES = ["-lock-"]


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    hosts, lock_path, counter, log, n = sys.argv[1:6]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=30)
    print("READY", flush=True)
    lock = CuratorNamedLock(zk, lock_path, "kazoo")
    for _ in range(int(n)):
        with lock:
            seq = int(lock.node[-10:])
            value, _ = zk.get(counter)
            time.sleep(0.001)
            zk.set(counter, str(int(value) + 1).encode())
            entries, _ = zk.get(log)
            zk.set(log, entries + ("kazoo:%d," % seq).encode())
    zk.stop()
    zk.close()
    print("DONE %s" % n, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
