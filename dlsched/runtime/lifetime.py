"""Child processes never outlive their launcher.

The hooks start their cluster as local processes: the parameter-server ranks of
:mod:`dlsched.hooks.torch_ps`, the TensorFlow ps and worker servers of
``examples/tf_cluster_example.py``. A child left behind by a launcher that died
keeps its ports, its cores and its memory with nobody to stop it, so both sides
take part:

- the child calls :func:`watch_launcher` first thing, and ends as soon as the
  launcher does, however the launcher died (SIGKILL included);
- the launcher runs the children inside :func:`children_die_with_launcher`, so a
  SIGTERM, SIGINT or SIGHUP to the launcher first kills every child, then ends
  the launcher through its ``finally`` blocks; :func:`kill_children` is also
  what its own clean-up calls.

A launcher typically starts each child with ``start_new_session=True`` (a
terminal's Ctrl-C then reaches the launcher alone, which kills the children's
groups) and passes its pid to the child, e.g. as ``--parent PID``.

Examples
--------
In the child::

    watch_launcher(args.parent)          # before anything slow

In the launcher::

    procs = []
    with children_die_with_launcher(procs):
        try:
            procs.append(subprocess.Popen(cmd + ["--parent", str(os.getpid())], start_new_session=True))
            ...
        finally:
            kill_children(procs)
            for p in procs:
                p.wait()

Public API: :func:`watch_launcher`, :func:`children_die_with_launcher`,
:func:`kill_children`, :data:`STOP_SIGNALS`.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

__all__ = ["STOP_SIGNALS", "children_die_with_launcher", "end_children", "kill_children", "say_error", "watch_launcher"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

#: The signals after which :func:`children_die_with_launcher` kills the children
#: (those this platform has): a polite request to stop, Ctrl-C, a closed terminal.
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, n))


def say_error(text: str) -> None:
    """Print ``dlsched: error: TEXT`` on stderr in one write. Ranks under torchrun share one stderr, and
    ``print``'s text and newline can land apart with another rank's line between them (seen in 2 of 8
    runs of two ranks failing at once: one line held both messages)."""
    sys.stderr.flush()
    os.write(2, f"dlsched: error: {text}\n".encode(errors="replace"))


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process; a zombie (dead, not yet reaped) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except (OSError, ValueError, IndexError):  # no /proc: trust kill()
        return True


def watch_launcher(launcher: int, interval: float = 0.5, deathsig: bool = True, name: str = "this process") -> None:
    """End this process as soon as the process ``launcher`` dies, however it dies.

    Parameters
    ----------
    launcher : int
        The pid of the process that started this one.
    interval : float
        Seconds between two checks of the portable fallback.
    deathsig : bool
        On Linux, also ask the kernel to SIGKILL this process when its parent
        dies (``prctl(PR_SET_PDEATHSIG)``), which acts at once and covers a
        launcher killed by SIGKILL. ``False`` leaves only the fallback (tests).
    name : str
        How the line printed on stderr before exiting calls this process
        (``"dlsched: error: the launcher (pid N) is gone; NAME stops"``).

    Notes
    -----
    Call it before anything slow (importing a framework, joining a cluster), so
    that a launcher killed during start-up is noticed too: a launcher already
    gone when it is called ends this process at once.

    The fallback is a daemon thread that exits the process with code 2 once its
    parent changes (it was re-parented: the parent died) or ``launcher`` is gone.
    It also covers systems without ``prctl`` and a wrapper between launcher and
    child (the kernel signal follows the direct parent only); it needs the main
    thread to release the GIL while it blocks, as ``time.sleep``, subprocess
    waits and framework calls such as ``tf.distribute.Server.join`` do.

    The death signal follows the parent *thread*: the launcher must keep the
    thread that started the children alive until they have ended.
    """
    if deathsig and sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no usable libc: the fallback still works
            pass
    parent = os.getppid()

    def gone() -> bool:
        return os.getppid() != parent or not _alive(launcher)

    def stop():
        say_error(f"the launcher (pid {launcher}) is gone; {name} stops")
        os._exit(2)

    if gone():  # it died before the death signal was armed
        stop()

    def poll():
        while not gone():
            time.sleep(interval)
        stop()

    threading.Thread(target=poll, name="dlsched-launcher-watch", daemon=True).start()


def kill_children(procs: list) -> None:
    """SIGKILL every child in ``procs`` that has not been reaped yet, with its process group.

    Parameters
    ----------
    procs : list of subprocess.Popen
        The children. One started with ``start_new_session=True`` leads its own
        process group, which is killed whole (with whatever it started); any
        other is killed alone.

    Notes
    -----
    Only children whose ``returncode`` is still ``None`` are signalled: until
    it is reaped, a child's pid (and the group id it leads) cannot be reused, so
    no unrelated process is ever hit. Call ``poll()`` on the children first to
    skip those that already ended. Safe to call from a signal handler, and more
    than once.
    """
    for p in procs:
        if p.returncode is not None:
            continue
        try:
            os.killpg(p.pid, signal.SIGKILL)
            continue
        except ProcessLookupError:  # not a group leader (or already gone): the process alone
            pass
        except PermissionError:
            continue
        try:
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def end_children(procs: list) -> None:
    """Kill the children that are still running and reap them all (a launcher's last word).

    ``poll()`` first, so that children that already ended are reaped and not
    signalled (see :func:`kill_children`).
    """
    for p in procs:
        p.poll()
    kill_children(procs)
    for p in procs:
        p.wait()


@contextlib.contextmanager
def children_die_with_launcher(procs: list):
    """While the block runs, SIGTERM, SIGINT or SIGHUP to this process first kill every child.

    Parameters
    ----------
    procs : list of subprocess.Popen
        The children, read when a signal arrives: append each one as it is
        started, inside the block, so that one started a moment before the
        signal is killed too.

    Notes
    -----
    After :func:`kill_children`, the signal takes its course as an exception, so
    the ``finally`` blocks that reap the children and remove temporary files
    run: the Python handler that was there before is called (SIGINT's raises
    ``KeyboardInterrupt``), else ``SystemExit(128 + signum)`` is raised, the
    shell's exit code for death by that signal. Ignored signals (``nohup``) stay
    ignored. The previous handlers are restored when the block ends.

    Only the main thread may set handlers; entered from another thread this
    does nothing, and the children rely on :func:`watch_launcher` alone. A
    Python handler runs once the main thread is back in Python code, so a
    launcher blocked in a long C call (a framework's session) acts only when
    that call returns: bound such calls with a timeout.
    """
    previous = {}

    def handler(signum, frame):
        kill_children(procs)
        prev = previous.get(signum)
        if callable(prev):
            prev(signum, frame)
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN or current is None:  # ignored on purpose, or owned by C code
                continue
            previous[sig] = current
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, prev in previous.items():
            signal.signal(sig, prev)


def left_by_the_dead(name: str, pattern: re.Pattern) -> bool:
    """Whether ``name`` (a namespace, cgroup or folder named with the pid of the process that made it, in
    ``pattern``'s group ``pid``) was left by a process that no longer runs: a launcher killed by SIGKILL
    cleans nothing up, so the next run removes what it left, and only that.

    >>> left_by_the_dead(f"dls{os.getpid()}_hub", re.compile(r"dls(?P<pid>\d+)_\w+")), left_by_the_dead("x", re.compile("y"))
    (False, False)
    """
    m = pattern.fullmatch(name)
    if not m:
        return False
    try:
        os.kill(int(m["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False

