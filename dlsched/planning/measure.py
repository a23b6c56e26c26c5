"""Measured memory estimate: peak memory of real training steps (DESIGN §5).

A training step is forward + backward + the optimizer's step (SGD, SGD with
momentum, or Adam) of a PyTorch factory ``file.py:fn`` at a given batch. One
warm-up step at batch 1 first creates the optimizer state and the lazily
allocated buffers, so the measured step is a steady-state one: parameters,
optimizer state and the gradients already resident, as ``M(b)`` counts them.

Gradients stay allocated between steps (``zero_grad(set_to_none=False)``).
With ``set_to_none=True`` (PyTorch's default) the backward pass allocates the
gradients while it frees activations, so the peak is the largest of several
lines in the batch (activations alone at small batches, gradients plus what is
left of them later): a fit at small batches then finds a slope near zero and
an intercept below parameters + gradients, a *negative* remainder, and plans
batches far too large. Kept resident, the gradients are a constant and the peak
grows linearly with the batch from the first samples on; the plan is at most
one copy of the parameters more cautious than a ``set_to_none`` loop.

Peak measurement
----------------
- CUDA: ``torch.cuda.reset_peak_memory_stats`` before the step,
  ``torch.cuda.max_memory_allocated`` after the backward pass, reset again,
  and read after the optimizer step (everything resident on the device,
  parameters and optimizer state included).
- CPU: ``torch.profiler.profile(profile_memory=True)`` records every
  allocation and free of the CPU tensor allocator during the step (the input
  batch is created inside it); their running sum's maximum is the step's
  peak above what was resident before, to which the bytes of the resident
  tensors (parameters, gradients, buffers, optimizer state) are added. A profiler range
  around ``optimizer.step()`` splits the events into the two phases.

:func:`measured_estimate` fits ``peak(b) = intercept + slope·b`` to the peak
up to the end of the backward pass, through its two largest batches (the peak
is a maximum of lines in ``b``, so convex: the last secant is the closest to
the slope at the larger batches a plan extrapolates to): ``M_act`` = slope,
and the intercept minus parameters, gradients and optimizer state becomes
``fixed_bytes`` (framework buffers, transient weight-sized temporaries; never
below 0, see :func:`fit_peaks`). The peak while the optimizer steps
(activations freed; Adam's temporaries alive) does not depend on the batch
and is kept as a floor, ``step_peak_bytes``: ``M(b) = max(linear, floor)``.
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass

from dlsched.devices import check_device
from dlsched.errors import DlschedError
from dlsched.factory import call_factory, training_loss

from .memory import MemoryEstimate, optimizer_copies


@dataclass
class StepMeasurement:
    """One measured training step."""

    batch: int
    peak_bytes: float      # peak memory of the step, resident state included
    backward_peak_bytes: float  # peak until the end of backward (grows with the batch)
    optimizer_peak_bytes: float  # peak while the optimizer steps
    resident_bytes: float  # parameters + gradients + buffers + optimizer state before the step
    seconds: float | None  # wall time of an unprofiled step (None when not timed)
    device: str
    method: str


def _make_optimizer(module, optimizer: str):
    import torch

    optimizer_copies(optimizer)
    params = [p for p in module.parameters() if p.requires_grad]
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if optimizer == "momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    return torch.optim.Adam(params, lr=1e-3)


def _tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.device)
        if key in seen:
            continue
        seen.add(key)
        total += t.untyped_storage().nbytes()
    return total


def _resident_bytes(module, opt) -> int:
    import torch

    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return _tensor_bytes([*module.parameters(), *grads, *module.buffers(), *state])


def _cpu_peak(step) -> tuple[int, int]:
    """Running peaks of CPU allocator bytes while ``step()`` runs (profiler memory events).

    Returns (peak until the optimizer step starts, peak from then on); the
    boundary is the ``dlsched::optimizer_step`` range that ``step`` records.
    """
    import warnings

    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings(), _quiet_fd2():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
    events = list(prof.profiler.kineto_results.events())
    marks = [e.start_ns() for e in events if e.name() == _STEP_MARK]
    boundary = min(marks) if marks else None
    memory = sorted((e for e in events if e.name() == "[memory]" and e.device_type().name == "CPU"),
                    key=lambda e: e.start_ns())
    current = before = after = 0
    for e in memory:
        current += e.nbytes()
        if boundary is None or e.start_ns() < boundary:
            before = max(before, current)
        else:
            after = max(after, current)
    return before, after


_STEP_MARK = "dlsched::optimizer_step"


@contextlib.contextmanager
def _quiet_fd2():
    """Silence the profiler's C++ start/stop lines written straight to fd 2."""
    import os

    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def measure_step(spec: str, batch: int, optimizer: str = "sgd", device: str = "cpu",
                 time_step: bool = False) -> StepMeasurement:
    """Peak memory of one real training step of factory ``spec`` at ``batch``.

    Parameters
    ----------
    spec : str
        ``file.py:fn`` or ``package.module:fn`` returning ``(module, inputs)``.
    batch : int
    optimizer : {"sgd", "momentum", "adam"}
    device : {"cpu", "cuda"}
    time_step : bool
        Also time unprofiled steps (for throughput tables): the minimum of
        three, or one when a step takes over 0.25 s.

    Returns
    -------
    StepMeasurement

    Raises
    ------
    DlschedError
        No CUDA device when ``device="cuda"``; a factory that fails.

    Examples
    --------
    >>> m = measure_step("examples/torch_models.py:small_cnn", 4)
    >>> m.peak_bytes > m.resident_bytes
    True
    """
    import torch

    optimizer = optimizer.lower()
    check_device(device, "torch")
    if batch < 1:
        raise DlschedError(f"batch must be at least 1, got {batch}")
    module, inputs, _ = call_factory(spec, batch)
    module = module.to(device).train()
    shapes = [(x.shape, x.dtype) if isinstance(x, torch.Tensor) else None for x in inputs]
    # keep one sample of each input (token ids are reused); drop the full example batch
    inputs = [x[:1].clone() if isinstance(x, torch.Tensor) and x.dim() else x for x in inputs]
    opt = _make_optimizer(module, optimizer)

    def make_inputs(b):
        out = []
        for x, sd in zip(inputs, shapes):
            if sd is None:
                out.append(x)
            elif sd[1].is_floating_point:
                out.append(torch.randn((b, *sd[0][1:]), dtype=sd[1], device=device))
            else:  # token ids: reuse the example's values, repeated to the batch
                out.append(x[:1].to(device).repeat(b, *([1] * (x.dim() - 1))))
        return out

    phases = {}

    def step(b=batch, mark_cuda=False):
        opt.zero_grad(set_to_none=False)  # gradients stay resident (module docstring)
        loss = training_loss(module(*make_inputs(b)))
        loss.backward()
        del loss
        if mark_cuda:  # peak so far, then a fresh peak for the optimizer step
            torch.cuda.synchronize()
            phases["backward"] = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        with torch.profiler.record_function(_STEP_MARK):
            opt.step()
        opt.zero_grad(set_to_none=False)

    try:
        try:
            step(1)  # warm-up: optimizer state and lazy buffers
        except Exception:
            step(batch)
        if device == "cuda":
            torch.cuda.synchronize()
        resident = _resident_bytes(module, opt)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            step(mark_cuda=True)
            torch.cuda.synchronize()
            backward, optimizer_peak = float(phases["backward"]), float(torch.cuda.max_memory_allocated())
            method = "torch.cuda.max_memory_allocated"
        else:
            before, after = _cpu_peak(step)
            backward, optimizer_peak = float(resident + before), float(resident + after)
            method = "torch.profiler allocation events (running peak) + resident tensors"
        seconds = None
        if time_step:  # minimum of up to 3 unprofiled steps (1 when a step is slow)
            for _ in range(3):
                t0 = time.perf_counter()
                step()
                if device == "cuda":
                    torch.cuda.synchronize()
                took = time.perf_counter() - t0
                seconds = took if seconds is None else min(seconds, took)
                if took > 0.25:
                    break
    except DlschedError:
        raise
    except RuntimeError as e:
        raise DlschedError(f"{spec}: a training step at batch {batch} on {device} failed ({e})") from None
    return StepMeasurement(batch, max(backward, optimizer_peak), backward, optimizer_peak, float(resident), seconds,
                           device, method)


def fit_peaks(peaks: dict[int, float], state_bytes: float, model: str = "model") -> tuple[float, float, float]:
    """``peak(b) = intercept + slope·b`` through the two largest batches of ``{batch: peak bytes}``.

    The peak of a step is the largest, over the step's moments, of the bytes
    alive then, each a line in ``b``: a convex function. Its last secant is
    the closest to the slope at the larger batches a plan extrapolates to
    (a least-squares line over smaller batches would be flatter), and its
    intercept is at least what was alive at the line's moment regardless of
    the batch, resident state included.

    Parameters
    ----------
    peaks : dict
        Two or more ``{batch: peak bytes}`` (resident state included).
    state_bytes : float
        Parameters + gradients + optimizer state: ``M_params·(2 + k_opt)``.
    model : str
        Named in messages.

    Returns
    -------
    (slope, intercept, fixed)
        ``fixed = max(0, intercept − state_bytes)``: an intercept below the
        resident state is rounding between nearly equal peaks, not memory
        given back; it is not reported as a negative component.

    Raises
    ------
    DlschedError
        Fewer than two batches, or a peak that does not grow with the batch.

    Examples
    --------
    >>> fit_peaks({2: 1300.0, 4: 1500.0, 8: 1900.0}, state_bytes=1000)
    (100.0, 1100.0, 100.0)
    >>> fit_peaks({2: 1190.0, 4: 1390.0}, state_bytes=1000)   # intercept 990 < state: fixed 0
    (100.0, 990.0, 0.0)
    """
    if len(peaks) < 2:
        raise DlschedError(f"the measured estimate needs two or more distinct batch sizes, got {sorted(peaks)}")
    (b1, m1), (b2, m2) = sorted(peaks.items())[-2:]
    slope = (m2 - m1) / (b2 - b1)
    if slope <= 0:
        raise DlschedError(f"{model}: measured peak memory does not grow with the batch "
                           f"({', '.join(f'{b}: {m:.0f} B' for b, m in sorted(peaks.items()))}); "
                           "measure at larger, more distinct batch sizes")
    intercept = m2 - slope * b2
    return slope, intercept, max(0.0, intercept - state_bytes)


def measured_estimate(spec: str, batches=(2, 4), optimizer: str = "sgd", device: str = "cpu",
                      time_steps: bool = False) -> tuple[MemoryEstimate, list[StepMeasurement]]:
    """Fit ``M(b)`` to the peak memory of real training steps at ``batches``.

    Parameters
    ----------
    spec : str
        PyTorch factory ``file.py:fn``.
    batches : sequence of int
        Two or more distinct batch sizes.
    optimizer, device : str
        See :func:`measure_step`.
    time_steps : bool
        Also time one unprofiled step per batch.

    Returns
    -------
    (MemoryEstimate, list of StepMeasurement)
        ``estimate="measured"``: ``M_act`` and ``fixed_bytes`` from
        :func:`fit_peaks`; ``param_bytes`` from the module's trainable parameters.

    Raises
    ------
    DlschedError
        Fewer than two distinct batches, or a failing step.
    """
    batches = sorted({int(b) for b in batches})
    if len(batches) < 2 or batches[0] < 1:
        raise DlschedError(f"the measured estimate needs two or more distinct batch sizes ≥ 1, got {batches}")
    points = [measure_step(spec, b, optimizer, device, time_steps) for b in batches]
    import torch

    module, _, _ = call_factory(spec, 1)
    param_bytes = float(sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad))
    del module
    slope, intercept, fixed = fit_peaks({p.batch: p.backward_peak_bytes for p in points},
                                        param_bytes * (2 + optimizer_copies(optimizer)), spec)
    est = MemoryEstimate(
        model=spec, estimate="measured", optimizer=optimizer.lower(), param_bytes=param_bytes,
        activation_bytes_per_sample=slope, workspace_bytes_per_sample=0.0, fixed_bytes=fixed,
        step_peak_bytes=max(p.optimizer_peak_bytes for p in points),
        details={"device": device, "method": points[0].method, "torch": torch.__version__,
                 "points": [{"batch": p.batch, "peak": p.peak_bytes, "backward_peak": p.backward_peak_bytes,
                             "optimizer_peak": p.optimizer_peak_bytes} for p in points],
                 "intercept": intercept},
    )
    return est, points
