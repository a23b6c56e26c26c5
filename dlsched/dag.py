"""The common DAG every importer produces and every analysis consumes.

A :class:`Graph` wraps a networkx ``DiGraph`` whose nodes are ops (DESIGN §2).
Each op has a ``kind`` (``compute``, ``recv`` or ``send``), a ``resource``
(``compute:0``, ``ps:K/down``, ``ps:K/up``) and a canonical ``index`` used for
every tie-break, so results are deterministic. Parameters become ``recv`` ops
named after the parameter; in training mode every parameter also gets a
``send`` op for its gradient.

Examples
--------
>>> g = Graph("fig1")
>>> _ = g.add_op("recv1", RECV, bytes=4, params=1, shape=[1])
>>> _ = g.add_op("recv2", RECV, bytes=4, params=1, shape=[1])
>>> _ = g.add_op("op1", COMPUTE, op_type="Add")
>>> _ = g.add_op("op2", COMPUTE, op_type="Mul")
>>> g.add_edge("recv1", "op1"); g.add_edge("recv1", "op2"); g.add_edge("recv2", "op2")
>>> g.validate()
>>> [op.name for op in g.recvs()]
['recv1', 'recv2']
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import networkx as nx

from .errors import GraphError

COMPUTE = "compute"
RECV = "recv"
SEND = "send"
KINDS = (COMPUTE, RECV, SEND)
# What a graph holds: the forward pass, or forward + backward + gradient sends.
MODES = ("inference", "training")
COMPUTE_RESOURCE = "compute:0"


def downlink(ps: int) -> str:
    """Resource name of parameter server ``ps``'s link towards the worker."""
    return f"ps:{ps}/down"


def uplink(ps: int) -> str:
    """Resource name of the worker's link towards parameter server ``ps``."""
    return f"ps:{ps}/up"


@dataclass
class Op:
    """One node of the DAG.

    ``output_shapes`` / ``input_shapes`` hold one list of dims per tensor
    (``None`` for an unknown dim); ``shape`` is the parameter's shape for
    recv/send ops. ``phase`` is ``forward`` or ``backward`` in training graphs.
    ``attrs`` keeps small, JSON-able op attributes (kernel shape, strides, …)
    that cost models need.
    """

    name: str
    kind: str
    index: int
    op_type: str = ""
    resource: str = COMPUTE_RESOURCE
    output_shapes: list = field(default_factory=list)
    input_shapes: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    bytes: int = 0
    params: int = 0
    shape: list | None = None
    param: str | None = None  # for send ops: the parameter whose gradient it carries
    phase: str = "forward"
    attrs: dict = field(default_factory=dict)

    @property
    def ps(self) -> int | None:
        """The parameter server index of a recv/send op, else ``None``."""
        if self.kind == COMPUTE:
            return None
        return int(self.resource.split(":")[1].split("/")[0])

    def to_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "kind": self.kind,
            "index": self.index,
            "op_type": self.op_type,
            "resource": self.resource,
        }
        for key in ("output_shapes", "input_shapes", "dtypes", "attrs"):
            value = getattr(self, key)
            if value:
                d[key] = value
        if self.kind != COMPUTE:
            d.update(bytes=self.bytes, params=self.params, shape=self.shape)
            if self.param is not None:
                d["param"] = self.param
        if self.phase != "forward":
            d["phase"] = self.phase
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Op":
        """Rebuild an op from :meth:`to_dict`'s output, checking every field a file could get wrong.

        Raises
        ------
        GraphError
            A field of the wrong type or a value with no meaning (negative or
            infinite bytes, a resource that does not fit the op's kind).
        """
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise GraphError(f"an op must be an object with a string 'name', got {d!r:.80}")
        name, kind = d["name"], d.get("kind")
        if kind not in KINDS:
            raise GraphError(f"op {name!r} has unknown kind {kind!r} (one of {', '.join(KINDS)})")
        resource = d.get("resource", COMPUTE_RESOURCE)
        if not isinstance(resource, str) or not _RESOURCE[kind].fullmatch(resource):
            raise GraphError(f"op {name!r} of kind {kind} has resource {resource!r}; expected "
                             f"{'compute:N' if kind == COMPUTE else 'ps:K/down' if kind == RECV else 'ps:K/up'}")
        for key in ("output_shapes", "input_shapes", "dtypes"):
            if not isinstance(d.get(key, []), list):
                raise GraphError(f"op {name!r}: {key} must be a list")
        if not isinstance(d.get("attrs", {}), dict):
            raise GraphError(f"op {name!r}: attrs must be an object")
        return cls(
            name=name,
            kind=kind,
            index=_count(d.get("index"), f"op {name!r}: index"),
            op_type=str(d.get("op_type", "")),
            resource=resource,
            output_shapes=d.get("output_shapes", []),
            input_shapes=d.get("input_shapes", []),
            dtypes=d.get("dtypes", []),
            bytes=_count(d.get("bytes", 0), f"op {name!r}: bytes"),
            params=_count(d.get("params", 0), f"op {name!r}: params"),
            shape=d.get("shape"),
            param=d.get("param"),
            phase=d.get("phase", "forward"),
            attrs=d.get("attrs", {}),
        )


_RESOURCE = {COMPUTE: re.compile(r"compute:\d+"), RECV: re.compile(r"ps:\d+/down"), SEND: re.compile(r"ps:\d+/up")}


def _count(value: Any, what: str) -> int:
    """A non-negative whole number from a file (JSON may hold 1.5, true, Infinity or "3")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or value != int(value):
        raise GraphError(f"{what} must be a non-negative whole number, got {value!r}")
    return int(value)


class Graph:
    """A model's computation graph: ops, dependencies and parameter transfers.

    Parameters
    ----------
    name : str
        The model's name (file stem or factory name).
    mode : {"inference", "training"}
    source : dict, optional
        Where the graph came from (format, path, batch), saved with it.
    capture : str, optional
        How the importer captured the graph when it had a choice (torch:
        ``symbolic_trace`` or ``make_fx``); saved with it, shown by ``inspect``,
        and not part of the fingerprint.
    """

    def __init__(self, name: str, mode: str = "inference", source: dict | None = None,
                 capture: str | None = None):
        self.name = name
        self.mode = mode
        self.source = dict(source or {})
        self.capture = capture
        self.ps_count = 1
        self.ps_strategy = "round-robin"
        self._g = nx.DiGraph()
        self._ops: dict[str, Op] = {}
        self._sorted: list[Op] | None = None

    # -- building -------------------------------------------------------
    def add_op(self, name: str, kind: str, index: int | None = None, **fields: Any) -> Op:
        """Add an op; its canonical index defaults to the insertion position."""
        if kind not in KINDS:
            raise GraphError(f"op {name!r} has unknown kind {kind!r}")
        if name in self._ops:
            raise GraphError(f"duplicate op name {name!r} in model {self.name!r}")
        if index is None:
            index = len(self._ops)
        if kind == RECV:
            fields.setdefault("resource", downlink(0))
        elif kind == SEND:
            fields.setdefault("resource", uplink(0))
        op = Op(name=name, kind=kind, index=index, **fields)
        self._ops[name] = op
        self._g.add_node(name)
        self._sorted = None
        return op

    def add_edge(self, src: str, dst: str) -> None:
        """Add a dependency ``src → dst`` (both ops must exist)."""
        for n in (src, dst):
            if n not in self._ops:
                raise GraphError(f"edge {src!r} -> {dst!r} names unknown op {n!r}")
        if src != dst:
            self._g.add_edge(src, dst)

    def remove_op(self, name: str) -> None:
        """Remove an op and its edges (importers use it to prune dead nodes)."""
        del self._ops[name]
        self._g.remove_node(name)
        self._sorted = None

    def renumber(self) -> None:
        """Make canonical indices dense (0..n-1), keeping their relative order."""
        for i, op in enumerate(sorted(self._ops.values(), key=lambda o: o.index)):
            op.index = i
        self._sorted = None

    # -- access ---------------------------------------------------------
    @property
    def nx(self) -> nx.DiGraph:
        """The underlying networkx graph (node keys are op names)."""
        return self._g

    def __len__(self) -> int:
        return len(self._ops)

    def __contains__(self, name: str) -> bool:
        return name in self._ops

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops())

    def op(self, name: str) -> Op:
        return self._ops[name]

    def ops(self) -> list[Op]:
        """All ops in canonical order."""
        if self._sorted is None:
            self._sorted = sorted(self._ops.values(), key=lambda o: o.index)
        return self._sorted

    def of_kind(self, kind: str) -> list[Op]:
        return [op for op in self.ops() if op.kind == kind]

    def recvs(self) -> list[Op]:
        return self.of_kind(RECV)

    def sends(self) -> list[Op]:
        return self.of_kind(SEND)

    def compute_ops(self) -> list[Op]:
        return self.of_kind(COMPUTE)

    def predecessors(self, name: str) -> Iterable[str]:
        return self._g.predecessors(name)

    def successors(self, name: str) -> Iterable[str]:
        return self._g.successors(name)

    def edges(self) -> list[tuple[str, str]]:
        """Edges sorted by the canonical index of their ends."""
        idx = {n: op.index for n, op in self._ops.items()}
        return sorted(self._g.edges(), key=lambda e: (idx[e[0]], idx[e[1]]))

    def resources(self) -> list[str]:
        """Resources in use, compute first, then links by server."""
        res = {op.resource for op in self._ops.values()}
        return sorted(res, key=lambda r: (r != COMPUTE_RESOURCE, r))

    @property
    def param_count(self) -> int:
        return sum(op.params for op in self.recvs())

    @property
    def param_bytes(self) -> int:
        return sum(op.bytes for op in self.recvs())

    def topological_order(self) -> list[Op]:
        """A topological order, ties broken by canonical index."""
        idx = {n: op.index for n, op in self._ops.items()}
        return [self._ops[n] for n in nx.lexicographical_topological_sort(self._g, key=idx.__getitem__)]

    def longest_path_ops(self) -> int:
        """Number of ops on the longest dependency chain."""
        if not self._ops:
            return 0
        return nx.dag_longest_path_length(self._g) + 1

    # -- checks ---------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`GraphError` for a cycle or misplaced transfers."""
        if not nx.is_directed_acyclic_graph(self._g):
            cycle = nx.find_cycle(self._g)
            path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
            raise GraphError(f"the graph of model {self.name!r} has a cycle: {path}")
        for op in self.recvs():
            if self._g.in_degree(op.name):
                raise GraphError(f"recv op {op.name!r} has predecessors; transfers from a server must be roots")
        for op in self.sends():
            if self._g.out_degree(op.name):
                raise GraphError(f"send op {op.name!r} has successors; gradient transfers must be leaves")

    # -- parameter servers ------------------------------------------------
    def assign_ps(self, count: int = 1, strategy: str = "round-robin") -> None:
        """Assign parameters (and their gradients) to ``count`` parameter servers.

        See :func:`ps_assignment` for the strategies.
        """
        recvs = self.recvs()
        server = ps_assignment(recvs, count, strategy)
        for op in recvs:
            op.resource = downlink(server[op.name])
        for op in self.sends():
            if op.param in server:
                op.resource = uplink(server[op.param])
        self.ps_count, self.ps_strategy = count, strategy

    # -- identity and persistence -------------------------------------------
    def fingerprint(self) -> str:
        """Hash of node names, kinds, edges and parameter shapes.

        It ignores batch size, times and server assignment, so a priority file
        stays valid for the same model at another batch size, but not for a
        model with another structure.
        """
        h = hashlib.sha256()
        for op in self.ops():
            h.update(f"{op.name}\x00{op.kind}\x00{op.shape if op.kind != COMPUTE else ''}\x01".encode())
        for u, v in self.edges():
            h.update(f"{u}\x00{v}\x01".encode())
        return h.hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        d = {
            "format": "dlsched.dag",
            "version": 1,
            "name": self.name,
            "mode": self.mode,
            "source": self.source,
            "fingerprint": self.fingerprint(),
            "ps": {"count": self.ps_count, "strategy": self.ps_strategy},
            "ops": [op.to_dict() for op in self.ops()],
            "edges": [list(e) for e in self.edges()],
        }
        if self.capture is not None:  # files of importers without a choice stay as they were
            d["capture"] = self.capture
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Graph":
        if d.get("format") != "dlsched.dag":
            raise GraphError("not a dlsched DAG file (missing format: dlsched.dag)")
        if d.get("version") != 1:
            raise GraphError(f"unsupported DAG file version {d.get('version')!r}")
        if not isinstance(d.get("name"), str) or d.get("mode", "inference") not in ("inference", "training"):
            raise GraphError("the DAG file needs a string 'name' and a 'mode' of inference or training")
        if not isinstance(d.get("ops"), list) or not isinstance(d.get("edges"), list):
            raise GraphError("the DAG file needs an 'ops' list and an 'edges' list")
        g = cls(d["name"], d.get("mode", "inference"), d.get("source") if isinstance(d.get("source"), dict) else {},
                capture=d.get("capture") if isinstance(d.get("capture"), str) else None)
        for od in d["ops"]:
            op = Op.from_dict(od)
            if op.name in g._ops:
                raise GraphError(f"duplicate op name {op.name!r}")
            g._ops[op.name] = op
            g._g.add_node(op.name)
        for edge in d["edges"]:
            if not (isinstance(edge, list) and len(edge) == 2 and all(isinstance(n, str) for n in edge)):
                raise GraphError(f"an edge must be a pair of op names, got {edge!r:.80}")
            g.add_edge(*edge)
        ps = d.get("ps", {})
        if not isinstance(ps, dict):
            raise GraphError("'ps' must be an object with 'count' and 'strategy'")
        g.ps_count = _count(ps.get("count", 1), "the parameter-server count")
        g.ps_strategy = ps.get("strategy", "round-robin")
        if g.ps_count < 1:
            raise GraphError("the DAG file has zero parameter servers; a model needs at least one")
        beyond = [op.name for op in g.recvs() + g.sends() if op.ps >= g.ps_count]
        if beyond:
            raise GraphError(f"op {beyond[0]!r} uses parameter server {g.op(beyond[0]).ps}, but the file has "
                             f"only {g.ps_count}")
        g.validate()
        stored = d.get("fingerprint")
        if stored and stored != g.fingerprint():
            raise GraphError(f"DAG file fingerprint {stored} does not match its contents ({g.fingerprint()}); the file was edited or is corrupt")
        return g

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False)

    def __repr__(self) -> str:
        return (f"<Graph {self.name!r} mode={self.mode} ops={len(self)} "
                f"recv={len(self.recvs())} send={len(self.sends())}>")


def fold_parameter_views(graph: Graph, view_types: Iterable[str], constant_types: Iterable[str] = ()) -> int:
    """Merge compute ops that only reshape one parameter into its recv; return how many merged.

    A transform of a parameter alone (a Linear weight's transpose in torch or
    ONNX, TF's ``…/read``, a Cast or Reshape of an initializer) moves no data
    between devices: it is part of reading the parameter. Left as an op that
    depends on that transfer alone, TicTac's ``P`` would credit the transfer
    with unlocking work, and TAC would send the largest weights first. So the
    op goes, and its consumers depend on the recv directly. Inputs that are
    constants (``constant_types`` with no inputs of their own, e.g. a Reshape's
    target shape) do not count against "one parameter".

    Examples
    --------
    >>> g = Graph("g")
    >>> for n, k, t in [("w", RECV, "Recv"), ("shape", COMPUTE, "Constant"), ("wt", COMPUTE, "Transpose"),
    ...                 ("r", COMPUTE, "Reshape"), ("mm", COMPUTE, "MatMul")]: _ = g.add_op(n, k, op_type=t)
    >>> for u, v in [("w", "wt"), ("wt", "r"), ("shape", "r"), ("r", "mm")]: g.add_edge(u, v)
    >>> fold_parameter_views(g, {"Transpose", "Reshape"}, {"Constant"}), sorted(g.successors("w"))
    (2, ['mm'])
    """
    view_types, constant_types = set(view_types), set(constant_types)
    merged, changed = 0, True
    while changed:
        changed = False
        for op in list(graph.compute_ops()):
            if op.op_type not in view_types:
                continue
            preds = [graph.op(p) for p in graph.predecessors(op.name)]
            recvs = [p for p in preds if p.kind == RECV]
            consts = [p for p in preds if p.op_type in constant_types and not graph.nx.in_degree(p.name)]
            if len(recvs) != 1 or len(recvs) + len(consts) != len(preds):
                continue
            for succ in list(graph.successors(op.name)):
                graph.add_edge(recvs[0].name, succ)
            graph.remove_op(op.name)
            merged += 1
            changed = True
    return merged


PS_STRATEGIES = ("round-robin", "greedy")


def ps_assignment(recvs: list[Op], count: int, strategy: str = "round-robin") -> dict[str, int]:
    """The server of each parameter (recv op) under a placement strategy.

    ``round-robin`` follows canonical order, like TensorFlow's
    ``replica_device_setter``; it can leave servers very uneven when parameter
    sizes cycle (ResNet's conv/bn/bn). ``greedy`` puts the largest parameter
    first onto the least-loaded server (ties: lower server index).

    Examples
    --------
    >>> g = Graph("g")
    >>> ops = [g.add_op(n, RECV, bytes=b) for n, b in [("w1", 90), ("b1", 1), ("b2", 1), ("w2", 90)]]
    >>> ps_assignment(ops, 2), ps_assignment(ops, 2, "greedy")
    ({'w1': 0, 'b1': 1, 'b2': 0, 'w2': 1}, {'w1': 0, 'w2': 1, 'b1': 0, 'b2': 1})
    """
    if count < 1:
        raise GraphError(f"--ps must be at least 1, got {count}")
    if strategy == "round-robin":
        return {op.name: i % count for i, op in enumerate(recvs)}
    if strategy == "greedy":
        server: dict[str, int] = {}
        load = [0] * count
        for op in sorted(recvs, key=lambda o: (-o.bytes, o.index)):
            k = min(range(count), key=lambda j: (load[j], j))
            server[op.name] = k
            load[k] += op.bytes
        return server
    raise GraphError(f"unknown parameter-server strategy {strategy!r} (round-robin or greedy)")


def add_gradient_sends(graph: Graph, producers: dict[str, str], frozen: Iterable[str] = ()) -> None:
    """Add one ``send`` op per parameter, fed by the op producing its gradient.

    Parameters
    ----------
    producers : dict
        Parameter (recv op) name → name of the op whose output is its gradient.
        Send ops are named ``<param>/grad`` and take canonical indices after
        every existing op, in parameter declaration order.
    frozen : iterable of str
        Recv ops that are read but never trained (TF's non-trainable
        variables): they get no send, and no gradient is expected for them.
    """
    frozen = set(frozen)
    missing = [r.name for r in graph.recvs() if r.name not in producers and r.name not in frozen]
    if missing:
        raise GraphError(f"no gradient found for parameter(s): {', '.join(missing[:5])}")
    base = max((op.index for op in graph.ops()), default=-1) + 1
    for i, recv in enumerate(graph.recvs()):
        if recv.name in frozen:
            continue
        send = graph.add_op(
            f"{recv.name}/grad", SEND, index=base + i, op_type="Send",
            bytes=recv.bytes, params=recv.params, shape=recv.shape, param=recv.name,
            dtypes=list(recv.dtypes), phase="backward",
        )
        graph.add_edge(producers[recv.name], send.name)


def dtype_size(dtype: str) -> int:
    """Bytes per element of a dtype name (``float32``, ``torch.float16``, ``DT_HALF``…)."""
    d = str(dtype).lower().replace("torch.", "").replace("dt_", "")
    table = {
        "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2,
        "bfloat16": 2, "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2,
        "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
    }
    return table.get(d, 4)
