"""Parameter-server training over ``torch.distributed`` with enforced transfer order
(TicTac §5, "Enforcing"; DESIGN §6).

Ranks ``0 .. S-1`` are servers, ranks ``S .. S+W-1`` workers. Each parameter lives
on server ``transfer.ps mod S`` (the priority file's ``ps`` field). Every
iteration each server sends each worker its parameters **in priority order**
(sender-side enforcement, as TicTac does at the gRPC layer), keeping at most
``window`` transfers per worker in flight (transfer ``i`` starts once ``i-window``
has completed; ``window=1`` is strictly sequential). The unordered baseline
(``unordered=True``) draws a fresh random order per worker and iteration.

On a worker every parameter's receive is posted at the start of the iteration
and completed lazily: a forward pre-hook on each module waits only for that
module's own parameters, so compute starts as soon as the first layer's weights
are in and overlaps with the transfers still in flight. After backward each
gradient goes back to its server as soon as it is accumulated; the server
averages over the workers and applies SGD (optional momentum). In inference
mode the workers only run the forward pass and send a one-element "done"
message, so iterations stay synchronous, as in TicTac's inference workload.

Failure handling: every wait is bounded by ``timeout`` seconds (the process group
timeout and explicit deadlines). A peer that dies closes its gloo connections,
so the survivors' pending transfers fail; each survivor raises
:class:`PSTrainingError`, prints one line ``dlsched: error: ...`` and exits with
code 2. :func:`launch_local` kills whatever is left after ``timeout``. The ranks
also end with the launcher, even one killed by SIGKILL (:mod:`dlsched.hooks.lifetime`),
and the launcher's job directory is deleted unless ``keep=True``.

Bad input is refused before any process starts, with one message and no
traceback: :class:`PSConfig` checks every setting (:class:`PSConfigError`), and
:func:`config_from_priority_file` refuses a priority file whose fingerprint is
not that of the graph being trained, in the mode being trained
(:class:`~dlsched.errors.PriorityFileError`).

Buffers (e.g. BatchNorm running statistics) are not synchronised: use models
without buffers, or accept that each worker keeps its own.

Devices: ``device="cuda"`` keeps the model on the GPU and moves transfers through
pinned CPU staging buffers over gloo (gloo point-to-point needs CPU tensors).

Examples
--------
>>> from dlsched.hooks.torch_ps import PSConfig, launch_local, order_from_module
>>> cfg = PSConfig(model="examples/torch_models.py:small_cnn", servers=2, workers=2,
...                order=order_from_module("examples/torch_models.py:small_cnn"),
...                iterations=5, batch=4)
>>> run = launch_local(cfg)                                       # doctest: +SKIP
>>> run.params["conv1.weight"].shape, run.timeline.get(0, 0).arrival_order()[:2]  # doctest: +SKIP

Public API: :class:`PSConfig`, :func:`check_settings`, :func:`config_from_priority_file`,
:func:`check_priority_file`, :func:`order_from_module`, :func:`ps_train` (run one
rank in this process), :func:`launch_local` (spawn a whole cluster on localhost),
:class:`PSRun`, :func:`reference_train` (the single-process equivalent),
:class:`PSTrainingError`, :class:`PSConfigError`; :func:`watch_launcher` is
re-exported from :mod:`dlsched.hooks.lifetime`, which keeps the ranks from
outliving the launcher. The timeline format is :mod:`dlsched.hooks.timeline`.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import numbers
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from dlsched.errors import DlschedError, PriorityFileError

from .lifetime import children_die_with_launcher, kill_children, watch_launcher
from .timeline import IterationRecord, Timeline


class PSTrainingError(DlschedError):
    """A transfer failed or timed out, or a rank of the parameter-server job died."""


class PSConfigError(DlschedError):
    """A parameter-server setting is invalid; raised before any process starts."""


#: Longest per-wait timeout accepted, in seconds (about 11.6 days). Larger values overflow
#: ``datetime.timedelta`` in the process group and are a hang in all but name.
MAX_TIMEOUT = 1e6
_MODES = ("training", "inference")
_FAIL_HOWS = ("exit", "stall")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _setting_problems(values: dict) -> list[str]:
    """Check the scalar settings in ``values`` (any subset of PSConfig's fields but
    ``model``, ``order`` and ``ps``); numbers are normalised in place to ``int``/``float``
    so the config stays JSON-serialisable (numpy scalars would not be).

    Returns one phrase per problem, e.g. ``"workers must be at least 1, got 0"``.
    """
    problems = []

    def whole(key, low, high=None, optional=False):
        if key not in values or (optional and values[key] is None):
            return
        v = values[key]
        # bool is an int subclass: workers=True is a mistake, not 1
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            problems.append(f"{key} must be a whole number, got {v!r}")
            return
        values[key] = v = int(v)
        if v < low or (high is not None and v > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            problems.append(f"{key} must be {bound}, got {v}")

    def real(key, low, high, high_open=False, low_open=False):
        if key not in values:
            return
        v = values[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            problems.append(f"{key} must be a number, got {v!r}")
            return
        values[key] = v = float(v)
        if not (math.isfinite(v) and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)):
            span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            problems.append(f"{key} must be a finite number in {span}, got {v!r}")

    def choice(key, allowed):
        if key in values and values[key] not in allowed:
            problems.append(f"{key} must be one of {', '.join(map(repr, allowed))}, got {values[key]!r}")

    whole("servers", 1)
    whole("workers", 1)
    whole("iterations", 1)
    whole("batch", 1)
    whole("window", 1)
    whole("threads", 1)
    whole("seed", 0, 2 ** 32 - 1)
    real("timeout", 0, MAX_TIMEOUT, low_open=True)
    real("lr", 0, math.inf, high_open=True)
    real("momentum", 0, 1, high_open=True)
    choice("mode", _MODES)
    choice("fail_how", _FAIL_HOWS)
    whole("fail_iteration", 0, optional=True)
    whole("fail_worker", 0, optional=True)
    if isinstance(values.get("fail_worker"), int) and isinstance(values.get("workers"), int) \
            and values["fail_worker"] >= values["workers"] >= 1:
        problems.append(f"fail_worker must be a worker index below workers={values['workers']}, "
                        f"got {values['fail_worker']}")
    if "unordered" in values and not isinstance(values["unordered"], bool):
        problems.append(f"unordered must be true or false, got {values['unordered']!r}")
    if "device" in values and not (isinstance(values["device"], str) and _DEVICE.match(values["device"])):
        problems.append(f"device must be 'cpu', 'cuda' or 'cuda:N', got {values['device']!r}")
    if "model_kwargs" in values:
        kw = values["model_kwargs"]
        try:  # every rank reads the config from a JSON file
            ok = isinstance(kw, dict) and all(isinstance(k, str) for k in kw) and json.dumps(kw) is not None
        except (TypeError, ValueError):
            ok = False
        if not ok:
            problems.append(f"model_kwargs must be a JSON object with string keys, got {kw!r:.80}")
    return problems


def _refuse(problems: list[str]) -> None:
    if problems:
        raise PSConfigError("invalid parameter-server configuration: " + "; ".join(problems))


def check_settings(**settings) -> None:
    """Refuse invalid :class:`PSConfig` settings without building a config.

    Callers that do expensive work before they can build the config (importing the
    model to make a priority file) check the user's numbers first with this.

    Raises
    ------
    PSConfigError
        An unknown setting, or a value out of range (the message names each one).
    """
    names = {f.name for f in fields(PSConfig)} - {"model", "order", "ps"}
    unknown = sorted(set(settings) - names)
    _refuse([f"unknown setting {k!r}" for k in unknown] + _setting_problems(dict(settings)))


@dataclass
class PSConfig:
    """Everything a rank needs; JSON-serialisable so every rank reads the same one.

    ``model`` is a factory spec ``path/to/file.py:fn`` or ``package.module:fn``
    (``fn(**model_kwargs)`` returns ``(module, example_inputs)``). ``order`` lists
    the parameter names, highest priority first; ``ps`` maps a name to its server
    index (default: round-robin over the order).

    Every setting is checked on construction (so in the launcher, before any
    process starts): ``servers``, ``workers``, ``iterations``, ``batch``,
    ``window`` and ``threads`` are whole numbers ≥ 1; ``timeout`` is in
    ``(0, MAX_TIMEOUT]`` seconds; ``lr`` ≥ 0 and ``0 ≤ momentum < 1``, both
    finite; ``mode``, ``device`` and ``fail_how`` take their listed values;
    ``order`` is a non-empty list of distinct names and ``ps`` only names those.

    Raises
    ------
    PSConfigError
        One message listing every invalid setting by name.
    """

    model: str
    order: list[str]
    ps: dict[str, int] = field(default_factory=dict)
    servers: int = 1
    workers: int = 2
    iterations: int = 5
    batch: int = 4
    mode: str = "training"
    lr: float = 0.05
    momentum: float = 0.0
    window: int = 1
    unordered: bool = False
    seed: int = 0
    timeout: float = 60.0
    device: str = "cpu"
    model_kwargs: dict = field(default_factory=dict)
    fail_worker: int | None = None
    fail_iteration: int | None = None
    fail_how: str = "exit"  # "exit": die abruptly (tests); "stall": stop responding
    threads: int = 1

    def __post_init__(self):
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        problems = []
        if not isinstance(self.model, str) or ":" not in self.model:
            problems.append(f"model must be a factory 'path/to/file.py:fn' or 'package.module:fn', got {self.model!r}")
        if not isinstance(self.order, list) or not self.order or not all(isinstance(n, str) for n in self.order):
            problems.append(f"order must be a non-empty list of parameter names, got {self.order!r:.80}")
        else:
            seen: set[str] = set()
            dup = next((n for n in self.order if n in seen or seen.add(n)), None)
            if dup is not None:
                problems.append(f"order lists {dup!r} more than once")
        if not isinstance(self.ps, dict):
            problems.append(f"ps must map parameter names to server indices, got {self.ps!r:.80}")
        else:
            known = set(self.order) if isinstance(self.order, list) else set()
            for n, s in self.ps.items():
                if n not in known:
                    problems.append(f"ps names {n!r}, which is not in the order")
                    break
                if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                    problems.append(f"ps[{n!r}] must be a server index ≥ 0, got {s!r}")
                    break
        problems += _setting_problems(values)
        _refuse(problems)
        for k, v in values.items():  # normalised numbers
            setattr(self, k, v)
        self.ps = {n: int(s) for n, s in self.ps.items()}

    def server_of(self, name: str) -> int:
        return self.ps.get(name, self.order.index(name)) % self.servers


def config_from_priority_file(model: str, priority_file, **kw) -> PSConfig:
    """Build a :class:`PSConfig` whose order and sharding come from a priority file,
    after checking that the file was made for the graph this job trains.

    Parameters
    ----------
    model : str
        The factory spec, as for :class:`PSConfig`.
    priority_file : PriorityFile or path
        A :class:`~dlsched.exporters.priority_file.PriorityFile` or a path to one.
    **kw
        Other :class:`PSConfig` settings (``mode``, ``servers``, ...).

    Raises
    ------
    PSConfigError
        An invalid setting.
    PriorityFileError
        Unreadable file; a JSON file whose fingerprint is not that of ``model``'s
        graph in ``mode`` (another model, or the other mode); transfer names that
        differ from the model's parameters (the only check a TicTac file allows).
    ImportFailure
        ``model`` cannot be imported to compute its fingerprint.
    """
    from dlsched.exporters.priority_file import PriorityFile, read_priority_file
    if isinstance(priority_file, PriorityFile):
        pf, where = priority_file, "the priority file"
    else:
        pf, where = read_priority_file(priority_file), str(priority_file)
    clash = sorted({"model", "order", "ps"} & set(kw))
    if clash:
        raise PSConfigError(f"{', '.join(clash)}: set by the priority file, cannot also be given")
    check_settings(**kw)  # before importing the model: a bad number costs nothing
    cfg = PSConfig(model=model, order=pf.order, ps={t.name: t.ps for t in pf.transfers}, **kw)
    check_priority_file(cfg, pf, where)
    return cfg


def check_priority_file(cfg: PSConfig, pf, where: str = "the priority file") -> None:
    """Refuse a priority file that was not made for the graph ``cfg`` trains.

    A file with a fingerprint is compared with the fingerprint of the graph that
    the project's importer makes of ``cfg.model`` in ``cfg.mode`` (what ``dlsched
    order`` computed it from), so a forged fingerprint, a file for another model
    and one for the other mode are all refused. A file without one (TicTac TSV,
    or a :class:`PriorityFile` built in memory) must name exactly the model's
    parameters.

    Raises
    ------
    PriorityFileError, ImportFailure
    """
    from dlsched.exporters.priority_file import check_against
    if pf.fingerprint is not None:
        if set(cfg.model_kwargs) - {"batch"}:
            # The importer calls fn() (or fn(batch=...)), so it cannot see the graph fn(**model_kwargs) builds.
            raise PriorityFileError(
                f"{where}: cannot check its fingerprint for model {cfg.model!r} called with "
                f"{sorted(cfg.model_kwargs)}; wrap those arguments in a factory of their own and run "
                "dlsched order on it, or use a TicTac file (checked by transfer names only)")
        from dlsched.loader import load_model
        graph = load_model(cfg.model, mode=cfg.mode, batch=cfg.model_kwargs.get("batch"))
        check_against(pf, graph, where)
        expected = [r.name for r in graph.recvs()]
    else:
        expected = _parameter_names(cfg)
    _check_names(pf.order, expected, where, cfg.model)


def _check_names(order: list[str], names: list[str], where: str, model: str) -> None:
    missing = sorted(set(names) - set(order))
    unknown = sorted(set(order) - set(names))
    if missing or unknown:
        raise PriorityFileError(
            f"{where} does not match model {model!r}: "
            + (f"missing parameters {missing[:5]}" if missing else "")
            + ("; " if missing and unknown else "") + (f"unknown names {unknown[:5]}" if unknown else ""))


def _parameter_names(cfg: PSConfig) -> list[str]:
    module, _ = _call_factory(cfg)
    return [n for n, _ in module.named_parameters()]


def _call_factory(cfg: PSConfig):
    fn = load_factory(cfg.model)
    try:
        module, inputs = fn(**cfg.model_kwargs)
    except Exception as e:  # the user's code: report it, do not dump its traceback
        raise PSTrainingError(f"model {cfg.model!r}: the factory raised {type(e).__name__}: {e}") from None
    return module, inputs


def load_factory(spec: str):
    """Resolve ``file.py:fn`` or ``package.module:fn`` to the callable."""
    path, sep, fn = spec.rpartition(":")
    if not sep:
        raise PSTrainingError(f"model {spec!r}: expected 'path/to/file.py:function' or 'package.module:function'")
    try:
        if path.endswith(".py"):
            mod_name = "_dlsched_factory_" + Path(path).stem
            if mod_name not in sys.modules:
                s = importlib.util.spec_from_file_location(mod_name, path)
                if s is None or not Path(path).exists():
                    raise FileNotFoundError(path)
                m = importlib.util.module_from_spec(s)
                s.loader.exec_module(m)
                sys.modules[mod_name] = m
            mod = sys.modules[mod_name]
        else:
            mod = importlib.import_module(path)
        return getattr(mod, fn)
    except (ImportError, FileNotFoundError, AttributeError, SyntaxError) as e:
        raise PSTrainingError(f"model {spec!r}: cannot load the factory ({e})") from None


def build_model(cfg: PSConfig):
    """``(module, example_inputs)`` from the factory, with the factory's fixed seed."""
    module, inputs = _call_factory(cfg)
    _check_names(cfg.order, [n for n, _ in module.named_parameters()], "the transfer order", cfg.model)
    return module, inputs


def order_from_module(model: str, **model_kwargs) -> list[str]:
    """Parameter names in declaration order (the topological order of a plain CNN)."""
    module, _ = load_factory(model)(**model_kwargs)
    return [n for n, _ in module.named_parameters()]


# ---------------------------------------------------------------- data and loss

def global_batch(cfg: PSConfig, example_inputs, iteration: int):
    """The synthetic global batch of ``iteration`` (W × batch samples); worker w
    takes rows ``w*batch .. (w+1)*batch``. Integer inputs (token ids) keep their range."""
    import torch
    g = torch.Generator().manual_seed(cfg.seed * 100003 + iteration)
    n = cfg.workers * cfg.batch
    out = []
    for x in example_inputs:
        shape = (n, *x.shape[1:])
        if x.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g, dtype=x.dtype))
        else:
            out.append(torch.randint(0, int(x.max()) + 1, shape, generator=g, dtype=x.dtype))
    return out


def global_target(cfg: PSConfig, out_shape, iteration: int):
    import torch
    g = torch.Generator().manual_seed(cfg.seed * 100003 + iteration + 7919)
    return torch.randn((cfg.workers * cfg.batch, *out_shape[1:]), generator=g)


def loss_of(output, target):
    return ((output - target) ** 2).mean()


def reference_train(cfg: PSConfig) -> dict:
    """Single-process SGD on the same global batches; returns ``{name: tensor}``.

    Equal to PS training because each worker's loss is the mean over its equal
    share of the batch, and the servers average the workers' gradients."""
    import torch
    torch.set_num_threads(max(1, cfg.threads))
    module, inputs = build_model(cfg)
    module.train()
    opt = torch.optim.SGD(module.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    for it in range(cfg.iterations):
        xs = global_batch(cfg, inputs, it)
        out = module(*xs)
        loss = loss_of(out, global_target(cfg, out.shape, it))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {n: p.detach().clone() for n, p in module.named_parameters()}


# ---------------------------------------------------------------- ranks

def _td(seconds: float):
    from datetime import timedelta
    return timedelta(seconds=seconds)


def _worker_rank(cfg: PSConfig, w: int) -> int:
    return cfg.servers + w


def _send_order(cfg: PSConfig, server: int, worker: int, iteration: int) -> list[str]:
    """The order in which ``server`` sends its parameters to ``worker``: the priority
    order, or a seeded random permutation per (server, worker, iteration)."""
    own = [n for n in cfg.order if cfg.server_of(n) == server]
    if cfg.unordered:
        random.Random(f"{cfg.seed}/{server}/{worker}/{iteration}").shuffle(own)
    return own


def _fail(msg: str, exc: BaseException | None = None) -> PSTrainingError:
    detail = f" ({str(exc).splitlines()[0][:300]})" if exc is not None else ""
    if exc is not None and ("closed by peer" in str(exc) or "Connection reset" in str(exc)):
        detail += "; a peer process probably died"
    return PSTrainingError(msg + detail)


def _wait(work, what: str, timeout: float):
    try:
        work.wait(_td(timeout))
    except Exception as e:  # gloo raises RuntimeError for dead peers and timeouts
        raise _fail(f"{what} failed or timed out after {timeout:g} s", e) from None


def _run_server(cfg: PSConfig, rank: int, module) -> dict:
    import torch
    import torch.distributed as dist
    params = dict(module.named_parameters())
    tag = {n: i for i, n in enumerate(cfg.order)}
    P = len(cfg.order)
    own = [n for n in cfg.order if cfg.server_of(n) == rank]
    opt = torch.optim.SGD([params[n] for n in own], lr=cfg.lr, momentum=cfg.momentum) if own else None
    training = cfg.mode == "training"
    for it in range(cfg.iterations):
        back = []  # gradient (or done-token) receives, posted before the sends
        try:
            for w in range(cfg.workers):
                if training:
                    bufs = {n: torch.empty_like(params[n].data) for n in own}
                    back.append((w, bufs, [(n, dist.irecv(bufs[n], _worker_rank(cfg, w), tag=P + tag[n]))
                                           for n in own]))
                else:
                    tok = torch.zeros(1)
                    back.append((w, {}, [("done", dist.irecv(tok, _worker_rank(cfg, w), tag=2 * P))]))
            orders = [_send_order(cfg, rank, w, it) for w in range(cfg.workers)]
            inflight: list[list] = [[] for _ in range(cfg.workers)]
            for pos in range(len(own)):
                for w in range(cfg.workers):
                    if pos >= cfg.window:
                        _wait(inflight[w][pos - cfg.window], f"server {rank}: sending "
                              f"{orders[w][pos - cfg.window]!r} to worker {w} in iteration {it}", cfg.timeout)
                    n = orders[w][pos]
                    inflight[w].append(dist.isend(params[n].data, _worker_rank(cfg, w), tag=tag[n]))
        except PSTrainingError:
            raise
        except Exception as e:
            raise _fail(f"server {rank}: posting transfers in iteration {it} failed", e) from None
        for w in range(cfg.workers):
            # earlier ones were waited in the loop; gloo hangs on a second wait
            for pos in range(max(0, len(inflight[w]) - cfg.window), len(inflight[w])):
                _wait(inflight[w][pos], f"server {rank}: sending {orders[w][pos]!r} to worker {w} in iteration {it}", cfg.timeout)
        for w, _, works in back:
            for n, h in works:
                _wait(h, f"server {rank}: receiving {'the gradient of ' + repr(n) if training else 'the done message'}"
                      f" from worker {w} in iteration {it}", cfg.timeout)
        if training and own:
            with torch.no_grad():
                for n in own:
                    params[n].grad = sum(b[n] for _, b, _ in back) / cfg.workers
            opt.step()
    return {"params": {n: params[n].detach().clone() for n in own}}


class _Receiver:
    """Posts one iteration's parameter receives and completes them in waiter
    threads, so each arrival is time-stamped when it happens (gloo's
    ``is_completed`` only turns true once someone waits)."""

    def __init__(self, cfg, module, pool, device):
        import torch
        self.cfg, self.pool = cfg, pool
        self.params = dict(module.named_parameters())
        self.tag = {n: i for i, n in enumerate(cfg.order)}
        self.cuda = device.type == "cuda"
        self.staging = {n: torch.empty(p.shape, dtype=p.dtype, pin_memory=True) for n, p in self.params.items()} \
            if self.cuda else {}

    def start(self, worker: int, it: int):
        import torch.distributed as dist
        self.arrivals: dict[str, float] = {}
        self.errors: dict[str, BaseException] = {}
        self.events = {n: threading.Event() for n in self.cfg.order}
        self.worker, self.it = worker, it
        # post in each server's send order, so backends that match by posting order also work
        for s in range(self.cfg.servers):
            for n in _send_order(self.cfg, s, worker, it):
                buf = self.staging[n] if self.cuda else self.params[n].data
                try:
                    work = dist.irecv(buf, s, tag=self.tag[n])
                except Exception as e:
                    raise _fail(f"worker {worker}: posting the receive of {n!r} in iteration {it} failed", e) from None
                self.pool.submit(self._complete, n, work, s)

    def _complete(self, name, work, server):
        try:
            work.wait(_td(self.cfg.timeout))
            self.arrivals[name] = time.perf_counter()
            if self.cuda:
                self.params[name].data.copy_(self.staging[name], non_blocking=False)
        except BaseException as e:  # handed to the waiting compute thread
            self.errors[name] = e
        finally:
            self.events[name].set()

    def wait_for(self, name: str):
        ev = self.events[name]
        if not ev.wait(self.cfg.timeout + 5):
            raise _fail(f"worker {self.worker}: parameter {name!r} did not arrive within {self.cfg.timeout:g} s "
                        f"in iteration {self.it}")
        if name in self.errors:
            raise _fail(f"worker {self.worker}: receiving {name!r} from server {self.cfg.server_of(name)} "
                        f"in iteration {self.it} failed", self.errors[name])


def _run_worker(cfg: PSConfig, rank: int, module, inputs) -> dict:
    import torch
    import torch.distributed as dist
    from concurrent.futures import ThreadPoolExecutor
    w = rank - cfg.servers
    sys.setswitchinterval(2e-4)  # waiter threads get the GIL promptly, so arrival stamps are tight
    device = torch.device(cfg.device)
    module.to(device)
    training = cfg.mode == "training"
    module.train(training)
    P = len(cfg.order)
    pool = ThreadPoolExecutor(max_workers=len(cfg.order), thread_name_prefix="dlsched-recv")
    recv = _Receiver(cfg, module, pool, device)
    state = {"compute_start": None}
    handles = []

    def pre_hook(mod, args):
        for n in mod._dlsched_params:
            recv.wait_for(n)
        if state["compute_start"] is None and mod._dlsched_params:
            state["compute_start"] = time.perf_counter()

    prefix = {id(m): name for name, m in module.named_modules()}
    for m in module.modules():
        own = [(prefix[id(m)] + "." if prefix[id(m)] else "") + pn for pn, _ in m.named_parameters(recurse=False)]
        m._dlsched_params = own
        if own:
            handles.append(m.register_forward_pre_hook(pre_hook))

    sends: list = []
    tag = {n: i for i, n in enumerate(cfg.order)}
    params = dict(module.named_parameters())
    if training:
        def grad_hook(name):
            def hook(p):
                g = p.grad.detach().to("cpu") if recv.cuda else p.grad.detach()
                sends.append((name, g, dist.isend(g, cfg.server_of(name), tag=P + tag[name])))
            return hook
        for n, p in params.items():
            p.register_post_accumulate_grad_hook(grad_hook(n))

    timeline = Timeline()
    xs_all = None
    for it in range(cfg.iterations):
        xs_all = global_batch(cfg, inputs, it)
        xs = [x[w * cfg.batch:(w + 1) * cfg.batch].to(device) for x in xs_all]
        if cfg.fail_worker == w and cfg.fail_iteration == it:
            time.sleep(0.2)  # mid-iteration: servers have started sending
            if cfg.fail_how == "stall":
                time.sleep(10 * cfg.timeout + 60)
            os._exit(17)
        start = time.perf_counter()
        state["compute_start"] = None
        recv.start(w, it)
        for p in params.values():
            p.grad = None
        if training:
            out = module(*xs)
            for n in cfg.order:  # parameters the forward did not touch
                recv.wait_for(n)
            tgt = global_target(cfg, out.shape, it)[w * cfg.batch:(w + 1) * cfg.batch].to(device)
            loss_of(out, tgt).backward()
            for n, _, h in sends:
                _wait(h, f"worker {w}: sending the gradient of {n!r} in iteration {it}", cfg.timeout)
            missing = set(cfg.order) - {n for n, _, _ in sends}
            if missing:
                raise PSTrainingError(f"worker {w}: no gradient for {sorted(missing)[:5]} in iteration {it}; "
                                      "PS training needs every parameter to take part in the loss")
            sends.clear()
        else:
            with torch.no_grad():
                module(*xs)
            for n in cfg.order:
                recv.wait_for(n)
            tok = torch.ones(1)
            for s in range(cfg.servers):
                _wait(dist.isend(tok, s, tag=2 * P), f"worker {w}: sending the done message in iteration {it}",
                      cfg.timeout)
        if recv.cuda:
            torch.cuda.synchronize()
        end = time.perf_counter()
        timeline.records.append(IterationRecord(
            w, it, start, state["compute_start"] or end, end, dict(recv.arrivals),
            {n: cfg.server_of(n) for n in cfg.order},
            {s: _send_order(cfg, s, w, it) for s in range(cfg.servers)}))
    pool.shutdown(wait=False)
    return {"timeline": timeline.to_dict()}


def ps_train(rank: int, cfg: PSConfig, init_method: str) -> dict:
    """Run rank ``rank`` of the job in this process (blocks until done).

    Returns ``{"params": {name: tensor}}`` on a server (its shard after training)
    and ``{"timeline": {...}}`` on a worker.

    Raises
    ------
    PSTrainingError
        A transfer failed or timed out, or a peer died.
    """
    import torch
    import torch.distributed as dist
    torch.set_num_threads(max(1, cfg.threads))
    world = cfg.servers + cfg.workers
    module, inputs = build_model(cfg)
    try:
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                                timeout=_td(cfg.timeout))
    except Exception as e:
        raise _fail(f"rank {rank}: could not join the job at {init_method} within {cfg.timeout:g} s", e) from None
    if rank < cfg.servers:
        result = _run_server(cfg, rank, module)
    else:
        result = _run_worker(cfg, rank, module, inputs)
    try:
        dist.barrier()  # nobody closes its connections while a peer still reads
    except Exception as e:
        raise _fail(f"rank {rank}: final barrier failed", e) from None
    return result


# ---------------------------------------------------------------- launching

@dataclass
class PSRun:
    """The outcome of :func:`launch_local`: trained parameters (training), the
    workers' timeline, each rank's exit code and stderr, and the job directory
    when it was kept (``keep=True``; ``None`` once deleted)."""

    params: dict
    timeline: Timeline
    returncodes: list[int]
    stderr: list[str]
    workdir: str | None = None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_command(cfg_path: str, rank: int, init_method: str, out: str, parent: int | None = None) -> list[str]:
    """The command line of one rank; with ``parent`` the rank ends when that process does."""
    cmd = [sys.executable, "-m", "dlsched.hooks.torch_ps", "--config", cfg_path, "--rank", str(rank),
           "--init", init_method, "--out", out]
    return cmd + ["--parent", str(parent)] if parent is not None else cmd


def rank_env(ifname: str = "lo") -> dict:
    repo = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, GLOO_SOCKET_IFNAME=ifname, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
                PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))


def launch_local(cfg: PSConfig, timeout: float | None = None, workdir: str | None = None,
                 on_start=None, prefixes: list[list[str]] | None = None, env: list[dict] | None = None,
                 init_method: str | None = None, keep: bool = False) -> PSRun:
    """Run the whole job as ``S + W`` local processes and collect the results.

    Parameters
    ----------
    cfg : PSConfig
    timeout : float, optional
        Limit of the whole job in seconds (default ``2 * cfg.timeout + 60``).
        Once a rank fails, the others get ``cfg.timeout + 5`` seconds to fail
        cleanly; ranks still running at the limit are killed.
    workdir : str, optional
        Folder in which the job directory ``dlsched-ps-*`` is made (default: the
        system's temporary folder).
    on_start : callable, optional
        ``on_start(procs)`` is called once all processes are started (tests use
        it to kill one).
    prefixes : list of list of str, optional
        ``prefixes[rank]`` is prepended to a rank's command (the benchmark uses
        ``ip netns exec NS``).
    env : list of dict, optional
        ``env[rank]`` replaces a rank's environment.
    init_method : str, optional
        The process group's rendezvous (default: a free TCP port on loopback).
    keep : bool
        Keep the job directory (config, each rank's stderr and result file) and
        give its path as ``PSRun.workdir``, or ``workdir`` on the error. By
        default it is deleted before returning or raising: it holds a copy of
        every trained parameter.

    Returns
    -------
    PSRun

    Raises
    ------
    PSConfigError
        Invalid arguments, or the job directory cannot be made.
    PSTrainingError
        Any rank failed; the message quotes each failed rank's error line.

    Notes
    -----
    The ranks never outlive the launcher (:mod:`dlsched.hooks.lifetime`): each
    one ends within about a second of the launcher's death, even by SIGKILL,
    and while the job runs SIGTERM, SIGINT and SIGHUP first kill every rank,
    then end the launcher with ``SystemExit(128 + signum)`` (SIGINT: ``KeyboardInterrupt``)
    after removing the job directory. Only SIGKILL of the launcher leaves that
    directory behind (nothing runs in a SIGKILLed process); the ranks are dead
    by then, so it holds parameters only if the job had already finished.
    """
    world = cfg.servers + cfg.workers
    problems = []
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                or not (math.isfinite(timeout) and timeout > 0)):
        problems.append(f"timeout must be a finite number of seconds above 0, got {timeout!r}")
    for what, per_rank in (("prefixes", prefixes), ("env", env)):
        if per_rank is not None and len(per_rank) != world:
            problems.append(f"{what} must have one entry per rank ({world}), got {len(per_rank)}")
    _refuse(problems)
    try:
        tmp = tempfile.mkdtemp(prefix="dlsched-ps-", dir=workdir)
    except OSError as e:
        raise PSConfigError(f"{workdir or tempfile.gettempdir()}: cannot create the job directory there "
                            f"({e.strerror or e})") from None
    procs: list[subprocess.Popen] = []
    # the handlers cover reading the results too, so a late SIGTERM still removes the directory
    with children_die_with_launcher(procs):
        try:
            run = _run_job(cfg, tmp, procs, timeout, on_start, prefixes, env, init_method)
        except PSTrainingError as err:
            err.workdir = tmp if keep else None
            raise
        finally:
            if not keep:
                shutil.rmtree(tmp, ignore_errors=True)
    run.workdir = tmp if keep else None
    return run


def _run_job(cfg: PSConfig, tmp: str, procs: list, timeout, on_start, prefixes, env, init_method) -> PSRun:
    """Start the ranks of :func:`launch_local` in ``tmp`` (appending them to ``procs``),
    watch and reap them, and read their results."""
    import torch
    world = cfg.servers + cfg.workers
    deadline = time.monotonic() + (timeout or cfg.timeout * 2 + 60)
    cfg_path = os.path.join(tmp, "config.json")
    Path(cfg_path).write_text(json.dumps(asdict(cfg)))
    init = init_method or f"tcp://127.0.0.1:{free_port()}"
    try:
        for r in range(world):
            cmd = (prefixes[r] if prefixes else []) + rank_command(
                cfg_path, r, init, os.path.join(tmp, f"rank{r}.pt"), parent=os.getpid())
            with open(os.path.join(tmp, f"rank{r}.err"), "w") as log:
                # own session: a terminal's Ctrl-C reaches the launcher only, which then kills the group
                procs.append(subprocess.Popen(cmd, env=env[r] if env else rank_env(), stdout=subprocess.DEVNULL,
                                              stderr=log, start_new_session=True))
        if on_start:
            on_start(procs)
        failed_at = None
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                # a rank failed: the others get one timeout to notice and fail cleanly
                failed_at = time.monotonic()
                deadline = min(deadline, failed_at + cfg.timeout + 5)
            time.sleep(0.05)
    finally:
        for p in procs:
            p.poll()
        kill_children(procs)
        for p in procs:
            p.wait()
    codes = [p.returncode for p in procs]
    errs = [Path(tmp, f"rank{r}.err").read_text(errors="replace") for r in range(world)]
    if any(codes):
        lines = []
        for r, (c, e) in enumerate(zip(codes, errs)):
            if c:
                msg = [ln for ln in e.splitlines() if ln.startswith("dlsched: error:")]
                why = msg[0][len("dlsched: error: "):] if msg else (e.strip().splitlines() or ["no message"])[-1]
                lines.append(f"rank {r} exited with {c}: {why}" if c > 0 else f"rank {r} was killed (signal {-c})")
        err = PSTrainingError("parameter-server job failed: " + "; ".join(lines))
        err.returncodes, err.stderr = codes, errs
        raise err
    params, timeline = {}, Timeline()
    for r in range(world):
        res = torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False)
        params.update(res.get("params", {}))
        if "timeline" in res:
            timeline.records += Timeline.from_dict(res["timeline"]).records
    return PSRun(params, timeline, codes, errs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="one rank of a dlsched parameter-server job")
    ap.add_argument("--config", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parent", type=int, help="pid of the launcher: this rank ends as soon as it does")
    a = ap.parse_args(argv)
    if a.parent is not None:
        # first, so the rank never outlives a launcher killed during start-up
        watch_launcher(a.parent, name="this rank")
    try:
        import torch
        cfg = PSConfig(**json.loads(Path(a.config).read_text()))
        result = ps_train(a.rank, cfg, a.init)
        tmp = a.out + ".tmp"
        torch.save(result, tmp)
        os.replace(tmp, a.out)
    except DlschedError as e:
        print(f"dlsched: error: {e}", file=sys.stderr, flush=True)
        os._exit(2)
    except BaseException as e:  # noqa: BLE001 - never hang in teardown
        import traceback
        traceback.print_exc()
        print(f"dlsched: error: rank {a.rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip process-group teardown, which can block on dead peers


if __name__ == "__main__":
    sys.exit(main())
