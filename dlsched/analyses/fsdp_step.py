"""One process's FSDP2 training step on CPU: its time and its peak memory (issue 30, DESIGN §4.9).

Resources as in :mod:`.ddp_step` (:class:`.two_lanes.LaneDag`): one
**compute** lane, the process's one thread, which runs the graph's compute
ops in program order (the canonical topological order: eager CPU execution
is one op after another), and one **link** that runs the process group's
collectives one at a time, in the order they are issued.

**What FSDP2 does** (``torch.distributed.fsdp.fully_shard``, torch 2.13,
read from ``_fsdp_state.py`` and ``_fsdp_param_group.py``), per unit
(:mod:`.fsdp_units`), at the hook points of the program:

- *pre-forward* (before the unit's first forward op; the root's before any):
  all-gather the unit unless it is already, wait for it, copy it out into the
  parameters (a compute op of ``padded_bytes / copy bandwidth``); then issue
  the all-gathers of its explicit forward-prefetch list
  (``set_modules_to_forward_prefetch``).
- *post-forward* (after its last forward op): free the unsharded parameters
  if ``reshard_after_forward`` (the root never does: FSDP2 keeps it).
- *pre-backward* (before its first backward op; the root's at the start of
  backward): all-gather it again if it was resharded, wait, copy out; then
  issue its explicit backward-prefetch list, or, without one, FSDP2's
  implicit prefetch: the unit before it in forward order.
- *post-backward* (after its last gradient): free the unsharded parameters,
  copy the gradients in (``padded_bytes / copy bandwidth``) and
  reduce-scatter them; the root's (and any unit whose input carries no
  gradient) in the final callback after backward. Then the optimizer runs on
  this rank's shards (``HostCosts.optimizer_s`` of the shard bytes).
- every one of these four hooks of every unit (the root's too) also costs
  the thread ``HostCosts.per_hook_s``: FSDP2's own Python bookkeeping,
  measured apart from any collective (:mod:`dlsched.jobs.fsdp_run`).

**On CPU, collectives block.** FSDP2 issues every all-gather with
``unshard_async_op`` (``False`` unless ``_set_unshard_async_op(True)``) and
every reduce-scatter without ``async_op``; on a GPU those still overlap
compute through CUDA streams, on CPU with gloo they block the one thread.
So FSDP2's default step on CPU serialises compute and communication, and an
explicit prefetch alone moves an all-gather earlier without hiding it
(measured: the example transformer, 2 processes at 150 Mbit/s, 3.06 s per
step by default, 3.04 s with one-ahead prefetch both ways, 2.69 s with the
prefetch and ``unshard_async``; ``docs/plan-fsdp.md``). With
``unshard_async`` a prefetched all-gather runs on the link while compute
goes on, and the unit's pre-forward or pre-backward waits for it; a unit's
own, unprefetched all-gather is still waited for at once.

**Cost**: an all-gather or reduce-scatter of ``n`` padded bytes over ``P``
processes: ``(P−1)·α + (P−1)/P · n/β`` (:func:`.collective_cost.ring_all_gather`),
with its own α and β for each kind (:class:`FsdpNetwork`): gloo's two
collectives need not cost the same. Contention as in :mod:`.ddp_step`
(:class:`.ddp_step.HostCosts`).

**Memory** (bytes one process holds, swept over the simulated times): the
shards of every parameter and ``optimizer_copies`` of optimizer state
(:class:`FsdpMemory`); each unit's unsharded parameters from the issue of
its all-gather to its reshard; its unsharded gradients from its
pre-backward to the end of their copy into the reduce-scatter's input
(``foreach_reduce`` frees them after the copy). That input lives until the
next unit's post-backward or the end of backward (FSDP2 keeps the last one,
``reduce_scatter_max_input_buffers`` = 1); gloo's reduce-scatter clones it
for the collective's duration; the output, the gradient shard, is allocated
with the copy and lives to the step's end (the loop's ``zero_grad`` frees
it). Each saved activation (``activations``: op → bytes,
:func:`dlsched.planning.memory.saved_activations`) lives from the end of its
forward op to the end of its last backward reader. Read from the allocator's
own records of real steps (``torch.profiler`` memory events, 2 processes,
``vgg_mid`` at batch 8 and 48): the peak is at the first units'
reduce-scatter in backward, where these buffers meet, and ``plan-batch``'s
transient workspace (the largest forward output) is not there; with it on
top the peak came out 24 MiB (batch 48) and 4 MiB (batch 8) high.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> from dlsched.analyses.fsdp_units import fsdp_units
>>> g, t = random_dag(16, 6, training=True, seed=2)
>>> units = fsdp_units(g, [], workers=2)
>>> net = FsdpNetwork(workers=2, ag_alpha=1e-4, ag_beta=1e8, rs_alpha=1e-4, rs_beta=1e8)
>>> step = fsdp_step(g, t, units, FsdpSchedule(), net)
>>> step.lower_s <= step.step_s <= step.upper_s + 1e-12
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError

from .collective_cost import check_network, ring_all_gather
from .ddp_step import HostCosts, StepResult
from .fsdp_units import ROOT, FsdpUnit
from .properties import check_times
from .two_lanes import COMPUTE_LANE, INSTANT, LINK_LANE, LaneDag

ALL_GATHER, REDUCE_SCATTER = "all-gather", "reduce-scatter"


@dataclass(frozen=True)
class FsdpNetwork:
    """α (seconds) and β (bytes/s) of the all-gather and of the reduce-scatter over ``workers`` processes."""

    workers: int
    ag_alpha: float
    ag_beta: float
    rs_alpha: float
    rs_beta: float

    def cost(self, kind: str, nbytes: float) -> float:
        if kind == ALL_GATHER:
            return ring_all_gather(self.workers, nbytes, self.ag_alpha, self.ag_beta)
        return ring_all_gather(self.workers, nbytes, self.rs_alpha, self.rs_beta)

    def check(self) -> None:
        if self.workers < 2:
            raise DlschedError(f"FSDP needs at least 2 processes to shard over, got {self.workers}")
        check_network(self.ag_alpha, self.ag_beta)
        check_network(self.rs_alpha, self.rs_beta)


@dataclass(frozen=True)
class FsdpSchedule:
    """What a plan sets: ``reshard_after_forward`` per unit (absent: FSDP2's default, ``True``), the explicit
    forward and backward prefetch lists (unit → units), and whether all-gathers are issued ``async``."""

    reshard_after_forward: Mapping[str, bool] = field(default_factory=dict)
    forward_prefetch: Mapping[str, Sequence[str]] = field(default_factory=dict)
    backward_prefetch: Mapping[str, Sequence[str]] = field(default_factory=dict)
    unshard_async: bool = False

    def reshards(self, unit: str) -> bool:
        return unit != ROOT and bool(self.reshard_after_forward.get(unit, True))


@dataclass(frozen=True)
class FsdpMemory:
    """What the memory sweep needs beyond the units: each saved activation (forward op → bytes) and the
    optimizer's state copies per parameter shard. Built by :func:`dlsched.planning.fsdp_plan.fsdp_memory`
    from ``plan-batch``'s memory model."""

    activations: Mapping[str, int] = field(default_factory=dict)
    optimizer_copies: int = 0


@dataclass(frozen=True)
class Collective:
    """One all-gather or reduce-scatter: its unit, when it was issued, started and ended, and its bytes."""

    kind: str
    unit: str
    issued: float
    start: float
    end: float
    bytes: int


@dataclass(frozen=True)
class FsdpStepResult(StepResult):
    """A simulated FSDP2 step: :class:`~.ddp_step.StepResult`'s time, parts and TicTac figures, its
    collectives, and its peak memory per process (bytes) and when it is reached."""

    peak_bytes: float = 0.0
    collectives: tuple[Collective, ...] = ()
    peak_at_s: float = 0.0

    def figures(self) -> dict:
        out = {k: v for k, v in super().figures().items() if k not in ("allreduces", "comm_latency_s")}
        return {**out, "peak_bytes": self.peak_bytes,
                "all_gathers": sum(c.kind == ALL_GATHER for c in self.collectives),
                "reduce_scatters": sum(c.kind == REDUCE_SCATTER for c in self.collectives)}


def check_schedule(units: Sequence[FsdpUnit], schedule: FsdpSchedule) -> None:
    """Refuse a schedule naming a unit that is not one, or prefetching a unit from itself or the root.

    Raises
    ------
    DlschedError
        Every problem, in one message.
    """
    names = {u.module for u in units}
    problems = [f"reshard_after_forward names {m!r}, which is not a unit" for m in schedule.reshard_after_forward
                if m not in names]
    for what, lists in (("forward", schedule.forward_prefetch), ("backward", schedule.backward_prefetch)):
        for src, targets in lists.items():
            if src not in names:
                problems.append(f"the {what} prefetch list of {src!r}: not a unit")
            for t in targets:
                if t not in names or t == ROOT or t == src:
                    problems.append(f"{src or '(root)'} {what}-prefetches {t!r}: "
                                    f"{'not a unit' if t not in names else 'a unit cannot prefetch itself or the root'}")
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise DlschedError(f"the FSDP schedule does not fit the units ({', '.join(u.label for u in units)}): {shown}")


class _Builder:
    """The step's DAG, built hook point by hook point in program order (module docstring)."""

    def __init__(self, units, schedule, network, host):
        self.schedule, self.net, self.host = schedule, network, host
        self.dag = LaneDag()
        self.tail = self.dag.add(0.0, INSTANT)  # the compute thread's last node
        self.last_link: int | None = None
        self.pending: dict[str, int] = {}  # unit -> its issued all-gather, not yet waited for
        self.unsharded: set[str] = set()
        self.collectives: list[tuple[str, str, int, int]] = []  # kind, unit, node, bytes
        self.copies_s = 0.0  # the thread's work besides the graph: copies and FSDP2's hooks
        # memory: (bytes, (node, "ready"|"end"), (node, "end") or None for the step's end)
        self.memory: list[tuple[float, tuple, tuple | None]] = []
        self.open_params: dict[str, tuple] = {}
        self.open_grads: dict[str, tuple] = {}
        self.by_name = {u.module: u for u in units}
        self.rs_input: tuple | None = None  # the reduce-scatter input FSDP2 still holds: (bytes, start)

    def link(self, kind: str, unit: FsdpUnit) -> int:
        """Issue a collective now (after the thread's last node, behind the link's last one)."""
        preds = [self.tail] + ([self.last_link] if self.last_link is not None else [])
        node = self.dag.add(self.net.cost(kind, unit.padded_bytes), LINK_LANE, preds)
        self.last_link = node
        self.collectives.append((kind, unit.module, node, unit.padded_bytes))
        return node

    def run_compute(self, secs: float, after: Sequence[int] = (), hook: bool = True) -> int:
        self.tail = self.dag.add(secs, COMPUTE_LANE, [self.tail, *after], hook=hook)
        return self.tail

    def join(self, node: int) -> None:
        """The thread blocks until ``node`` ends."""
        self.tail = self.dag.add(0.0, INSTANT, [self.tail, node])

    def copy(self, unit: FsdpUnit, after: Sequence[int] = ()) -> None:
        secs = unit.padded_bytes / self.host.copy_bandwidth
        self.copies_s += secs
        self.run_compute(secs, after)

    # -- FSDP2's hooks (module docstring) -----------------------------------------------------------
    def unshard(self, unit: FsdpUnit) -> None:
        """Issue the unit's all-gather unless it is unsharded or in flight (``FSDPParamGroup.unshard``)."""
        if unit.module in self.unsharded or unit.module in self.pending:
            return
        node = self.link(ALL_GATHER, unit)
        self.pending[unit.module] = node
        self.open_params[unit.module] = (node, "ready")  # its output buffer lives until the reshard
        if not self.schedule.unshard_async:
            self.join(node)  # a blocking collective

    def wait(self, unit: FsdpUnit) -> None:
        """Wait for the unit's all-gather and copy it out (``wait_for_unshard``)."""
        if unit.module in self.pending:
            self.copy(unit, [self.pending.pop(unit.module)])
            self.unsharded.add(unit.module)

    def pre(self, unit: FsdpUnit, prefetch: Sequence[str]) -> None:
        self.unshard(unit)
        self.wait(unit)
        for t in prefetch:
            self.unshard(self.by_name[t])

    def reshard(self, unit: FsdpUnit) -> None:
        if unit.module in self.unsharded:
            self.unsharded.discard(unit.module)
            self.memory.append((unit.padded_bytes, self.open_params.pop(unit.module), (self.tail, "end")))

    def pre_backward(self, unit: FsdpUnit, prefetch: Sequence[str]) -> None:
        self.open_grads[unit.module] = (self.tail, "end")
        self.pre(unit, prefetch)

    def post_backward(self, unit: FsdpUnit) -> None:
        """Reshard, free the previous reduce-scatter's input, copy the gradients into this one's input
        (``foreach_reduce``, which then frees them), reduce-scatter, keep the gradient shard."""
        self.reshard(unit)
        self.free_rs_input()
        before = self.tail
        self.copy(unit)
        copied = self.tail
        node = self.link(REDUCE_SCATTER, unit)
        self.join(node)  # blocking on CPU
        if unit.module in self.open_grads:
            self.memory.append((unit.padded_bytes, self.open_grads.pop(unit.module), (copied, "end")))
        self.rs_input = (unit.padded_bytes, (before, "end"))
        self.memory.append((unit.padded_bytes, (copied, "end"), (node, "end")))  # gloo's clone of the input
        self.memory.append((unit.shard_bytes, (copied, "end"), None))  # the output: the gradient shard

    def free_rs_input(self) -> None:
        """FSDP2 keeps the last reduce-scatter's input until the next unit's post-backward
        (``reduce_scatter_max_input_buffers``, 1) or the end of backward."""
        if self.rs_input is not None:
            nbytes, start = self.rs_input
            self.memory.append((nbytes, start, (self.tail, "end")))
            self.rs_input = None


def fsdp_step(graph: Graph, times: Mapping[str, float], units: Sequence[FsdpUnit], schedule: FsdpSchedule,
              network: FsdpNetwork, host: HostCosts = HostCosts(), memory: FsdpMemory = FsdpMemory()) -> FsdpStepResult:
    """FSDP2's step for ``units`` (:func:`.fsdp_units.fsdp_units`) under ``schedule`` (module docstring).

    Raises
    ------
    DlschedError
        An inference graph, a bad network or host cost, a schedule that does not fit the units, a unit
        whose parameters no forward op reads.
    OracleError
        ``times`` misses a compute op or has a bad time.
    """
    network.check()
    host.check()
    check_schedule(units, schedule)
    compute_ops = graph.compute_ops()
    check_times(graph, times, [op.name for op in compute_ops])
    b = _Builder(units, schedule, network, host)
    program = [op for op in graph.topological_order() if op.kind == COMPUTE]
    spans = _spans(graph, units, {op.name: i for i, op in enumerate(program)})
    hooks = _hook_points(units, spans, len(program))
    node_of: dict[str, int] = {}
    for i, op in enumerate(program + [None]):
        for action, unit in hooks.get(i, []):
            u = b.by_name[unit]
            if host.per_hook_s:
                b.run_compute(host.per_hook_s)  # FSDP2's own bookkeeping in the hook
                b.copies_s += host.per_hook_s
            if action == "pre_forward":
                b.pre(u, schedule.forward_prefetch.get(unit, ()))
            elif action == "post_forward":
                if unit != ROOT and schedule.reshards(unit):
                    b.reshard(u)
            elif action == "pre_backward":
                b.pre_backward(u, _backward_prefetch(units, unit, schedule))
            else:
                b.post_backward(u)
        if op is not None:
            node_of[op.name] = b.run_compute(float(times[op.name]), hook=False)
    b.free_rs_input()
    shard_total = sum(u.shard_bytes for u in units)
    opt_s = host.optimizer_s(shard_total)
    end = b.run_compute(opt_s)
    ready, start, finish = b.dag.run((host.compute_beside_comm, host.comm_beside_compute))
    step = finish[end]
    collectives = tuple(Collective(kind, unit, ready[n], start[n], finish[n], nbytes)
                        for kind, unit, n, nbytes in b.collectives)
    base = shard_total * (1 + max(0, int(memory.optimizer_copies)))
    when = {"ready": ready, "end": finish}
    intervals = [(when[a[1]][a[0]], when[e[1]][e[0]] if e is not None else step, nb) for nb, a, e in b.memory]
    intervals += _activation_intervals(graph, memory.activations, node_of, finish, step)
    peak, at = _peak(base, intervals)
    return FsdpStepResult(step, sum(float(times[op.name]) for op in compute_ops) + b.copies_s,
                          sum(network.cost(k, nb) for k, _, _, nb in b.collectives), opt_s, peak_bytes=peak,
                          collectives=collectives, peak_at_s=at)


def _spans(graph: Graph, units: Sequence[FsdpUnit], pos: Mapping[str, int]) -> dict[str, tuple]:
    """Per unit: (first forward reader, last forward reader, first backward op, last gradient producer) as
    positions in program order; ``None`` where there is none."""
    out = {}
    for u in units:
        fwd, bwd, grads = [], [], []
        for p in u.params:
            for s in graph.successors(p):
                if s in pos:
                    (fwd if graph.op(s).phase == "forward" else bwd).append(pos[s])
        for s in graph.sends():
            if s.param in set(u.params):
                grads.extend(pos[q] for q in graph.predecessors(s.name) if q in pos)
        if not fwd and u.module != ROOT:
            raise DlschedError(f"unit {u.label}: no forward op reads its parameters, so FSDP would never "
                               "all-gather it; leave it out of the units")
        first_b = min(bwd + grads) if bwd or grads else None
        out[u.module] = (min(fwd) if fwd else 0, max(fwd) if fwd else 0, first_b, max(grads) if grads else None)
    return out


def _hook_points(units, spans, n_ops) -> dict[int, list[tuple[str, str]]]:
    """Hook actions by the position of the compute op they run before (``n_ops``: after the last)."""
    hooks: dict[int, list[tuple[str, str]]] = {}

    def at(i, action, unit):
        hooks.setdefault(i, []).append((action, unit))
    first_backward = min((s[2] for s in spans.values() if s[2] is not None), default=n_ops)
    for u in units:
        f0, f1, b0, b1 = spans[u.module]
        at(0 if u.module == ROOT else f0, "pre_forward", u.module)
        if u.module != ROOT:
            at(f1 + 1, "post_forward", u.module)
    has_root = any(u.module == ROOT for u in units)
    if has_root:  # the root's post-forward ends forward; its pre-backward comes first in backward
        at(first_backward, "post_forward", ROOT)
        at(first_backward, "pre_backward", ROOT)
    for u in units:
        f0, f1, b0, b1 = spans[u.module]
        if u.module != ROOT:
            at(b0 if b0 is not None else n_ops, "pre_backward", u.module)
            at(b1 + 1 if b1 is not None else n_ops, "post_backward", u.module)
    if has_root:
        at(n_ops, "post_backward", ROOT)
    order = {"post_forward": 0, "post_backward": 1, "pre_forward": 2, "pre_backward": 3}
    for i, acts in hooks.items():  # what ends at the previous op first; the root's pre-hooks before others'
        acts.sort(key=lambda a: (order[a[0]], a[1] != ROOT))
        if i == n_ops:  # the final callback: units' post-backward before the root's
            acts.sort(key=lambda a: (order[a[0]], a[1] == ROOT))
    return hooks


def _backward_prefetch(units: Sequence[FsdpUnit], unit: str, schedule: FsdpSchedule) -> Sequence[str]:
    """The explicit list, or FSDP2's implicit one: the unit before it in forward order (the root is last in
    ``post_forward_order``, so it prefetches the last unit)."""
    if unit in schedule.backward_prefetch:
        return schedule.backward_prefetch[unit]
    order = [u.module for u in units if u.module != ROOT] + [u.module for u in units if u.module == ROOT]
    i = order.index(unit)
    return [order[i - 1]] if i > 0 else []


def _activation_intervals(graph, activations, node_of, finish, step):
    out = []
    for name, nbytes in activations.items():
        if name not in node_of or nbytes <= 0:
            continue
        readers = [node_of[s] for s in graph.successors(name) if s in node_of and graph.op(s).phase == "backward"]
        out.append((finish[node_of[name]], max((finish[r] for r in readers), default=step), nbytes))
    return out


def _peak(base: float, intervals) -> tuple[float, float]:
    """The most bytes alive at once (an interval holds ``[start, end)``), and when."""
    events = sorted([(s, 1, nb) for s, e, nb in intervals if e > s] + [(e, 0, -nb) for s, e, nb in intervals if e > s],
                    key=lambda ev: (ev[0], ev[1]))
    alive = peak = base
    at = 0.0
    for t, _, delta in events:
        alive += delta
        if alive > peak + 1e-9:
            peak, at = alive, t
    return float(peak), float(at)
