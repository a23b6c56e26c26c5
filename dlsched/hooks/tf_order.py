"""TensorFlow enforcement hook: control dependencies between variable reads in
priority order, with an in-flight window (TicTac §5 "Enforcing"; DESIGN §6).

Read ``i`` (in priority order) gets a control input on read ``i - window``, so at
most ``window`` parameter reads — and the transfers they feed — are in flight
at once: ``window=1`` serialises them; a larger window keeps the link
pipelined while still fixing the order. The reads are ``ReadVariableOp`` nodes
(resource variables) and ``<var>/read`` ``Identity`` nodes (TF1 reference
variables). A transfer name matches a read when it is the variable's name (the
``VariableV2``/``VarHandleOp`` node or its ``shared_name``) or the read's own name.

Three entry points:

- :func:`order_graph_def` — a ``GraphDef`` in, a rewritten copy out;
- :func:`order_graph` — a ``tf.Graph`` (TF1 graph mode) rewritten in place,
  before a ``Session`` runs it; this is what the cluster example uses;
- :func:`order_function` — a ``tf.function``: its concrete graph is rewritten
  and wrapped back into a callable with the same variables.

Examples
--------
>>> gd2 = order_graph_def(gd, ["dense/kernel", "dense/bias"], window=1)     # doctest: +SKIP
>>> order_graph(tf.compat.v1.get_default_graph(), priority_file, window=2)  # doctest: +SKIP
"""
from __future__ import annotations

from dlsched.errors import GraphError, PriorityFileError

_VAR_OPS = {"VariableV2", "Variable", "VarHandleOp", "Placeholder"}


def _order_list(order) -> list[str]:
    from dlsched.formats.priority_file import PriorityFile
    if isinstance(order, PriorityFile):
        return order.order
    return list(order)


def _clean(inp: str) -> str:
    return inp.lstrip("^").split(":")[0]


def find_reads(nodes: dict) -> dict[str, list[str]]:
    """Variable name → names of the nodes that read it.

    ``nodes`` maps node name → (op, inputs, shared_name)."""
    reads: dict[str, list[str]] = {}
    for name, (op, inputs, _) in nodes.items():
        if op == "ReadVariableOp" or (op == "Identity" and name.endswith("/read")):
            src = _clean(inputs[0]) if inputs else ""
            if src in nodes and nodes[src][0] in _VAR_OPS:
                shared = nodes[src][2]
                for key in {src, shared} - {None, ""}:
                    reads.setdefault(key, []).append(name)
    return reads


def plan_edges(nodes: dict, order, window: int = 1, strict: bool = True) -> list[tuple[str, str]]:
    """The control edges ``(before, after)`` that enforce ``order``.

    Raises
    ------
    PriorityFileError
        A transfer matches no variable read (with ``strict``), or ``window < 1``.
    """
    if window < 1:
        raise PriorityFileError(f"the in-flight window must be at least 1, got {window}")
    reads = find_reads(nodes)
    groups, unknown = [], []
    for t in _order_list(order):
        if t in reads:
            groups.append(sorted(reads[t]))
        elif t in nodes and nodes[t][0] in ("ReadVariableOp", "Identity"):
            groups.append([t])
        else:
            unknown.append(t)
    if unknown and strict:
        raise PriorityFileError(
            f"{len(unknown)} transfer(s) of the priority file match no variable read in the graph: "
            f"{', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''} (graph reads: "
            f"{', '.join(sorted(reads)[:5])}…)")
    return [(b, a) for i in range(window, len(groups)) for a in groups[i] for b in groups[i - window]]


def _check_acyclic(nodes: dict, extra: list[tuple[str, str]]) -> None:
    import networkx as nx
    g = nx.DiGraph()
    for name, (_, inputs, _) in nodes.items():
        g.add_node(name)
        for i in inputs:
            g.add_edge(_clean(i), name)
    g.add_edges_from(extra)
    if not nx.is_directed_acyclic_graph(g):
        cyc = nx.find_cycle(g)
        raise GraphError("enforcing this order would create a cycle in the graph: "
                         + " → ".join(u for u, _ in cyc[:6]) + "; a later read feeds an earlier one")


def order_graph_def(graph_def, order, window: int = 1, strict: bool = True):
    """A copy of ``graph_def`` whose variable reads follow ``order`` (a list of
    names, highest priority first, or a PriorityFile) with ``window`` reads in flight.

    Raises
    ------
    PriorityFileError, GraphError
        Unknown transfer names, or an order that contradicts the graph's data flow.
    """
    import tensorflow as tf
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(graph_def)
    nodes = {n.name: (n.op, list(n.input), n.attr["shared_name"].s.decode() if "shared_name" in n.attr else "")
             for n in gd.node}
    edges = plan_edges(nodes, order, window, strict)
    _check_acyclic(nodes, edges)
    by_name = {n.name: n for n in gd.node}
    for before, after in edges:
        if "^" + before not in by_name[after].input:
            by_name[after].input.append("^" + before)
    return gd


def order_graph(graph, order, window: int = 1, strict: bool = True) -> list[tuple[str, str]]:
    """Rewrite a ``tf.Graph`` in place (before it runs); returns the added edges."""
    ops = {op.name: op for op in graph.get_operations()}
    nodes = {}
    for name, op in ops.items():
        shared = ""
        if op.type in ("VarHandleOp", "VariableV2"):
            try:
                shared = op.get_attr("shared_name").decode()
            except ValueError:
                pass
        nodes[name] = (op.type, [t.name for t in op.inputs] + ["^" + c.name for c in op.control_inputs], shared)
    edges = plan_edges(nodes, order, window, strict)
    _check_acyclic(nodes, edges)
    for before, after in edges:
        ops[after]._add_control_input(ops[before])  # the public API only adds them while building
    return edges


def order_function(fn, order, window: int = 1, *args, strict: bool = True):
    """Rewrite a ``tf.function`` traced for ``args``; returns a callable taking the
    same (tensor) arguments. Variables are matched by their ``.name`` without ``:0``."""
    import tensorflow as tf
    cf = fn.get_concrete_function(*args)
    graph = cf.graph
    # the captured resource placeholders stand for variables: name them after them
    var_of_handle = {}
    for v in getattr(cf, "variables", ()):
        var_of_handle[id(v.handle)] = v.name.split(":")[0]
    rename = {}
    for external, internal in graph.captures:
        if id(external) in var_of_handle:
            rename[internal.op.name] = var_of_handle[id(external)]
    gd = graph.as_graph_def()
    nodes = {n.name: (n.op, list(n.input), rename.get(n.name, "")) for n in gd.node}
    edges = plan_edges(nodes, order, window, strict)
    _check_acyclic(nodes, edges)
    new_gd = order_graph_def(gd, [], 1, strict=False)
    by_name = {n.name: n for n in new_gd.node}
    for before, after in edges:
        by_name[after].input.append("^" + before)
    n_args = len(graph.inputs) - len(graph.captures)
    in_names = [t.name for t in graph.inputs[:n_args]]
    cap_names = [internal.name for _, internal in graph.captures]
    cap_values = [external for external, _ in graph.captures]
    out_names = [t.name for t in graph.outputs]

    def body(*xs):
        mapping = dict(zip(in_names, xs))
        g = tf.compat.v1.get_default_graph()  # the wrap_function graph captures the live handles
        mapping.update((n, g.capture(v)) for n, v in zip(cap_names, cap_values))
        return tf.graph_util.import_graph_def(new_gd, input_map=mapping, return_elements=out_names, name="")

    sig = [tf.TensorSpec(t.shape, t.dtype) for t in graph.inputs[:n_args]]
    wrapped = tf.compat.v1.wrap_function(body, sig)
    wrapped.dlsched_edges = edges
    return wrapped
