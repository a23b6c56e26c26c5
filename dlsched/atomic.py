"""Atomic file output: write to a temp file beside the target, then rename.

A failed run therefore never leaves a partial output file behind, and a
target that cannot be written (read-only folder, full disk, a directory in
the way) is reported as :class:`~dlsched.errors.OutputError` (exit 2), never
as a traceback.

The temp file is created with ``os.open(..., 0o666)`` so the process umask
gives it the usual mode; ``mkstemp``'s 0600 would need the umask read, and
reading it means setting it, which is a process-wide side effect.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path
from typing import IO, Iterator

from dlsched.errors import OutputError


def _temp_beside(path: Path, suffix: str) -> Path:
    """Create an empty, exclusive temp file next to ``path``; return its path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory")
        for _ in range(100):
            tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")
            try:
                os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
                return tmp
            except FileExistsError:
                continue
        raise FileExistsError(17, "no free temporary name")
    except OSError as e:
        raise OutputError(f"{path}: cannot write the output ({e.strerror or e})") from None


# Held while a temp file is created: a SIGINT or SIGTERM (which the CLI turns into exceptions) landing
# between its creation and the guard that removes it would leave it behind.
_HELD = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _temp_renamed_onto(path: Path, suffix: str) -> Iterator[Path]:
    """A temp file beside ``path``, renamed onto it if the block succeeds and removed whatever else happens."""
    tmp = None
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        tmp = _temp_beside(path, suffix)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal waiting now raises inside this guard
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"{path}: cannot write the output ({e.strerror or e})") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def check_writable(path: str | os.PathLike | None) -> None:
    """Refuse, before any long work, an output that could not be written: a temp file is made beside it, then removed.

    A run of minutes that fails only when it writes its result has wasted
    those minutes; the same :class:`~dlsched.errors.OutputError` comes at once.

    Examples
    --------
    >>> check_writable("/proc/version/out.png")
    Traceback (most recent call last):
    ...
    dlsched.errors.OutputError: /proc/version/out.png: cannot write the output (...)
    """
    if path is None:
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        os.unlink(_temp_beside(Path(path), ".check"))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open ``path`` for writing; it only appears, complete, when the block succeeds.

    Raises
    ------
    OutputError
        The file cannot be created, written or renamed into place.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
    >>> with atomic_open(p) as f:
    ...     _ = f.write("hello")
    >>> p.read_text(), sorted(q.name for q in p.parent.iterdir())
    ('hello', ['x.txt'])
    """
    with _temp_renamed_onto(Path(path), ".tmp") as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, "w") as f:
        f.write(text)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path for libraries that insist on writing by file name
    (matplotlib, pyarrow); it is renamed onto ``path`` on success.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "y.csv"
    >>> with atomic_path(p) as tmp:
    ...     _ = tmp.write_text("a,b\\n")
    >>> p.read_text()
    'a,b\\n'
    """
    path = Path(path)
    with _temp_renamed_onto(path, path.suffix) as tmp:
        yield tmp
