"""Per-op time oracle for a PyTorch factory, measured by an fx Interpreter (DESIGN §3).

The factory is traced exactly as :mod:`dlsched.importers.torch_importer` does
(the same :func:`~dlsched.importers.torch_importer.trace_factory`), so the
profiled names are the DAG's compute-op names. :class:`TimingInterpreter`
(built like torch.fx's ``passes/shape_prop.py``) runs the traced graph node by
node and times every compute node: after ``warmup`` whole-graph runs, the graph
runs ``runs`` more times and each op keeps its minimum (``Time(op)``, TicTac
§3.1) and median. Inference runs under ``torch.no_grad()``: the symbolic-trace
graph, or the aten-level ``make_fx`` forward graph of a model symbolic tracing
cannot handle (the capture recorded in the DAG is used again). Training runs
the ``make_fx`` joint graph, which already holds the backward ops, with grad
mode on as in a real step (an LSTM's CPU kernel keeps its backward workspace
only then); its arguments require no grad, so autograd does not record the
explicit backward a second time.

Profiling runs with ``threads`` intra-op threads (``torch.set_num_threads``,
1 by default): on a shared machine, more threads make each op's time depend
on what else runs there. A node's arguments are fetched from the
interpreter's environment before its clock starts, so the time is the op's
call alone (on small ops the interpreter's bookkeeping was half of it).

On CPU a node is timed with :func:`time.perf_counter` around its (synchronous)
execution. On CUDA every node is bracketed by ``torch.cuda.Event``s and the
device is synchronised after each run before the events are read, so
asynchronous kernel launches are never timed with the host clock. Events alone
would still time the host: the GPU reaches the start event at once and then
waits for the op's launches, so a ``getitem`` that launches nothing took up to 18 us
and ResNet-50's training ops summed to 29.3 ms against 16.9 ms of kernels in a
real step (H200). So each node is *led* by a spin kernel (``torch.cuda._sleep``)
longer than the op's host dispatch (twice the last run's, at least
:data:`LEAD_MIN_S`): the GPU reaches the start event only once the op's kernels
are queued behind it, as in a real step, where the host runs ahead of the GPU.
The time of two events with nothing between them is taken off every op.

Transfers (recv/send) are not profiled here; the network model times them.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from dlsched.dag import Graph
from dlsched.devices import check_device
from dlsched.errors import DlschedError
from dlsched.profiling.oracle_times import model_batch

from .schema import check_threads, oracle_frame, oracle_row

_COMPUTE_NODES = ("call_module", "call_function", "call_method")
LEAD_MIN_S = 50e-6  # the shortest spin before a CUDA op: longer than a small op's dispatch


def _interpreter_class():
    """Build :class:`TimingInterpreter` lazily (torch is imported only when profiling)."""
    import torch

    class TimingInterpreter(torch.fx.Interpreter):
        """An fx Interpreter that records each compute node's execution time.

        Parameters
        ----------
        gm : torch.fx.GraphModule
        device : {"cpu", "cuda"}
        timed : set of str
            fx node names to time (the DAG's compute ops).

        After :meth:`run`, ``last`` maps each timed node name to its time in
        seconds for that run.
        """

        def __init__(self, gm, device: str = "cpu", timed: set | None = None):
            super().__init__(gm)
            self.device = device
            self.timed = timed if timed is not None else {
                n.name for n in gm.graph.nodes if n.op in _COMPUTE_NODES}
            self.last: dict[str, float] = {}
            self._events: dict[str, tuple] = {}
            self._dispatch: dict[str, float] = {}  # each op's host dispatch in the last run (CUDA)
            self._cycles_per_s = _spin_rate() if device == "cuda" else 0.0
            self._floor = _event_floor(self._cycles_per_s) if device == "cuda" else 0.0

        def run(self, *args, **kwargs):
            self.last = {}
            self._pending: list[str] = []
            result = super().run(*args, **kwargs)
            if self.device == "cuda":
                torch.cuda.synchronize()
                for name in self._pending:
                    start, end = self._events[name]
                    self.last[name] = max(0.0, start.elapsed_time(end) / 1e3 - self._floor)  # ms → s
            return result

        def run_node(self, n):
            if n.name not in self.timed:
                return super().run_node(n)
            # As fx's Interpreter.run_node, but the arguments are fetched before the clock starts: on small
            # ops that bookkeeping would be a large, noisy share of the time.
            with self._set_current_node(n):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                call = getattr(self, n.op)
                if self.device == "cuda":
                    return self._call_on_gpu(n.name, call, n.target, args, kwargs)
                start = time.perf_counter()
                result = call(n.target, args, kwargs)
                self.last[n.name] = time.perf_counter() - start
                return result

        def _call_on_gpu(self, name, call, target, args, kwargs):
            """The call between two events, led by a spin that outlasts its dispatch; read after the run."""
            pair = self._events.get(name)
            if pair is None:
                pair = self._events[name] = (torch.cuda.Event(enable_timing=True),
                                             torch.cuda.Event(enable_timing=True))
            lead = max(LEAD_MIN_S, 2 * self._dispatch.get(name, LEAD_MIN_S))
            torch.cuda._sleep(int(lead * self._cycles_per_s))
            pair[0].record()
            start = time.perf_counter()
            result = call(target, args, kwargs)
            self._dispatch[name] = time.perf_counter() - start
            pair[1].record()
            self._pending.append(name)
            return result

    return TimingInterpreter


def _spin_rate() -> float:
    """Cycles per second of ``torch.cuda._sleep``'s spin, the fastest of three: at the highest clock a lead
    is shortest, so a lead sized at that rate is never shorter than meant."""
    import torch

    cycles, rates = 2_000_000, []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        rates.append(cycles / max(start.elapsed_time(end) / 1e3, 1e-9))
    return max(rates)


def _event_floor(cycles_per_s: float) -> float:
    """Seconds between two events with nothing between them, after a lead (the least of 20): the timer's own
    cost, taken off every op (1.25 us on an H200, where ResNet-50's training graph has 634 ops that launch
    nothing)."""
    import torch

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
    for start, end in pairs:
        torch.cuda._sleep(int(LEAD_MIN_S * cycles_per_s))
        start.record()
        end.record()
    torch.cuda.synchronize()
    return min(start.elapsed_time(end) for start, end in pairs) / 1e3


def timing_interpreter(gm, device: str = "cpu", timed: set | None = None):
    """A ``TimingInterpreter`` over ``gm`` (see :func:`_interpreter_class`)."""
    return _interpreter_class()(gm, device=device, timed=timed)


def _to_device(traced, device: str):
    import torch

    if device == "cpu":
        return traced.gm, traced.args
    # The graph stays the one traced on CPU (the DAG's names: on CUDA, make_fx would record
    # cudnn_batch_norm instead of native_batch_norm); only where its tensors live changes.
    target = torch.device(device)
    gm = traced.gm.to(target)
    for node in gm.graph.nodes:
        dev = node.kwargs.get("device")
        if isinstance(dev, torch.device) and dev.type == "cpu":  # make_fx bakes in factory devices (zeros, …)
            node.kwargs = {**node.kwargs, "device": target}
        elif node.op == "get_attr":  # constants make_fx stored as plain attributes
            owner_path, _, attr = node.target.rpartition(".")
            owner = gm.get_submodule(owner_path) if owner_path else gm
            value = getattr(owner, attr)
            if isinstance(value, torch.Tensor) and value.device != target:
                setattr(owner, attr, value.to(target))
    gm.recompile()
    args = tuple(a.to(target) if isinstance(a, torch.Tensor) else a for a in traced.args)
    return gm, args


def profile_torch(spec: str, graph: Graph, device: str = "cpu", runs: int = 5, warmup: int = 1,
                  progress: Callable[[int, int], Any] | None = None, threads: int = 1):
    """Time every compute op of ``graph`` on the real PyTorch model ``spec`` (DESIGN §3).

    Parameters
    ----------
    spec : str
        The factory the graph was imported from (``file.py:fn`` or ``module:fn``).
    graph : Graph
        The DAG from :func:`~dlsched.importers.torch_importer.import_factory`;
        its ``mode`` and ``source["batch"]`` select what is traced and run.
    device : {"cpu", "cuda"}
    runs : int
        Timed whole-graph runs after warm-up (each op keeps min and median).
    warmup : int
        Untimed whole-graph runs first.
    progress : callable, optional
        ``progress(done, total)`` after each whole-graph run (warm-up included),
        ``total = warmup + runs``.
    threads : int
        Intra-op threads (``torch.set_num_threads``) while profiling; the
        process's setting is restored afterwards.

    Returns
    -------
    (pandas.DataFrame, dict)
        Columns ``op, time, runs, median, op_type, resource, source``: one row
        per timed compute op, in canonical order, ``time`` the minimum in
        seconds, ``source = "profiled"``; ``df.attrs["batch"]`` is the batch
        the model ran at. The dict maps each compute op that could not be
        timed to the reason.

    Raises
    ------
    DlschedError
        ``runs < 1``, ``warmup < 0``, ``threads < 1``, an unknown device, CUDA
        requested but not available, or the model fails while running.
    ImportFailure
        The factory cannot be loaded or traced.

    Examples
    --------
    >>> from dlsched.importers.torch_importer import import_factory
    >>> spec = "examples/torch_models.py:small_cnn"
    >>> g = import_factory(spec, batch=4)
    >>> df, missing = profile_torch(spec, g, runs=3)
    >>> bool((df["time"] <= df["median"]).all()), missing
    (True, {})
    """
    import torch

    from dlsched.importers.torch_importer import trace_factory

    if runs < 1:
        raise DlschedError(f"--runs must be at least 1, got {runs}")
    if warmup < 0:
        raise DlschedError(f"--warmup must be 0 or more, got {warmup}")
    check_threads(threads)
    check_device(device, "torch")
    batch = (graph.source or {}).get("batch")
    # The capture the importer used (symbolic_trace or make_fx), so the timed nodes are the DAG's ops.
    traced = trace_factory(spec, mode=graph.mode, batch=batch, buffers=False, shapes=False,
                           capture=graph.capture)
    compute = graph.compute_ops()
    by_op = {op: node for node, op in traced.op_names.items()}
    fx_kind = {n.name: n.op for n in traced.gm.graph.nodes}
    timed = {by_op[op.name] for op in compute if op.name in by_op and fx_kind[by_op[op.name]] in _COMPUTE_NODES}
    gm, args = _to_device(traced, device)
    interp = timing_interpreter(gm, device=device, timed=timed)
    samples: dict[str, list[float]] = {name: [] for name in timed}
    total = warmup + runs
    # Training graphs mutate their buffer arguments (BatchNorm running stats): give each run fresh copies.
    clone = traced.mode == "training"
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # Training: grad mode on, as in a real step, for kernels that keep state for their backward only then
        # (mkldnn_rnn_layer's workspace); the arguments require no grad, so autograd still records nothing.
        with torch.set_grad_enabled(traced.mode == "training"):
            _run(interp, args, clone, total, warmup, samples, progress, spec, device)
    finally:
        torch.set_num_threads(saved_threads)
    rows, missing = [], {}
    for op in compute:
        node = by_op.get(op.name)
        if node is None:
            missing[op.name] = (f"no node named {op.name!r} in the traced model {spec} "
                                f"(the DAG was made from another model or version)")
            continue
        if node not in timed:
            missing[op.name] = f"fx node {node!r} is not a compute node of the traced model"
            continue
        ts = samples[node]
        if len(ts) < runs:
            missing[op.name] = f"executed in {len(ts)} of {runs} runs (the traced graph skipped it)"
            continue
        rows.append(oracle_row(op, min(ts), runs=len(ts), median=statistics.median(ts), source="profiled"))
    df = oracle_frame(rows)
    df.attrs["batch"] = model_batch(graph)[0]  # --batch, else the factory's example batch
    return df, missing


def _run(interp, args, clone: bool, total: int, warmup: int, samples: dict, progress, spec: str, device: str):
    """``total`` whole-graph runs; the times of those after ``warmup`` are appended to ``samples``."""
    import torch

    for i in range(total):
        run_args = tuple(a.clone() if clone and isinstance(a, torch.Tensor) else a for a in args)
        try:
            interp.run(*run_args)
        except Exception as e:
            raise DlschedError(f"{spec}: running the traced model on {device} failed "
                               f"({type(e).__name__}: {e})") from None
        if i >= warmup:
            for name, t in interp.last.items():
                samples[name].append(t)
        if progress is not None:
            progress(i + 1, total)


__all__ = ["profile_torch", "timing_interpreter"]
