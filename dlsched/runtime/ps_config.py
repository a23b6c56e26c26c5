"""The settings of a parameter-server job, checked before any process starts.

:class:`PSConfig` checks every setting on construction (:class:`PSConfigError`,
one message naming each bad one); :func:`check_settings` checks the numbers
alone, before the model is imported. :func:`config_from_priority_file` takes
the order and sharding from a priority file and :func:`check_priority_file`
refuses a file whose fingerprint is not that of the graph being trained, in
the mode being trained (:class:`~dlsched.errors.PriorityFileError`).

Examples
--------
>>> check_settings(workers=0)
Traceback (most recent call last):
...
dlsched.runtime.ps_config.PSConfigError: invalid parameter-server configuration: workers must be at least 1, got 0
"""
from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass, field, fields

from dlsched.errors import DlschedError, PriorityFileError


class PSConfigError(DlschedError):
    """A parameter-server setting is invalid; raised before any process starts."""


#: Longest per-wait timeout accepted, in seconds (about 11.6 days). Larger values overflow
#: ``datetime.timedelta`` in the process group and are a hang in all but name.
MAX_TIMEOUT = 1e6
_MODES = ("training", "inference")
_FAIL_HOWS = ("exit", "stall")
_AGGREGATIONS = ("weighted", "mean")
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
    choice("aggregation", _AGGREGATIONS)
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
    for key in ("model_kwargs", "policy_options"):
        if key in values:
            kw = values[key]
            try:  # every rank reads the config from a JSON file
                ok = isinstance(kw, dict) and all(isinstance(k, str) for k in kw) and json.dumps(kw) is not None
            except (TypeError, ValueError):
                ok = False
            if not ok:
                problems.append(f"{key} must be a JSON object with string keys, got {kw!r:.80}")
    whole("global_batch", 1, optional=True)
    for key in ("batch_policy", "progress"):
        if values.get(key) is not None and not isinstance(values[key], str):
            problems.append(f"{key} must be a string, got {values[key]!r:.80}")
    if values.get("global_batch") is not None and values.get("batch_policy") is None and "batch_policy" in values:
        problems.append("global_batch needs a batch_policy (without one every worker trains on batch samples)")
    if values.get("batch_policy") is not None and values.get("mode", "training") != "training":
        problems.append("batch_policy needs mode 'training' (it weights the gradients)")
    return problems


def refuse(problems: list[str]) -> None:
    """Raise one :class:`PSConfigError` listing ``problems``, if there are any."""
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
    refuse([f"unknown setting {k!r}" for k in unknown] + _setting_problems(dict(settings)))


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
    ``global_batch`` is a whole number ≥ 1 or ``None``, and a ``batch_policy``
    (training only) must be one :func:`~dlsched.runtime.batch_manager.check_policy` accepts;
    ``order`` is a non-empty list of distinct names and ``ps`` only names those.
    ``rotation``, when not empty, sets the send order per iteration: iteration
    ``i`` sends in ``rotation[i % len(rotation)]``, each entry a permutation of
    ``order`` or ``None`` for a fresh random order (as ``unordered``); it runs
    several orders interleaved in one job, so the machine's drift hits each alike.

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
    rotation: list = field(default_factory=list)
    seed: int = 0
    timeout: float = 60.0
    device: str = "cpu"
    model_kwargs: dict = field(default_factory=dict)
    fail_worker: int | None = None
    fail_iteration: int | None = None
    fail_how: str = "exit"  # "exit": die abruptly (tests); "stall": stop responding
    threads: int = 1
    #: with a batch policy: the global batch X (default ``workers × batch``), split anew every iteration
    global_batch: int | None = None
    batch_policy: str | None = None  # a name of :func:`dlsched.planning.batch_policies.make_policy`
    policy_options: dict = field(default_factory=dict)
    progress: str | None = None  # a file server 0 rewrites with the iteration it is in
    #: "weighted": push n·b_i/X·g_i (paper Alg. 3); "mean": the naive 1/W average (§3.4 eq. 5), biased
    aggregation: str = "weighted"

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
        if not isinstance(self.rotation, list):
            problems.append(f"rotation must be a list of orders, got {self.rotation!r:.80}")
        elif isinstance(self.order, list):
            bad = next((i for i, o in enumerate(self.rotation)
                        if o is not None and (not isinstance(o, list) or not all(isinstance(n, str) for n in o)
                                              or sorted(o) != sorted(self.order))), None)
            if bad is not None:
                problems.append(f"rotation[{bad}] must be a permutation of the order or null")
            elif self.rotation and self.unordered:
                problems.append("rotation and unordered exclude each other (a null entry is an unordered iteration)")
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
        refuse(problems)
        if self.batch_policy is not None:
            from .batch_manager import check_policy  # the policy refuses its own bad settings
            check_policy(self)
        for k, v in values.items():  # normalised numbers
            setattr(self, k, v)
        self.ps = {n: int(s) for n, s in self.ps.items()}

    def server_of(self, name: str) -> int:
        """The index of the server that holds parameter ``name``."""
        return self.ps.get(name, self.order.index(name)) % self.servers


def config_from_priority_file(model: str, priority_file, **kw) -> PSConfig:
    """Build a :class:`PSConfig` whose order and sharding come from a priority file,
    after checking that the file was made for the graph this job trains.

    Parameters
    ----------
    model : str
        The factory spec, as for :class:`PSConfig`.
    priority_file : PriorityFile or path
        A :class:`~dlsched.formats.priority_file.PriorityFile` or a path to one.
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
    from dlsched.formats.priority_file import PriorityFile, read_priority_file
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
    from dlsched.formats.priority_file import check_against

    from .ps_model import check_names, parameter_names  # imports torch: only when a file is checked
    if pf.fingerprint is not None:
        if set(cfg.model_kwargs) - {"batch"}:
            # The importer calls fn() (or fn(batch=...)), so it cannot see the graph fn(**model_kwargs) builds.
            raise PriorityFileError(
                f"{where}: cannot check its fingerprint for model {cfg.model!r} called with "
                f"{sorted(cfg.model_kwargs)}; wrap those arguments in a factory of their own and run "
                "dlsched order on it, or use a TicTac file (checked by transfer names only)")
        from dlsched.importers.loader import load_model
        graph = load_model(cfg.model, mode=cfg.mode, batch=cfg.model_kwargs.get("batch"))
        check_against(pf, graph, where)
        expected = [r.name for r in graph.recvs()]
    else:
        expected = parameter_names(cfg)
    check_names(pf.order, expected, where, cfg.model)


