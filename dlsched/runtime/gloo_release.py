"""Wait until gloo's worker threads have let go of our tensors, before a process may end.

A gloo collective's work object holds the tensors it reduced. The worker
thread that ran it drops that hold a moment after ``work.wait()`` returns,
and when it is the last C++ holder of a tensor made in Python, dropping it
takes the GIL (the tensor's Python object is released with it). If the
process is already finalizing, the worker cannot take the GIL and the
process aborts ("terminate called without an active exception"): the
ordered all-reduce under torchrun did, about once in 40 runs on a loaded
2-core machine (a core dump put the worker in ``~AsyncWork``, waiting for the
GIL; pytorch PR #179291 names the same race). Where the main thread instead
tears the process group down, it joins that worker while holding the GIL,
which would hang (a likely cause of the same test's one hang at exit, not
reproduced). So a hook that ran collectives on tensors of its own waits,
with the GIL released, until their only holder is Python again.
"""
from __future__ import annotations

import time
from typing import Iterable

#: how long to sleep between looks (the GIL is released meanwhile)
POLL_S = 0.001


def let_go(tensors: Iterable, timeout: float) -> bool:
    """Wait until nothing but their Python objects holds ``tensors`` (each one's C++ use count is 1), at most
    ``timeout`` seconds; ``True`` if they were let go in time. A view of a tensor holds it too, so pass only
    tensors the hook owns and hands out no views of."""
    tensors = list(tensors)
    deadline = time.monotonic() + timeout
    while any(t._use_count() > 1 for t in tensors):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True
