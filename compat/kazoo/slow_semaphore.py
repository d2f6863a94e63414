"""A pytest plugin for kazoo's suite (`-p slow_semaphore`, with compat/kazoo on PYTHONPATH):
delays a Semaphore's first attempt by 1 s, as a busy machine can delay its thread, so
that test_lock.py's test_handle_session_loss expires the session before the semaphore
registers its session listener. It then hangs against any server (Apache ZooKeeper
included): why that test is not in expected_pass.txt."""
import time
from kazoo.recipe import lock

_orig = lock.Semaphore._inner_acquire

def _slow(self, *a, **kw):
    if not getattr(self, "_slowed", False):
        self._slowed = True
        time.sleep(1.0)
    return _orig(self, *a, **kw)

lock.Semaphore._inner_acquire = _slow
