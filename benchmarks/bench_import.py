"""Import speed (DESIGN §8): an ONNX model of at least 10,000 nodes in under 2 s.

Generates a deep pre-norm transformer encoder op by op with ``onnx.helper``
(25 nodes per layer, symbolic batch, small widths so the file stays small)
into ``$DLSCHED_CACHE`` or ``.cache/models``, then times
:func:`dlsched.importers.onnx_importer.import_onnx` (shape inference
included, ``import onnx`` excluded), best of a few runs. Training-mode import
(mirrored backward) is printed for information.

Usage: ``python benchmarks/bench_import.py [--layers 400] [--repeat 3]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TARGET_NODES = 10_000
TARGET_SECONDS = 2.0


def build(path: Path, layers: int, d: int = 64, heads: int = 4, seq: int = 16) -> int:
    """Write the generated model to ``path`` (atomically); return its node count."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def param(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name))
        return name

    def const(name, values):
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def node(op, ins, name, **attrs):
        out = f"{name}:0"
        nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    heads_shape = const("heads_shape", [0, seq, heads, d // heads])
    model_shape = const("model_shape", [0, seq, d])
    split = const("qkv_split", [d, d, d])
    scale = numpy_helper.from_array(np.array((d // heads) ** -0.5, np.float32), "scale")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    rsqrt2 = numpy_helper.from_array(np.array(2 ** -0.5, np.float32), "rsqrt2")
    inits += [scale, half, one, rsqrt2]
    x = "x"
    for i in range(layers):
        p = f"l{i}"
        h = node("LayerNormalization", [x, param(f"{p}.ln1.weight", d), param(f"{p}.ln1.bias", d)], f"{p}/ln1", axis=-1)
        qkv = node("MatMul", [h, param(f"{p}.qkv.weight", d, 3 * d)], f"{p}/qkv")
        qkv = node("Add", [qkv, param(f"{p}.qkv.bias", 3 * d)], f"{p}/qkv_bias")
        outs = [f"{p}/split:{k}" for k in range(3)]
        nodes.append(helper.make_node("Split", [qkv, split], outs, name=f"{p}/split", axis=-1))
        qh, kh, vh = (node("Transpose", [node("Reshape", [t, heads_shape], f"{p}/reshape_{c}")],
                           f"{p}/transpose_{c}", perm=[0, 2, 3, 1] if c == "k" else [0, 2, 1, 3])
                      for t, c in zip(outs, "qkv"))
        att = node("Softmax", [node("Mul", [node("MatMul", [qh, kh], f"{p}/scores"), "scale"], f"{p}/scale")],
                   f"{p}/softmax", axis=-1)
        y = node("Transpose", [node("MatMul", [att, vh], f"{p}/context")], f"{p}/merge", perm=[0, 2, 1, 3])
        y = node("Reshape", [y, model_shape], f"{p}/reshape_out")
        y = node("Add", [node("MatMul", [y, param(f"{p}.proj.weight", d, d)], f"{p}/proj"),
                         param(f"{p}.proj.bias", d)], f"{p}/proj_bias")
        x = node("Add", [x, y], f"{p}/residual1")
        h = node("LayerNormalization", [x, param(f"{p}.ln2.weight", d), param(f"{p}.ln2.bias", d)], f"{p}/ln2", axis=-1)
        h = node("Add", [node("MatMul", [h, param(f"{p}.ff1.weight", d, 4 * d)], f"{p}/ff1"),
                         param(f"{p}.ff1.bias", 4 * d)], f"{p}/ff1_bias")
        erf = node("Erf", [node("Mul", [h, "rsqrt2"], f"{p}/gelu_scale")], f"{p}/gelu_erf")
        h = node("Mul", [node("Mul", [h, "half"], f"{p}/gelu_half"), node("Add", [erf, "one"], f"{p}/gelu_one")],
                 f"{p}/gelu")
        h = node("Add", [node("MatMul", [h, param(f"{p}.ff2.weight", 4 * d, d)], f"{p}/ff2"),
                         param(f"{p}.ff2.bias", d)], f"{p}/ff2_bias")
        x = node("Add", [x, h], f"{p}/residual2")
    nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
    graph = helper.make_graph(nodes, "deep_transformer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, d])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return len(nodes)


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="ONNX import speed benchmark")
    ap.add_argument("--layers", type=int, default=400, help="encoder layers (25 nodes each)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    import onnx  # noqa: F401  - framework start-up is excluded from the measurement

    from dlsched.importers.onnx_importer import import_onnx

    cache = Path(os.environ.get("DLSCHED_CACHE", REPO / ".cache" / "models"))
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"bench_deep_transformer_{args.layers}.onnx"
    if not path.exists():
        build(path, args.layers)
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)

    graph = import_onnx(path, batch=8)
    assert graph.op("l0/qkv").output_shapes == [[8, 16, 192]], "shape inference did not run"
    t_inf = best_of(lambda: import_onnx(path, batch=8), args.repeat)
    t_train = best_of(lambda: import_onnx(path, batch=8, mode="training"), args.repeat)
    ok = nodes >= TARGET_NODES and t_inf < TARGET_SECONDS
    print(f"model: {path.name}, {nodes:,} ONNX nodes, {len(graph.recvs()):,} parameters "
          f"({graph.param_count:,} elements)")
    print(f"import_onnx inference (best of {args.repeat}): {t_inf:.3f} s  "
          f"({nodes / t_inf:,.0f} nodes/s; DAG: {len(graph):,} ops, {graph.nx.number_of_edges():,} edges)")
    print(f"import_onnx training  (best of {args.repeat}): {t_train:.3f} s  (information; mirrored backward)")
    print(f"{'PASS' if ok else 'FAIL'}: import of a {nodes:,}-node ONNX model in {t_inf:.3f} s "
          f"(target: >= {TARGET_NODES:,} nodes in < {TARGET_SECONDS:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
