"""One process's DDP training step in steady state, and the ordered all-reduce's (issue 29, DESIGN §4.8).

Resources (TicTac §3.1): one **compute** resource that runs forward,
backward and everything the process's own thread does, and one **link** that
runs one all-reduce at a time. Each runs one op at a time, never preempts and
never idles while it has a ready op; the compute resource takes ready ops
first-ready-first (hooks before graph ops, then canonical order, on ties):
:class:`.two_lanes.LaneDag`.

**Stock DDP** (:func:`ddp_step`). Forward and backward run as the DAG says.
Bucket ``b`` (:func:`.ddp_buckets.ddp_buckets_of`, launch order) is ready
when its last gradient is; DDP launches bucket ``b`` only after bucket
``b−1``, so ``start_b = max(ready_b, end_{b−1})`` and
``end_b = start_b + allreduce(bytes_b)`` (:mod:`.collective_cost`), overlapping
the rest of backward. ``backward()`` returns only when every bucket is done
(DDP's finalize waits for them), then the optimizer runs on the compute
resource, then the next forward: the step is ``max(backward, last bucket) +
optimizer``. DDP's autograd hook divides each gradient by the world size
when it is ready, before its bucket can go: a compute op of ``bytes / copy
bandwidth``. With ``gradient_as_bucket_view=True`` that is the division in
place; with ``False`` it is the copy into the bucket (scaled as it copies,
``Reducer::mark_variable_ready_dense``), and finalize copies the bucket back
into the gradients (``model bytes / copy bandwidth`` before the optimizer).

**The optimizer** is not in a DAG (the capture stops at the gradients), so
its time is an elementwise pass over the parameters:
``optimizer_s_per_byte × model bytes`` (:class:`HostCosts`), by default
plain SGD's traffic, reading the parameter and the gradient and writing the
parameter, three bytes moved per parameter byte at the copy bandwidth. A
momentum or Adam optimizer moves more: give its cost per byte.

**The ordered all-reduce** (:func:`ordered_step`): pieces in the schedule's
issue order (:mod:`.allreduce_order`), piece ``i`` issued once its gradients
are ready and piece ``i−1`` has been issued; a piece of several slices is
first gathered into its buffer by the hook's thread (``bytes / copy
bandwidth`` on the link before its collective, counted in comm), a piece of
one slice is reduced in place. The thread lands the pieces in issue order,
each with one compute op: the division by the world size and, for a gathered
piece, the copy back (``bytes / copy bandwidth`` each, counted in compute),
then the optimizer's share of the parameters it completes; ``backward()``
returns when backward's compute ends,
and in the next iteration each op waits only for its own parameters'
updates. Iterations overlap, so :data:`ITERATIONS` are simulated
(unrolled into one DAG) and the step time is the steady-state period, the
mean over two iterations before the last (the last one's updates have no
next forward to compete with).

Both report ``U = compute + comm + optimizer`` (everything serialised) and
``L = max(compute + optimizer, comm)`` (every resource always busy; the
optimizer runs on the compute resource), the exposed communication
``T − compute − optimizer`` and ``E = (U − T)/(U − L)`` (TicTac §3.2;
``E = 1`` when ``U = L``). ``L ≤ T ≤ U`` holds for both.

**Contention.** On CPU a collective's reductions and socket copies share the
cores with backward. With :class:`HostCosts`' ``compute_beside_comm = f`` and
``comm_beside_compute = g`` above 1, a compute op advances at ``1/f`` of its
speed while an all-reduce is in flight and an all-reduce at ``1/g`` while
compute runs (an event loop over both lanes' remaining work). ``L ≤ T``
still holds; ``T ≤ U`` need not: overlapping can lose to serialising.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> from dlsched.analyses.ddp_buckets import ddp_buckets_of
>>> g, t = random_dag(16, 6, training=True, seed=2)
>>> net = Network(alpha=1e-4, beta=1e8, workers=4)
>>> step = ddp_step(g, t, ddp_buckets_of(g, bucket_cap_mb=0.05), net)
>>> step.lower_s <= step.step_s <= step.upper_s
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from dlsched.dag import COMPUTE, RECV, SEND, Graph
from dlsched.errors import DlschedError

from .allreduce_order import Piece, param_elements
from .collective_cost import allreduce_cost, check_network
from .ddp_buckets import DDPBucket
from .properties import check_times
from .two_lanes import COMPUTE_LANE, INSTANT, LINK_LANE, LaneDag

#: Iterations unrolled for the ordered all-reduce; the step is the mean period over the two before the last
#: (the last has no next forward to compete with its updates).
ITERATIONS = 6
#: Default bandwidth of a gradient copy (bytes/s): a host memcpy's order of magnitude.
DEFAULT_COPY_BPS = 10e9
#: Bytes plain SGD moves per parameter byte (reads the parameter and its gradient, writes the parameter).
SGD_BYTES_MOVED = 3
#: The largest contention slow-down accepted (:class:`HostCosts`).
MAX_SLOWDOWN = 4.0



@dataclass(frozen=True)
class Network:
    """The all-reduce's α (seconds), β (bytes/s), the processes and the algorithm (:mod:`.collective_cost`)."""

    alpha: float
    beta: float
    workers: int
    algorithm: str = "ring"

    def cost(self, nbytes: float) -> float:
        """Seconds to all-reduce ``nbytes``."""
        return allreduce_cost(self.algorithm, self.workers, nbytes, self.alpha, self.beta)

    def split(self, nbytes: float) -> tuple[float, float]:
        """``(α part, bytes/β part)`` of one all-reduce of ``nbytes``."""
        latency = self.cost(0)
        return latency, self.cost(nbytes) - latency


@dataclass(frozen=True)
class HostCosts:
    """What the process's own thread pays besides the DAG: gradient copies (bytes/s) and the optimizer
    (seconds per parameter byte; ``None``: plain SGD, :data:`SGD_BYTES_MOVED` bytes at the copy bandwidth).

    ``compute_beside_comm`` and ``comm_beside_compute``: how many times slower compute runs while an all-reduce
    is in flight, and an all-reduce while compute runs (a CPU collective's reductions and socket copies share
    the cores with backward; 1: no contention). Measured by ``validate --dp ddp`` (DESIGN §4.8).

    ``per_piece_s``: what one of the ordered all-reduce's collectives, issued by its thread, costs beside
    compute beyond its time alone (on a busy CPU its threads wait to be scheduled), charged on the link before
    each piece; measured by ``validate --dp ddp``'s stream step
    (:attr:`dlsched.jobs.ddp_caps_run.DDPCapsRun.collective_excess_s`).

    ``per_hook_s``: what FSDP2's own hooks (pre- and post-forward, pre- and post-backward of each unit) cost
    the training thread besides collectives and copies; measured on a one-process group by
    :mod:`dlsched.jobs.fsdp_run` (DESIGN §4.10)."""

    copy_bandwidth: float = DEFAULT_COPY_BPS
    optimizer_s_per_byte: float | None = None
    compute_beside_comm: float = 1.0
    comm_beside_compute: float = 1.0
    per_piece_s: float = 0.0
    per_hook_s: float = 0.0

    def optimizer_s(self, nbytes: float) -> float:
        per = SGD_BYTES_MOVED / self.copy_bandwidth if self.optimizer_s_per_byte is None else self.optimizer_s_per_byte
        return nbytes * per

    def check(self) -> None:
        if not self.copy_bandwidth > 0 or self.copy_bandwidth == float("inf"):
            raise DlschedError(f"the copy bandwidth must be a finite number of bytes/s > 0, got {self.copy_bandwidth}")
        if self.optimizer_s_per_byte is not None and not 0 <= self.optimizer_s_per_byte < float("inf"):
            raise DlschedError(f"the optimizer's cost must be a finite number of seconds per byte ≥ 0, "
                               f"got {self.optimizer_s_per_byte}")
        for name in ("per_piece_s", "per_hook_s"):
            if not 0 <= getattr(self, name) < float("inf"):
                raise DlschedError(f"the cost per {name.split('_')[1]} must be a finite number of seconds ≥ 0, "
                                   f"got {getattr(self, name)}")
        for name in ("compute_beside_comm", "comm_beside_compute"):
            if not 1 <= getattr(self, name) <= MAX_SLOWDOWN:
                raise DlschedError(f"{name.replace('_', ' ')} must be a slow-down from 1 to {MAX_SLOWDOWN:g}, "
                                   f"got {getattr(self, name)}")


@dataclass(frozen=True)
class Transfer:
    """One bucket's (or piece's) all-reduce: when it was ready, started and ended (seconds from the step's
    start) and its bytes."""

    ready: float
    start: float
    end: float
    bytes: int


@dataclass(frozen=True)
class StepResult:
    """A simulated step: its time and what it is made of (seconds), each all-reduce, and TicTac's figures."""

    step_s: float
    compute_s: float
    comm_s: float
    optimizer_s: float
    transfers: tuple[Transfer, ...] = field(default_factory=tuple)
    latency_s: float = 0.0  # of comm_s, the α terms

    @property
    def exposed_comm_s(self) -> float:
        return max(0.0, self.step_s - self.compute_s - self.optimizer_s)

    @property
    def upper_s(self) -> float:
        return self.compute_s + self.comm_s + self.optimizer_s

    @property
    def lower_s(self) -> float:
        return max(self.compute_s + self.optimizer_s, self.comm_s)

    @property
    def efficiency(self) -> float:
        span = self.upper_s - self.lower_s
        return 1.0 if span <= 1e-15 else min(1.0, max(0.0, (self.upper_s - self.step_s) / span))

    @property
    def speedup_bound(self) -> float:
        """TicTac's ``S = (U − L)/L``: the most any order can gain over the worst, for this step."""
        return 0.0 if self.lower_s <= 0 else (self.upper_s - self.lower_s) / self.lower_s

    def figures(self) -> dict:
        return {"step_s": self.step_s, "compute_s": self.compute_s, "comm_s": self.comm_s,
                "optimizer_s": self.optimizer_s, "exposed_comm_s": self.exposed_comm_s,
                "comm_latency_s": self.latency_s, "L_s": self.lower_s, "U_s": self.upper_s,
                "E": self.efficiency, "S": self.speedup_bound, "allreduces": len(self.transfers)}


def _check(graph: Graph, times: Mapping[str, float], network: Network, host: HostCosts) -> list:
    if not graph.sends():
        raise DlschedError(f"{graph.name} has no gradients to all-reduce: it is an inference graph; load it "
                           "with --mode training")
    if network.workers < 2:
        raise DlschedError(f"data parallelism needs at least 2 workers, got {network.workers}")
    check_network(network.alpha, network.beta)
    host.check()
    compute = graph.compute_ops()
    check_times(graph, times, [op.name for op in compute])
    return compute


def _iteration(dag: LaneDag, graph: Graph, times: Mapping[str, float], begin: int,
               released: Mapping[str, int]) -> tuple[dict[str, int], list[int]]:
    """Add one iteration's forward and backward: node of every op by name, and the compute nodes.

    ``begin`` precedes every op; ``released[p]``, when given, precedes parameter ``p``'s recv."""
    node: dict[str, int] = {}
    compute: list[int] = []
    for op in graph.topological_order():
        preds = [node[p] for p in graph.predecessors(op.name)]
        if op.kind == COMPUTE:
            node[op.name] = dag.add(float(times[op.name]), COMPUTE_LANE, preds or [begin])
            compute.append(node[op.name])
        elif op.kind == RECV:
            node[op.name] = dag.add(0.0, INSTANT, [begin] + ([released[op.name]] if op.name in released else []))
        else:
            node[op.name] = dag.add(0.0, INSTANT, preds or [begin])
    return node, compute


def _with_division(graph: Graph, times: Mapping[str, float], divide: Mapping[str, float]) -> dict[str, float]:
    """``times`` with each gradient's division (``divide[param]`` seconds) added to the op that produced it."""
    out = dict(times)
    for s in graph.sends():
        op = next(iter(graph.predecessors(s.name)))
        out[op] = out.get(op, 0.0) + divide[s.param]
    return out


def _grad_node(graph: Graph, node: Mapping[str, int]) -> dict[str, int]:
    return {s.param: node[s.name] for s in graph.of_kind(SEND)}


def ddp_step(graph: Graph, times: Mapping[str, float], buckets: Sequence[DDPBucket], network: Network,
             gradient_as_bucket_view: bool = True, host: HostCosts = HostCosts()) -> StepResult:
    """Stock DDP's steady-state step (module docstring) with ``buckets`` in launch order.

    Raises
    ------
    DlschedError
        An inference graph, fewer than 2 workers, a bad network or host cost,
        buckets that do not cover the gradients once each.
    OracleError
        ``times`` misses a compute op or has a bad time.
    """
    compute_ops = _check(graph, times, network, host)
    sends = {s.param: s for s in graph.sends()}
    named = [p for b in buckets for p in b.params]
    if sorted(named) != sorted(sends):
        raise DlschedError(f"the buckets do not hold each of {graph.name}'s {len(sends)} gradients exactly once")
    dag = LaneDag()
    begin = dag.add(0.0, INSTANT)
    # the autograd hook divides each gradient by the world size: in place, right after the op that made it
    # (so that op takes longer), or as it copies the gradient into its bucket
    divide = {p: sends[p].bytes / host.copy_bandwidth for p in named}
    node, compute = _iteration(dag, graph, _with_division(graph, times, divide) if gradient_as_bucket_view
                               else times, begin, {})
    grad = _grad_node(graph, node)
    model_bytes = sum(s.bytes for s in sends.values())
    copy_s = sum(divide.values())
    if not gradient_as_bucket_view:
        for p in named:
            grad[p] = dag.add(divide[p], COMPUTE_LANE, [grad[p]], hook=True)
        copy_s *= 2  # and back out in finalize
    backward_done = dag.add(0.0, INSTANT, compute)
    links, prev = [], None
    for b in buckets:
        links.append(dag.add(network.cost(b.bytes), LINK_LANE, [grad[p] for p in b.params] + ([prev] if prev is not None
                                                                                          else [])))
        prev = links[-1]
    opt_s = host.optimizer_s(model_bytes)
    finalize = dag.add((0.0 if gradient_as_bucket_view else model_bytes / host.copy_bandwidth) + opt_s, COMPUTE_LANE,
                       [backward_done, prev], hook=True)
    ready, start, end = dag.run((host.compute_beside_comm, host.comm_beside_compute))
    transfers = tuple(Transfer(max(end[grad[p]] for p in b.params), start[i], end[i], int(b.bytes))
                      for b, i in zip(buckets, links))
    lat = sum(network.split(b.bytes)[0] for b in buckets)
    return StepResult(end[finalize], sum(float(times[op.name]) for op in compute_ops) + copy_s,
                      sum(network.cost(b.bytes) for b in buckets), opt_s, transfers, lat)


def ordered_step(graph: Graph, times: Mapping[str, float], pieces: Sequence[Piece], network: Network,
                 host: HostCosts = HostCosts(), iterations: int = ITERATIONS) -> StepResult:
    """The ordered all-reduce's steady-state step (module docstring), ``pieces`` in issue order.

    Raises
    ------
    DlschedError
        As :func:`ddp_step`; pieces that do not cover every element of every gradient exactly once.
    OracleError
        ``times`` misses a compute op or has a bad time.
    """
    compute_ops = _check(graph, times, network, host)
    if iterations < 4:
        raise DlschedError(f"the ordered step needs at least 4 iterations to reach its period, got {iterations}")
    sends = {s.param: s for s in graph.sends()}
    check_cover(pieces, param_elements(graph))
    last_piece = {p: i for i, piece in enumerate(pieces) for p in piece.params}  # issue order: the last covers it
    completes: dict[int, list[str]] = {}
    for p, i in last_piece.items():
        completes.setdefault(i, []).append(p)
    model_bytes = sum(s.bytes for s in sends.values())
    dag = LaneDag()
    begin = dag.add(0.0, INSTANT)
    released: dict[str, int] = {}
    prev_link, marks, firsts, link_nodes = None, [], [], []
    for _ in range(iterations):
        node, compute = _iteration(dag, graph, times, begin, released)
        grad = _grad_node(graph, node)
        links, updates = [], []
        for i, piece in enumerate(pieces):
            preds = [grad[p] for p in piece.params] + ([prev_link] if prev_link is not None else [])
            prev_link = dag.add(host.per_piece_s + _gather_s(piece, host) + network.cost(piece.bytes), LINK_LANE,
                                preds)
            links.append(prev_link)
        released, prev_apply = {}, None
        for i, piece in enumerate(pieces):  # one thread lands them in issue order: divide, scatter, update
            params = completes.get(i, [])
            secs = _apply_copies(piece) * piece.bytes / host.copy_bandwidth
            prev_apply = dag.add(secs + host.optimizer_s(sum(sends[p].bytes for p in params)), COMPUTE_LANE,
                                 [links[i]] + ([prev_apply] if prev_apply is not None else []), hook=True)
            updates.append(prev_apply)
            released.update({p: prev_apply for p in params})
        firsts.append(begin)
        marks.append(dag.add(0.0, INSTANT, compute + updates))
        link_nodes.append(links)
        begin = dag.add(0.0, INSTANT, compute)  # backward() returns: the next forward may start
    ready, start, end = dag.run((host.compute_beside_comm, host.comm_beside_compute))
    k = iterations - 3
    period = (end[marks[-2]] - end[marks[-4]]) / 2
    t0 = end[firsts[k]]
    transfers = tuple(Transfer(ready[i] - t0, start[i] - t0, end[i] - t0, int(p.bytes))
                      for p, i in zip(pieces, link_nodes[k]))
    lat = sum(network.split(p.bytes)[0] for p in pieces)
    copy_s = sum(_apply_copies(p) * p.bytes / host.copy_bandwidth for p in pieces)
    return StepResult(period, sum(float(times[op.name]) for op in compute_ops) + copy_s,
                      sum(network.cost(p.bytes) + _gather_s(p, host) for p in pieces), host.optimizer_s(model_bytes),
                      transfers, lat)


def _apply_copies(piece: Piece) -> int:
    """Passes over a landed piece before its updates: the division by the world size, and for a piece of
    several slices the copy back into the gradients (one slice is reduced in place)."""
    return 1 + (len(piece.slices) > 1)


def _gather_s(piece: Piece, host: HostCosts) -> float:
    """Seconds the hook's thread spends gathering a piece of several slices into its buffer, right before its
    collective (charged on the link, as the hand-off is: the thread does it, not the training thread)."""
    return piece.bytes / host.copy_bandwidth if len(piece.slices) > 1 else 0.0


def check_cover(pieces: Sequence[Piece], elements: Mapping[str, int]) -> None:
    """Refuse pieces that miss, repeat or overrun an element of a parameter, or name an unknown one.

    Examples
    --------
    >>> check_cover([Piece((("w", 0, 2),), 8), Piece((("w", 2, 4),), 8)], {"w": 4})
    >>> check_cover([Piece((("w", 0, 3),), 12)], {"w": 4})
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: the pieces do not cover parameter w's 4 elements exactly once: they give [0:3]
    """
    spans: dict[str, list[tuple[int, int]]] = {p: [] for p in elements}
    for piece in pieces:
        for p, a, b in piece.slices:
            if p not in spans:
                raise DlschedError(f"a piece names {p!r}, which is not a trained parameter of the model")
            spans[p].append((int(a), int(b)))
    for p, n in elements.items():
        got = sorted(spans[p])
        at = 0
        for a, b in got:
            if a != at or b <= a:
                break
            at = b
        else:
            if at == n:
                continue
        shown = ", ".join(f"[{a}:{b}]" for a, b in got[:6]) or "nothing"
        raise DlschedError(f"the pieces do not cover parameter {p}'s {n} elements exactly once: they give {shown}")
