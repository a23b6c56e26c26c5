"""The ordered all-reduce: DDP's gradient sync in a fixed issue order, the next forward starting early.

TicTac's point, carried over to all-reduce (issue 29 item 4): in stock DDP the
next forward waits for every bucket, and the buckets leave in backward order, so
the first layers, which the next forward needs first, arrive last. Here the
gradients are all-reduced as *pieces* (flat slices of parameters, contract in
``docs/ordered-allreduce.md``) in an issue order computed offline by dlsched, so
a large low-priority bucket can be split (as ByteScheduler and P3 do) and the
first layers' pieces sent early; each parameter is updated as soon as its last
piece is in, and a forward pre-hook on each module waits only for that module's
own parameters, as the parameter-server worker does (:mod:`.ps_worker`);
DESIGN §4.8.

Per step, on every rank:

- a ``register_post_accumulate_grad_hook`` on each trainable parameter marks
  its gradient ready;
- one background communication thread issues the pieces in order, one
  collective at a time: piece ``i`` waits until every gradient it touches is
  ready, is gathered into a flat buffer, all-reduced (SUM, gloo) and divided by
  the world size, and written back into the gradients (a piece of one slice is
  reduced in place in its gradient, without the two copies: on vgg_mid one
  piece of the whole gradient spent 6 ms gathering and about as long writing
  back, a step's 0.5 s); the order is static, so
  the collectives match across ranks. One at a time on the link, as TicTac's
  model has it: two in flight share the link, so the first, which the next
  forward needs sooner, would land later (measured: 4 MiB pieces of vgg_mid
  took about twice their time alone). The next piece is gathered while the
  current one is on the link and starts the moment it lands, before the
  landed one is written back;
- once all the pieces of a parameter are done the thread updates it with the
  parameter's own optimizer (``make_optimizer([p])``: SGD, momentum, Adam are
  elementwise, so per-parameter steps equal one step over all) under
  ``torch.no_grad()``, then clears its gradient (``zero_grad(set_to_none=True)``
  per parameter);
- the next forward's pre-hook on each module waits (bounded) until that module's
  direct parameters (``recurse=False``) have had every gradient applied.

Why updating a parameter in the communication thread while the training thread
is still in backward is safe: the post-accumulate-grad hook of ``p`` fires
after autograd's ``AccumulateGrad`` node of ``p`` ran, and the engine runs that
node only once every node with an edge to it has run. Every backward node that
saved ``p`` (or a view of it) for its own computation has such an edge, so none
reads ``p`` after its update; the rest of backward touches other tensors. The
next read of ``p`` is the next forward, behind the pre-hook. One backward per
step (no gradient accumulation over micro-batches, no ``retain_graph`` reuse),
and every trainable parameter must get a gradient each step (as DDP without
``find_unused_parameters``): a parameter without one fails that backward. A
parameter read in a forward other than its own module's is not waited for
(autograd then usually reports an in-place modification); tied weights are
waited for by every module that holds them.

Every wait has a deadline: gloo's collective gets ``timeout`` (a dead peer
fails it at once, a stalled one makes it time out), and the training thread's
waits give up after ``timeout`` (plus a small margin) without progress. Either
way the failure reaches the training loop as :class:`OrderedAllreduceError` at
the next forward pre-hook, :meth:`OrderedAllreduce.wait_all` or
:meth:`~OrderedAllreduce.close`; a rank entry point
(:func:`dlsched.runtime.launcher.rank_main`) prints it as one ``dlsched: error:``
line and exits 2.

CPU tensors only: the pieces travel over gloo, and a parameter on another
device is refused at construction.

Public API: :class:`OrderedAllreduce`, :class:`StepRecord`, :func:`check_pieces`,
:func:`pieces_per_parameter`, :class:`OrderedAllreduceError`, :class:`PieceCoverageError`.
"""
from __future__ import annotations

import numbers
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from dlsched.errors import DlschedError

from dlsched.runtime.gloo_release import let_go
from dlsched.runtime.ps_failures import seconds, transfer_failure

#: Extra seconds a training-thread wait grants beyond ``timeout``, so that gloo's own timeout,
#: which names the collective, is normally the one reported.
MARGIN_S = 2.0
MAX_LISTED = 5


class OrderedAllreduceError(DlschedError):
    """The ordered all-reduce failed: a collective failed or timed out, a peer died or stalled, or a
    parameter got no gradient."""


class PieceCoverageError(OrderedAllreduceError):
    """The pieces do not cover every element of every trainable parameter exactly once."""


@dataclass
class StepRecord:
    """What one step did on this rank, in seconds after the step's first forward pre-hook.

    ``forward_blocked_s``: time this step's forward pre-hooks waited for updates;
    ``first_layer_s``: when the first pre-hook let the forward run;
    ``backward_end_s``: when backward ended; ``ready_s``: when each gradient was ready;
    ``pieces``: ``[issued, landed]`` of each piece's all-reduce in issue order; ``updated_s``: when each
    parameter was updated; ``next_forward_s``: when the next step's forward was called, and
    ``next_first_layer_s`` when it could start (its first pre-hook returned); ``None`` for the last step;
    ``started_at``: the step's start itself (``time.perf_counter()``), which lines up the records of ranks on
    one machine; ``compute_cpu_s``: CPU seconds the training thread got from the first layer's start to
    backward's end, and ``process_cpu_s`` those of the whole process (its other threads: this hook's, gloo's),
    beside the wall time between the two (a rank whose wall time outruns them waited for a core).
    """

    step: int
    forward_blocked_s: float = 0.0
    first_layer_s: float | None = None
    backward_end_s: float | None = None
    ready_s: dict = field(default_factory=dict)
    pieces: list = field(default_factory=list)
    updated_s: dict = field(default_factory=dict)
    next_forward_s: float | None = None
    next_first_layer_s: float | None = None
    started_at: float | None = None
    compute_cpu_s: float | None = None
    process_cpu_s: float | None = None


def _cpu(raw: dict) -> tuple:
    """``(compute_cpu_s, process_cpu_s)`` of a step's raw record, ``(None, None)`` where it lacks an end."""
    a, b = raw.get("first_layer_cpu"), raw.get("backward_end_cpu")
    return (None, None) if a is None or b is None else (b[0] - a[0], b[1] - a[1])


def _failure(msg: str, exc: BaseException) -> OrderedAllreduceError:
    """``msg`` with the first line of what gloo raised, as an :class:`OrderedAllreduceError`."""
    return OrderedAllreduceError(str(transfer_failure(msg, exc)))


def _slices_of(piece) -> list:
    """A piece as given: a sequence of ``(name, start, stop)``, a mapping with ``"slices"``, or an object
    with ``.slices`` (what an order file's reader returns)."""
    if isinstance(piece, Mapping):
        return list(piece.get("slices", ()))
    if hasattr(piece, "slices"):
        return list(piece.slices)
    return list(piece)


def check_pieces(numels: Mapping[str, int], pieces: Sequence) -> list[list[tuple[str, int, int]]]:
    """The pieces as lists of ``(name, start, stop)``, checked to cover each of ``numels`` exactly once.

    ``numels`` maps each trainable parameter's name to its number of elements.

    Raises
    ------
    PieceCoverageError
        A slice is malformed, names an unknown parameter, lies out of bounds, or
        elements are missing or covered twice; the message lists the first few.

    Examples
    --------
    >>> check_pieces({"w": 4, "b": 2}, [[("b", 0, 2), ("w", 2, 4)], [("w", 0, 2)]])
    [[('b', 0, 2), ('w', 2, 4)], [('w', 0, 2)]]
    >>> check_pieces({"w": 4, "b": 2}, [[("w", 0, 3)], [("w", 2, 4)]])
    Traceback (most recent call last):
    ...
    dlsched.hooks.ordered_allreduce.PieceCoverageError: ...: 'w' elements 2:3 are in more than one piece; ...
    """
    problems: list[str] = []
    out: list[list[tuple[str, int, int]]] = []
    spans: dict[str, list[tuple[int, int]]] = {n: [] for n in numels}
    if isinstance(pieces, (str, bytes)) or not isinstance(pieces, Sequence):
        raise PieceCoverageError(f"the all-reduce order must be a list of pieces, got {type(pieces).__name__}")
    for i, piece in enumerate(pieces):
        try:
            slices = _slices_of(piece)
        except TypeError:
            slices = None
        if not slices:
            problems.append(f"piece {i} has no slices")
            continue
        norm = []
        for s in slices:
            ok = isinstance(s, (list, tuple)) and len(s) == 3 and isinstance(s[0], str) \
                and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in s[1:])
            if not ok:
                problems.append(f"piece {i}: {s!r} is not (parameter name, start, stop)")
                continue
            name, a, b = s[0], int(s[1]), int(s[2])
            if name not in numels:
                problems.append(f"piece {i} names {name!r}, which is not a trainable parameter of the model")
            elif not 0 <= a < b <= numels[name]:
                problems.append(f"piece {i}: {name!r} {a}:{b} is empty or outside 0:{numels[name]}")
            else:
                spans[name].append((a, b))
                norm.append((name, a, b))
        out.append(norm)
    for name, n in numels.items():
        at = 0
        for a, b in sorted(spans[name]):
            if a > at:
                problems.append(f"{name!r} elements {at}:{a} are in no piece")
            elif a < at:
                problems.append(f"{name!r} elements {a}:{min(at, b)} are in more than one piece")
            at = max(at, b)
        if at < n:
            problems.append(f"{name!r} elements {at}:{n} are in no piece")
    if problems:
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise PieceCoverageError("the all-reduce order does not cover the model's trainable parameters exactly "
                                 f"once: {'; '.join(problems[:MAX_LISTED])}{more} (every element of every "
                                 "trainable parameter must be in exactly one piece)")
    return out


def pieces_per_parameter(module) -> list[list[tuple[str, int, int]]]:
    """One piece per trainable parameter, in reverse registration order (DDP's first-iteration order).

    Examples
    --------
    >>> import torch
    >>> pieces_per_parameter(torch.nn.Linear(3, 2))
    [[('bias', 0, 2)], [('weight', 0, 6)]]
    """
    return [[(n, 0, p.numel())] for n, p in reversed(list(module.named_parameters())) if p.requires_grad]


class OrderedAllreduce:
    """Gradient sync of ``module`` by the pieces of ``pieces``, in that order, with per-parameter updates.

    Parameters
    ----------
    module : torch.nn.Module
        The model, the same on every rank (same registration, same parameters).
    pieces : sequence
        The pieces in issue order; each a sequence of ``(param_name, start, stop)`` over
        ``param.grad.view(-1)``, names as in ``module.named_parameters()``.
    make_optimizer : callable
        ``make_optimizer([param])`` returns a torch optimizer for one parameter
        (e.g. ``lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)``).
    group : ProcessGroup, optional
        A gloo group of every rank, used by this hook only. By default a new
        gloo group of the whole job (every rank constructs the hook alike): the
        default group may carry the training script's own collectives from the
        training thread, and gloo matches collectives by their order in a group.
    timeout : float
        Seconds any single wait may take.
    max_records : int
        :attr:`records` keeps the last this many steps.

    Raises
    ------
    PieceCoverageError
        The pieces do not cover every trainable parameter's elements exactly once.
    OrderedAllreduceError
        A parameter is not a CPU tensor, a piece mixes dtypes, the optimizer
        factory fails, or the process group cannot be made.

    Examples
    --------
    >>> oar = OrderedAllreduce(model, pieces, lambda ps: torch.optim.SGD(ps, lr=0.1))  # doctest: +SKIP
    >>> for x, y in batches:                                                            # doctest: +SKIP
    ...     loss_fn(model(x), y).backward()   # no optimizer.step(): the hook updates
    >>> oar.close()                           # the last step's updates are in          # doctest: +SKIP
    """

    def __init__(self, module, pieces, make_optimizer: Callable, *, group=None, timeout: float = 60.0,
                 max_records: int = 1000):
        import torch
        import torch.distributed as dist
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
            raise OrderedAllreduceError(f"timeout must be a number of seconds above 0 (at most a day), "
                                        f"got {timeout!r}")
        self.timeout = float(timeout)
        self.max_records = max(1, int(max_records))
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        for n, p in self.params.items():
            if p.device.type != "cpu":
                raise OrderedAllreduceError(f"parameter {n!r} is on {p.device}; the ordered all-reduce runs on "
                                            "CPU tensors over gloo (move the model to the CPU)")
        self.pieces = check_pieces({n: p.numel() for n, p in self.params.items()}, pieces)
        for i, piece in enumerate(self.pieces):
            dtypes = {self.params[n].dtype for n, _, _ in piece}
            if len(dtypes) > 1:
                raise OrderedAllreduceError(f"piece {i} mixes dtypes ({', '.join(sorted(map(str, dtypes)))}); "
                                            "each piece is one flat buffer of one dtype")
        self.optimizers = {}
        for n, p in self.params.items():
            try:
                self.optimizers[n] = make_optimizer([p])
            except Exception as e:  # noqa: BLE001 - the user's factory
                raise OrderedAllreduceError(f"make_optimizer([{n!r}]) failed: {type(e).__name__}: {e}") from None
            if not callable(getattr(self.optimizers[n], "step", None)):
                raise OrderedAllreduceError(f"make_optimizer must return an optimizer (with .step()), got "
                                            f"{type(self.optimizers[n]).__name__}")
        try:
            self.group = group if group is not None else dist.new_group(backend="gloo", timeout=seconds(timeout))
            self.world, self.rank = dist.get_world_size(self.group), dist.get_rank()
        except Exception as e:
            raise _failure("the ordered all-reduce's process group could not be made", e) from None
        # a piece of one slice is reduced in place, in its gradient; the others are gathered into a buffer
        self._buffers = [None if len(pc) == 1 else torch.empty(sum(b - a for _, a, b in pc),
                                                               dtype=self.params[pc[0][0]].dtype)
                         for pc in self.pieces]
        self._sent = [None] * len(self.pieces)  # what each piece's last all-reduce reduced
        self._count = {n: 0 for n in self.params}  # pieces covering each parameter
        for pc in self.pieces:
            for n in {n for n, _, _ in pc}:
                self._count[n] += 1
        self._cond = threading.Condition()
        self.ready = {n: 0 for n in self.params}    # gradients produced (backwards that reached it)
        self.updated = {n: 0 for n in self.params}  # gradients applied
        self.error: BaseException | None = None
        self._closing = False
        self._progress_t = time.monotonic()  # the last sign of life of the communication
        self._backwards = 0  # completed backwards (training thread)
        self._started = -1   # the last step whose forward has begun
        self._callback_queued = False
        self._raw: dict[int, dict] = {}
        self._handles = []
        self._names_of = self._module_names(module)
        for p in self.params.values():
            p.grad = None
        self._register(module)
        self._thread = threading.Thread(target=self._communicate, name="dlsched-ordered-allreduce", daemon=True)
        self._thread.start()

    # -- hooks (training thread) -------------------------------------------------------------------

    def _module_names(self, module) -> dict:
        """Each module holding trainable parameters of its own → (its name, their names)."""
        by_id = {id(p): n for n, p in self.params.items()}
        out = {}
        for prefix, m in module.named_modules(remove_duplicate=False):
            own = [by_id[id(p)] for _, p in m.named_parameters(recurse=False) if id(p) in by_id]
            if own and m not in out:
                out[m] = (prefix or "<root>", own)
        return out

    def _register(self, module) -> None:
        for m in self._names_of:
            self._handles.append(m.register_forward_pre_hook(self._before_forward))
        for n, p in self.params.items():
            self._handles.append(p.register_post_accumulate_grad_hook(self._ready_hook(n)))

    def _raw_step(self, k: int) -> dict:
        """Step ``k``'s raw times (under the lock); only the last ``max_records`` steps are kept."""
        if k not in self._raw:
            self._raw[k] = {"ready": {}, "pieces": [], "updated": {}, "blocked": 0.0}
            self._raw.pop(k - self.max_records, None)
        return self._raw[k]

    def _ready_hook(self, name: str):
        def hook(_p):
            import torch
            t = time.perf_counter()
            if not self._callback_queued:  # the first gradient of this backward
                self._callback_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            with self._cond:
                self._raw_step(self.ready[name])["ready"][name] = t
                self.ready[name] += 1
                self._progress_t = time.monotonic()
                self._cond.notify_all()
        return hook

    def _backward_done(self) -> None:
        """Runs when backward ends: every trainable parameter must have got its gradient."""
        t = time.perf_counter()
        self._callback_queued = False
        k = self._backwards
        self._backwards += 1
        with self._cond:
            self._raw_step(k)["backward_end"] = t
            self._raw_step(k)["backward_end_cpu"] = (time.thread_time(), time.process_time())
            missing = [n for n, c in self.ready.items() if c <= k]
            if missing and self.error is None:
                shown = ", ".join(map(repr, missing[:MAX_LISTED])) + (" …" if len(missing) > MAX_LISTED else "")
                self.error = OrderedAllreduceError(
                    f"rank {self.rank}: {len(missing)} parameter(s) got no gradient in step {k} ({shown}); the "
                    "ordered all-reduce needs every trainable parameter in the loss each step, one backward per "
                    "step (as DDP without find_unused_parameters)")
                self._cond.notify_all()
        if missing:
            raise self.error

    def _before_forward(self, mod, _args) -> None:
        t = time.perf_counter()
        k, first = self._backwards, False
        if k > self._started:  # the first pre-hook of step k's forward
            self._started, first = k, True
            with self._cond:
                raw = self._raw_step(k)
                raw["start"] = t
                if k > 0:
                    self._raw_step(k - 1)["next_forward"] = t
        name, own = self._names_of[mod]
        self._wait(own, lambda: f"module {name!r} ({', '.join(own[:3])}{' …' * (len(own) > 3)}) in step {k}'s "
                   "forward")
        done = time.perf_counter()
        with self._cond:
            raw = self._raw_step(k)
            raw["blocked"] += done - t
            if first:
                raw["first_layer"] = done
                # the process's clock is read first here and last at backward's end, so its span holds the
                # thread's
                process = time.process_time()
                raw["first_layer_cpu"] = (time.thread_time(), process)
                if k > 0:
                    self._raw_step(k - 1)["next_first_layer"] = done

    def _wait(self, names, what: Callable[[], str]) -> None:
        """Wait until every gradient of ``names`` produced so far is applied; bounded by the deadline.
        ``what()`` names the wait in the error."""
        with self._cond:
            start = time.monotonic()
            while self.error is None and any(self.updated[n] < self.ready[n] for n in names):
                left = max(start, self._progress_t) + self.timeout + MARGIN_S - time.monotonic()
                if left <= 0:
                    self.error = OrderedAllreduceError(
                        f"rank {self.rank}: the parameters of {what()} were not updated within {self.timeout:g} s "
                        "of the all-reduce's last progress; a peer process probably stalled")
                    self._cond.notify_all()
                    break
                self._cond.wait(min(left, 0.5))
            if self.error is not None:
                raise self.error

    # -- the training loop's calls -----------------------------------------------------------------

    def wait_all(self) -> None:
        """Wait (bounded) until every gradient produced so far is applied: the parameters are then final.

        Raises
        ------
        OrderedAllreduceError
            The communication failed, or made no progress within the timeout.
        """
        self._wait(list(self.params), lambda: f"the model after step {self._backwards - 1}")

    def zero_grad(self) -> None:
        """Nothing to clear: each gradient is cleared as its update lands, so a loop written for an
        optimizer runs unchanged. Raises a pending failure (:class:`OrderedAllreduceError`)."""
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Wait for the last updates (:meth:`wait_all`), stop the communication thread, remove the hooks.

        Raises
        ------
        OrderedAllreduceError
            As :meth:`wait_all`; the hooks are removed even then.
        """
        try:
            if self.error is None:
                self.wait_all()
        finally:
            self._stop()
        if self.error is not None:
            raise self.error

    def _stop(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self.error is None:  # a failed collective may still block in gloo; the thread is a daemon
            self._thread.join(self.timeout + MARGIN_S)
            # what gloo last reduced, else the process may abort or hang as it ends (gloo_release)
            let_go([t for t in self._sent if t is not None], MARGIN_S)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._stop()

    @property
    def records(self) -> list[StepRecord]:
        """One :class:`StepRecord` per step begun so far."""
        with self._cond:
            raw = {k: dict(v, ready=dict(v["ready"]), updated=dict(v["updated"]), pieces=list(v["pieces"]))
                   for k, v in self._raw.items()}
        out = []
        for k in sorted(raw):
            r = raw[k]
            t0 = r.get("start", min(r["ready"].values(), default=None))
            if t0 is None:
                continue

            def rel(t, t0=t0):
                return None if t is None else t - t0
            out.append(StepRecord(
                k, r["blocked"], rel(r.get("first_layer")), rel(r.get("backward_end")),
                {n: t - t0 for n, t in r["ready"].items()}, [[a - t0, b - t0] for a, b in r["pieces"]],
                {n: t - t0 for n, t in r["updated"].items()}, rel(r.get("next_forward")),
                rel(r.get("next_first_layer")), t0, *_cpu(r)))
        return out

    # -- the communication thread ------------------------------------------------------------------

    def _communicate(self) -> None:
        try:
            step = 0
            while True:
                left = dict(self._count)
                pending = None  # the piece on the link
                for i, piece in enumerate(self.pieces):
                    with self._cond:
                        ready = self._is_ready(piece, step)
                    if pending is not None and not ready:
                        self._apply(*self._land(*pending), left)  # nothing to send next: land the one on the link
                        pending = None
                    if not self._wait_ready(piece, step):
                        return
                    self._gather(i, piece, step)  # while piece i−1 (if any) is still on the link
                    landed = self._land(*pending) if pending is not None else None
                    issued = self._start(i, piece, step)  # the link is free: piece i goes at once
                    if landed is not None:
                        self._apply(*landed, left)
                    pending = issued
                if pending is not None:
                    self._apply(*self._land(*pending), left)
                step += 1
        except DlschedError as e:
            err = e
        except Exception as e:  # noqa: BLE001 - handed to the training loop
            err = OrderedAllreduceError(f"rank {self.rank}: the ordered all-reduce failed: {type(e).__name__}: {e}")
        with self._cond:
            if self.error is None:
                self.error = err
            self._cond.notify_all()

    def _is_ready(self, piece, step: int) -> bool:
        """Whether step ``step``'s gradients of the piece are all ready (under the lock)."""
        return all(self.ready[n] > step for n, _, _ in piece)

    def _wait_ready(self, piece, step: int) -> bool:
        """Wait (without deadline: the training thread may be busy elsewhere) for the piece's gradients."""
        with self._cond:
            while not self._is_ready(piece, step):
                if self.error is not None or self._closing:
                    return False
                self._cond.wait(0.5)
            return self.error is None

    def _grad(self, name: str, step: int):
        p = self.params[name]
        g = p.grad
        if g is None or g.is_sparse:
            raise OrderedAllreduceError(f"rank {self.rank}: parameter {name!r} has "
                                        f"{'a sparse' if g is not None else 'no'} gradient in step {step}; the "
                                        "ordered all-reduce needs dense gradients")
        if not g.is_contiguous():
            p.grad = g = g.contiguous()
        return g.view(-1)

    def _gather(self, i: int, piece, step: int) -> None:
        """Piece ``i``'s gradients as one flat tensor: a piece of one slice is that slice of its gradient
        (reduced in place, no copy, as DDP's ``gradient_as_bucket_view``); the others are copied into the
        piece's buffer."""
        buf = self._buffers[i]
        if buf is None:
            name, a, b = piece[0]
            self._sent[i] = self._grad(name, step)[a:b]
            return
        off = 0
        for name, a, b in piece:
            buf[off:off + b - a].copy_(self._grad(name, step)[a:b])
            off += b - a
        self._sent[i] = buf

    def _start(self, i: int, piece, step: int) -> tuple:
        """Start piece ``i``'s all-reduce (its buffer gathered): ``(i, piece, step, work, issued)``."""
        import torch.distributed as dist
        issued = time.perf_counter()
        try:
            work = dist.all_reduce(self._sent[i], group=self.group, async_op=True)
        except Exception as e:
            raise _failure(f"rank {self.rank}: the all-reduce of piece {i} of {len(self.pieces)} in step {step} "
                           "could not be started", e) from None
        return i, piece, step, work, issued

    def _land(self, i: int, piece, step: int, work, issued: float) -> tuple:
        """Wait (bounded) for piece ``i``'s all-reduce to end: ``(i, piece, step, issued, landed)``."""
        try:
            work.wait(seconds(self.timeout))
        except Exception as e:
            raise _failure(f"rank {self.rank}: the all-reduce of piece {i} of {len(self.pieces)} in step "
                           f"{step} failed or timed out after {self.timeout:g} s", e) from None
        return i, piece, step, issued, time.perf_counter()

    def _apply(self, i: int, piece, step: int, issued: float, landed: float, left: dict) -> None:
        """Scatter landed piece ``i``'s mean back into the gradients and update each parameter it completes."""
        import torch
        self._sent[i].div_(self.world)
        buf, off = self._buffers[i], 0
        for name, a, b in piece if buf is not None else ():
            self._grad(name, step)[a:b].copy_(buf[off:off + b - a])
            off += b - a
        with self._cond:
            self._raw_step(step)["pieces"].append((issued, landed))
            self._progress_t = time.monotonic()
        for name in dict.fromkeys(n for n, _, _ in piece):
            left[name] -= 1
            if left[name] == 0:
                with torch.no_grad():
                    self.optimizers[name].step()
                self.params[name].grad = None
                with self._cond:
                    self._raw_step(step)["updated"][name] = time.perf_counter()
                    self.updated[name] += 1
                    self._progress_t = time.monotonic()
                    self._cond.notify_all()
