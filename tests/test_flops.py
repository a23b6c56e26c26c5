"""FLOP counts of the analytic oracle against hand calculations."""
from __future__ import annotations

import pytest

from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.profiling.analytic import analytic_oracle
from dlsched.profiling.device_specs import BUILTIN, load_device_spec
from dlsched.profiling.flops import op_cost


def one_op(op_type, inputs, output, weight=None, **attrs):
    g = Graph("hand")
    if weight is not None:
        n = 1
        for d in weight:
            n *= d
        g.add_op("w", RECV, shape=list(weight), params=n, bytes=4 * n)
    g.add_op("x", COMPUTE, op_type=op_type, input_shapes=inputs, output_shapes=[output], dtypes=["float32"],
             attrs=attrs)
    if weight is not None:
        g.add_edge("w", "x")
    return g, op_cost(g, g.op("x"))


def test_onnx_conv():
    # 2·N·Cout·H·W·Cin·k·k
    _, c = one_op("Conv", [[2, 3, 32, 32], [16, 3, 3, 3]], [2, 16, 32, 32], weight=[16, 3, 3, 3])
    assert c.flops == 2 * 2 * 16 * 32 * 32 * 3 * 3 * 3


def test_grouped_and_strided_conv():
    _, c = one_op("Conv", [[1, 16, 32, 32], [16, 4, 3, 3]], [1, 16, 16, 16], weight=[16, 4, 3, 3], group=4)
    assert c.flops == 2 * 16 * 16 * 16 * 4 * 3 * 3


def test_torch_conv_module_and_aten():
    _, c = one_op("Conv2d", [[1, 3, 224, 224]], [1, 64, 112, 112], weight=[64, 3, 7, 7])
    assert c.flops == 2 * 64 * 112 * 112 * 3 * 7 * 7  # ResNet stem: 118.0 MMACs
    _, c = one_op("aten.convolution.default", [[1, 3, 224, 224], [64, 3, 7, 7]], [1, 64, 112, 112],
                  weight=[64, 3, 7, 7])
    assert c.flops == 2 * 64 * 112 * 112 * 3 * 7 * 7


def test_tf_conv_nhwc():
    _, c = one_op("Conv2D", [[1, 32, 32, 3], [3, 3, 3, 16]], [1, 32, 32, 16], weight=[3, 3, 3, 16],
                  data_format="NHWC")
    assert c.flops == 2 * 32 * 32 * 16 * 3 * 3 * 3


def test_gemm_and_matmul():
    _, c = one_op("Gemm", [[8, 512], [1000, 512], [1000]], [8, 1000], weight=[1000, 512], transB=1)
    assert c.flops == 2 * 8 * 1000 * 512
    _, c = one_op("Gemm", [[512, 8], [512, 1000]], [8, 1000], transA=1)
    assert c.flops == 2 * 8 * 1000 * 512
    _, c = one_op("MatMul", [[4, 8, 16], [4, 16, 32]], [4, 8, 32])
    assert c.flops == 2 * 4 * 8 * 32 * 16
    _, c = one_op("Linear", [[8, 2048]], [8, 1000], weight=[1000, 2048])
    assert c.flops == 2 * 8 * 1000 * 2048
    _, c = one_op("aten.addmm.default", [[1000], [8, 2048], [2048, 1000]], [8, 1000])
    assert c.flops == 2 * 8 * 1000 * 2048


@pytest.mark.parametrize("op_type,per_element", [("Add", 1), ("Mul", 1), ("Relu", 1), ("aten.relu.default", 1),
                                                 ("Sigmoid", 4), ("add", 1), ("AddV2", 1)])
def test_elementwise(op_type, per_element):
    _, c = one_op(op_type, [[2, 3, 4], [2, 3, 4]], [2, 3, 4])
    assert c.flops == per_element * 24
    assert c.bytes == 3 * 24 * 4  # two inputs read, one output written


def test_shape_ops_are_free_and_unknown_ops_are_not_costed():
    _, c = one_op("Reshape", [[2, 12]], [2, 3, 4])
    assert (c.flops, c.bytes) == (0, 0)
    g, c = one_op("MyCustomOp", [[2, 3]], [2, 3])
    assert c is None
    df, untimed = analytic_oracle(g, BUILTIN["cpu"])
    assert untimed == {"x": "no cost model for op type 'MyCustomOp'"}
    assert "x" not in set(df["op"])  # never silently zero


def test_roofline_time_and_transfers():
    g, c = one_op("Gemm", [[512, 512], [512, 512]], [512, 512], weight=[512, 512])
    spec = BUILTIN["a100"]
    df, untimed = analytic_oracle(g, spec)
    row = df.set_index("op").loc["x"]
    assert row.time == pytest.approx(max(c.flops / spec.peak_flops, c.bytes / spec.memory_bandwidth)
                                     + spec.launch_overhead)
    w = df.set_index("op").loc["w"]
    assert w.time == pytest.approx(spec.network_latency + 512 * 512 * 4 / spec.network_bandwidth)
    assert set(df["source"]) == {"analytic"}


def test_user_device_spec(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text("name: mygpu\npeak_flops: 30e12\nmemory_bandwidth: 900GB/s\nnetwork_bandwidth: 25Gbps\n")
    spec = load_device_spec(str(p))
    assert spec.memory_bandwidth == 900e9 and spec.network_bandwidth == 25e9 / 8 and spec.peak_flops == 30e12


# Commonly quoted forward figures at 224×224, one sample: ResNet-50 4.1 GMACs, VGG-16 15.5 GMACs.
QUOTED_GMACS = {"resnet50": 4.1, "vgg16": 15.5}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "vgg16"])
def test_example_forward_flops_match_quoted_figures(name):
    from dlsched.importers.loader import load_model
    from dlsched.profiling.flops import graph_flops

    graph = load_model(f"examples/torch_models.py:{name}", batch=1)
    flops, unknown = graph_flops(graph)
    assert not unknown
    assert flops / 2 / 1e9 == pytest.approx(QUOTED_GMACS[name], rel=0.02)


@pytest.mark.slow
def test_onnx_export_costs_the_same_as_torch(onnx_resnet50):
    from dlsched.importers.loader import load_model
    from dlsched.profiling.flops import graph_flops

    flops, unknown = graph_flops(load_model(str(onnx_resnet50), batch=1))
    assert not unknown, unknown[:5]
    assert flops / 2 / 1e9 == pytest.approx(QUOTED_GMACS["resnet50"], rel=0.02)


def test_profile_analytic_through_the_cli_is_deterministic(tmp_path):
    from tests.conftest import run_cli

    outs = []
    for i in range(2):
        out = tmp_path / f"o{i}.csv"
        proc = run_cli("profile", "examples/torch_models.py:small_cnn", "--analytic", "--device-spec", "h100",
                       "-o", out, "--json")
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    import pandas as pd

    df = pd.read_csv(tmp_path / "o0.csv")
    assert set(df["source"]) == {"analytic"} and (df["time"] >= 0).all()
    spec = BUILTIN["h100"]
    recv = df[df["resource"].str.startswith("ps:")].iloc[0]
    assert recv["time"] == pytest.approx(spec.network_latency + recv["bytes"] / spec.network_bandwidth)
