"""FSDP2's units: which parameters each ``fully_shard`` call owns, their bytes, and the order forward needs them (issue 30).

``fully_shard(module)`` makes ``module`` a *unit*: its parameters, except
those of a nested unit, are sharded together, all-gathered together and
reduce-scattered together. The model's own ``fully_shard`` is the **root**
unit (module path ``""``): it owns every parameter no other unit claims.

Bytes (torch 2.13, ``FSDPParam``): each parameter is sharded on dim 0 into
``P`` chunks of ``⌈d0/P⌉`` rows, the last ones padded, so a rank holds
``⌈d0/P⌉ · (numel/d0)`` elements of it and an all-gather or reduce-scatter
moves ``P`` such chunks: :attr:`FsdpUnit.padded_bytes`, at least the
parameter's own bytes.

**Forward order**: units sorted by the position, in the graph's canonical
topological order, of the first forward compute op that reads one of their
parameters; FSDP2 records the same order at run time (``post_forward_order``)
and prefetches backward along it. The root comes first: its forward hook runs
before any other.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, _ = random_dag(12, 4, training=True, seed=1)
>>> [u.module for u in fsdp_units(g, [], workers=2)]
['']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.errors import DlschedError

ROOT = ""


@dataclass(frozen=True)
class FsdpUnit:
    """One ``fully_shard`` unit: its module path (``""``: the root), its parameters and their bytes.

    ``bytes``: the parameters' own; ``padded_bytes``: what one all-gather or reduce-scatter moves (dim 0
    padded to a multiple of ``P``); ``shard_bytes``: what one rank holds, ``padded_bytes / P``."""

    module: str
    params: tuple[str, ...]
    bytes: int
    padded_bytes: int
    workers: int

    @property
    def shard_bytes(self) -> float:
        return self.padded_bytes / self.workers

    @property
    def label(self) -> str:
        return self.module or "(root)"


def padded_bytes(shape: Sequence[int] | None, nbytes: int, workers: int) -> int:
    """Bytes one all-gather of this parameter moves: dim 0 rounded up to a multiple of ``workers``.

    >>> padded_bytes([10, 3], 120, 4)  # 12 rows of 3 float32
    144
    >>> padded_bytes([], 4, 2)  # a scalar is one row
    8
    """
    dims = [int(d) for d in (shape or [])]
    numel = math.prod(dims) if dims else 1
    if numel == 0:
        return 0
    d0 = dims[0] if dims else 1
    return math.ceil(d0 / workers) * workers * (nbytes // numel) * (numel // d0)


def owner(param: str, modules: Sequence[str]) -> str:
    """The unit owning ``param``: the deepest module path that prefixes it, else the root.

    >>> owner("layers.0.linear.weight", ["layers.0", "layers"])
    'layers.0'
    >>> owner("head.weight", ["layers.0"])
    ''
    """
    best = ROOT
    for m in modules:
        if param.startswith(m + ".") and len(m) > len(best):
            best = m
    return best


def fsdp_units(graph: Graph, modules: Sequence[str], workers: int) -> list[FsdpUnit]:
    """The root and one unit per module path of ``modules``, in forward order (module docstring).

    Raises
    ------
    DlschedError
        Fewer than 2 workers; an inference graph; a module path given twice, empty, or owning no
        parameter of ``graph`` (a typo, or a module whose parameters all belong to nested units).
    """
    if workers < 2:
        raise DlschedError(f"FSDP needs at least 2 processes to shard over, got {workers}")
    if not graph.sends():
        raise DlschedError(f"{graph.name} has no gradients: it is an inference graph; load it with --mode training")
    seen: set[str] = set()
    for m in modules:
        if not isinstance(m, str) or not m or m in seen:
            raise DlschedError(f"unit {m!r} is {'given twice' if m in seen else 'not a module path'}: name each "
                               "module once, as model.named_modules() spells it (the root is implicit)")
        seen.add(m)
    recvs = {op.name: op for op in graph.recvs()}
    owned: dict[str, list[str]] = {m: [] for m in [ROOT, *modules]}
    for name in recvs:
        owned[owner(name, modules)].append(name)
    empty = [m for m in modules if not owned[m]]
    if empty:
        some = ", ".join(sorted({n.rsplit(".", 1)[0] for n in recvs})[:8])
        raise DlschedError(f"unit{'s' if len(empty) > 1 else ''} {', '.join(repr(m) for m in empty)} own"
                           f"{'' if len(empty) > 1 else 's'} no parameter of {graph.name}: no such module, or all "
                           f"its parameters belong to nested units (modules with parameters: {some}, …)")
    first = _first_forward_use(graph)
    units = []
    for m, params in owned.items():
        if not params and m == ROOT:
            continue
        nbytes = sum(recvs[p].bytes for p in params)
        padded = sum(padded_bytes(recvs[p].shape, recvs[p].bytes, workers) for p in params)
        units.append(FsdpUnit(m, tuple(params), int(nbytes), int(padded), workers))
    units.sort(key=lambda u: (u.module != ROOT, min((first.get(p, math.inf) for p in u.params), default=math.inf)))
    return units


def _first_forward_use(graph: Graph) -> dict[str, int]:
    """Each parameter's first forward compute reader, as a position in the canonical topological order."""
    pos = {op.name: i for i, op in enumerate(graph.topological_order())}
    out: dict[str, int] = {}
    for op in graph.of_kind(RECV):
        readers = [pos[s] for s in graph.successors(op.name)
                   if graph.op(s).kind == COMPUTE and graph.op(s).phase == "forward"]
        if readers:
            out[op.name] = min(readers)
    return out
