"""PyTorch model factories: load one, call it at a batch size, and build its training loss.

A factory is named ``path/to/file.py:fn`` or ``package.module:fn``, and
``fn()`` returns ``(module, example_inputs)`` (DESIGN §7). The importer, the
memory measurement and the hooks all load models through this module, so they
see the same model at the same batch with the same loss.

The factory is the user's code, so it runs guarded: whatever it raises,
including ``SystemExit`` (``sys.exit`` in a script that was not meant to be
imported), becomes :class:`~dlsched.errors.ImportFailure` with one paragraph
(exit 2), and what it prints goes to stderr, so that ``--json`` keeps stdout
to one JSON object.

Examples
--------
>>> module, inputs, name = call_factory("examples/torch_models.py:small_cnn", batch=2)
>>> name, tuple(inputs[0].shape)
('small_cnn', (2, 3, 32, 32))
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from dlsched.errors import ImportFailure

_SPEC = re.compile(r"^(?P<target>.+?):(?P<fn>[A-Za-z_][A-Za-z0-9_]*)$")


class _Exited(BaseException):
    """``os._exit`` called by the user's code in this process: raised instead of ending it unseen."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _exit_is_seen() -> Iterator[None]:
    """While the user's code runs, ``os._exit`` in this process raises :class:`_Exited`.

    ``os._exit(0)`` ends a process with success and runs nothing on the way
    out, so ``check`` would pass without checking. Children the code forks
    (data-loader workers) still exit for real.
    """
    real, pid = os._exit, os.getpid()

    def guarded(code):
        if os.getpid() != pid:
            real(code)
        raise _Exited(code)

    os._exit = guarded
    try:
        yield
    finally:
        os._exit = real


@contextlib.contextmanager
def user_code(spec: str, doing: str) -> Iterator[None]:
    """Run the user's code: its prints go to stderr, anything it raises is an :class:`ImportFailure`.

    ``KeyboardInterrupt`` still interrupts; ``SystemExit`` and ``os._exit`` do
    not end dlsched with the factory's exit code (``sys.exit(0)`` would read as
    success), and neither does any other ``BaseException``.

    Examples
    --------
    >>> with user_code("f.py:net", "calling the factory"):
    ...     raise SystemExit(0)
    Traceback (most recent call last):
    ...
    dlsched.errors.ImportFailure: f.py:net: calling the factory called sys.exit(0); a factory must return (module, example_inputs), not exit
    >>> with user_code("f.py:net", "calling the factory"):
    ...     os._exit(0)
    Traceback (most recent call last):
    ...
    dlsched.errors.ImportFailure: f.py:net: calling the factory called os._exit(0); a factory must return (module, example_inputs), not exit
    """
    try:
        with _exit_is_seen(), contextlib.redirect_stdout(sys.stderr):
            yield
    except (ImportFailure, KeyboardInterrupt):
        raise
    except SystemExit as e:
        raise ImportFailure(f"{spec}: {doing} called sys.exit({e.code!r}); a factory must return "
                            "(module, example_inputs), not exit") from None
    except _Exited as e:
        raise ImportFailure(f"{spec}: {doing} called os._exit({e.code!r}); a factory must return "
                            "(module, example_inputs), not exit") from None
    except BaseException as e:  # the user's own BaseException subclasses too: exit 2, not a traceback and 1
        raise ImportFailure(f"{spec}: {doing} failed: {type(e).__name__}: {e}") from None


def load_factory(spec: str) -> Callable:
    """Resolve ``path/to/file.py:fn`` or ``package.module:fn`` to the callable.

    A file is imported once per process under a name derived from its path, with
    its own folder on ``sys.path`` while it runs so it can import its neighbours.

    Raises
    ------
    ImportFailure
        Not of that form, a missing file or module, an import that fails or
        exits, or no such callable.
    """
    m = _SPEC.match(spec)
    if not m:
        raise ImportFailure(f"{spec}: not a PyTorch factory; expected path/to/file.py:fn or package.module:fn")
    target, fn_name = m["target"], m["fn"]
    if target.endswith(".py"):
        mod = _import_file(spec, Path(target))
    else:
        try:
            with user_code(spec, f"importing module {target!r}"):
                mod = importlib.import_module(target)
        except ImportFailure:
            if importlib.util.find_spec(target.split(".")[0]) is None:
                raise ImportFailure(f"{spec}: module {target!r} not found (and no file of that name)") from None
            raise
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise ImportFailure(f"{spec}: {target!r} has no function {fn_name!r}")
    if not callable(fn):
        raise ImportFailure(f"{spec}: {fn_name!r} in {target!r} is not callable")
    return fn


def _import_file(spec: str, path: Path):
    if not path.is_file():
        raise ImportFailure(f"{spec}: no such file {str(path)!r}")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    mod_name = f"_dlsched_factory_{stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    file_spec = importlib.util.spec_from_file_location(mod_name, path)
    if file_spec is None or file_spec.loader is None:
        raise ImportFailure(f"{spec}: cannot load {str(path)!r} as a Python module")
    mod = importlib.util.module_from_spec(file_spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    sys.modules[mod_name] = mod
    try:
        with user_code(spec, f"executing {str(path)!r}"):
            file_spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[mod_name]
        raise
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return mod


def accepts_batch(fn: Callable) -> bool:
    """Whether ``fn`` takes a ``batch`` keyword (then it builds its inputs at that batch itself)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return any(p.name == "batch" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               or p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def resize_batch(t, batch: int):
    """Dim 0 of ``t`` resized to ``batch`` by cycling its rows (deterministic)."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] == batch:
        return t
    rows = torch.arange(batch) % t.shape[0]
    return t[rows].clone()


def call_factory(spec: str, batch: int | None = None, **kwargs: Any):
    """Load and call the factory ``spec``; returns ``(module, inputs_tuple, fn_name)``.

    If ``batch`` is given and the factory accepts a ``batch`` keyword, it is
    called as ``fn(batch=batch, **kwargs)``; otherwise ``fn(**kwargs)`` is called
    and dim 0 of every example tensor is resized to ``batch`` by cycling its rows.

    Raises
    ------
    ImportFailure
        Missing file or module, no such function, the factory raised or exited,
        or it returned something other than ``(torch.nn.Module, inputs)``.
    """
    import torch

    fn = load_factory(spec)
    fn_name = spec.rsplit(":", 1)[1]
    by_keyword = batch is not None and accepts_batch(fn)
    with user_code(spec, "calling the factory"):
        result = fn(batch=batch, **kwargs) if by_keyword else fn(**kwargs)
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise ImportFailure(f"{spec}: the factory must return (torch.nn.Module, example_inputs), "
                            f"got {_describe(result)}")
    module, inputs = result
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not inputs or \
            not all(isinstance(x, torch.Tensor) for x in inputs):
        raise ImportFailure(f"{spec}: the factory's example_inputs must be a tensor or a tuple of tensors, "
                            f"got {_describe(inputs)}")
    inputs = tuple(inputs)
    if batch is not None and not by_keyword:
        inputs = tuple(resize_batch(x, batch) for x in inputs)
    return module, inputs, fn_name


def _describe(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} ({', '.join(type(v).__name__ for v in x[:4])})"
    return f"a {type(x).__name__}"


def training_loss(out):
    """The loss a training step of a factory's model minimises, for capture and memory measurement alike.

    Cross-entropy against class 0 for 2-D logits, else the mean square of every
    floating-point tensor in the output, whatever structure holds them (tuples,
    dicts, Hugging Face ``ModelOutput``).

    Raises
    ------
    TypeError
        The output holds no floating-point tensor.
    """
    import torch
    import torch.nn.functional as F
    from torch.utils._pytree import tree_leaves

    if isinstance(out, torch.Tensor) and out.dim() == 2 and out.is_floating_point():
        target = torch.zeros(out.shape[0], dtype=torch.long, device=out.device)
        return F.cross_entropy(out, target)
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise TypeError("the module returns no floating-point tensor to build a loss from")
    loss = leaves[0].float().pow(2).mean()
    for t in leaves[1:]:
        loss = loss + t.float().pow(2).mean()
    return loss
