"""torch.fx importer: parameters, structure, training graphs, CLI behaviour (DESIGN §2)."""
from __future__ import annotations

import functools
import json

import networkx as nx
import pytest

from dlsched.dag import COMPUTE, RECV, SEND
from dlsched.errors import ImportFailure
from dlsched.factory import call_factory
from dlsched.importers.torch_importer import import_factory, trace_factory
from tests.conftest import assert_clean_error, run_cli

EX = "examples/torch_models.py"
SPECS = {name: f"{EX}:{name}" for name in ("resnet50", "vgg16", "transformer", "small_cnn")}


@functools.lru_cache(maxsize=None)
def _graph(name, mode="inference", batch=1):
    """Imports shared by several tests (the graphs are not modified)."""
    return import_factory(SPECS[name], mode=mode, batch=batch)


def _module(spec, batch=1):
    module, _, _ = call_factory(spec, batch)
    return module


@pytest.mark.parametrize("name", sorted(SPECS))
def test_parameter_totals_match_named_parameters(name):
    spec = SPECS[name]
    graph = _graph(name)
    module = _module(spec)
    params = list(module.named_parameters())
    assert [r.name for r in graph.recvs()] == [n for n, _ in params]
    assert [r.index for r in graph.recvs()] == list(range(len(params)))
    assert graph.param_count == sum(p.numel() for _, p in params)
    assert graph.param_bytes == sum(p.numel() * p.element_size() for _, p in params)
    for recv, (_, p) in zip(graph.recvs(), params):
        assert recv.shape == list(p.shape) and recv.params == p.numel() and recv.dtypes == ["float32"]
    assert graph.source == {"format": "torch", "spec": spec, "batch": 1}
    assert graph.name == name
    if name == "resnet50":
        assert graph.param_count == 25_557_032


def test_cli_inspect_vgg16_parameter_totals():
    from dlsched.cli.common import fmt_bytes

    proc = run_cli("inspect", SPECS["vgg16"], "--batch", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["param_count"] == 138_357_544
    assert summary["param_bytes"] == 138_357_544 * 4
    assert fmt_bytes(summary["param_bytes"]) == "527.8 MiB"
    assert summary["recv_ops"] == 32 and summary["send_ops"] == 0
    assert summary["op_types"]["Conv2d"] == 13 and summary["op_types"]["Linear"] == 3


def _param_readers(traced):
    """fx node name → parameter names it reads: owned by a called module, or via get_attr."""
    pnames = {n for n, _ in traced.params}
    readers: dict[str, set] = {}
    for node in traced.gm.graph.nodes:
        if node.op == "call_module":
            sub = traced.module.get_submodule(node.target)
            readers.setdefault(node.name, set()).update(
                f"{node.target}.{n}" for n, _ in sub.named_parameters())
        elif node.op == "get_attr" and node.target in pnames:
            for user in node.users:
                readers.setdefault(user.name, set()).add(node.target)
    return readers


@pytest.mark.parametrize("name", ["resnet50", "transformer"])
def test_inference_recvs_are_roots_and_feed_every_reader(name):
    spec = SPECS[name]
    graph = _graph(name, batch=2)
    traced = trace_factory(spec, batch=2, shapes=False)
    g = graph.nx
    for recv in graph.recvs():
        assert g.in_degree(recv.name) == 0
        assert g.out_degree(recv.name) > 0, f"{recv.name} feeds nothing"
    readers = _param_readers(traced)
    assert readers
    for node, params in readers.items():
        op = traced.op_names[node]
        for p in params:
            assert g.has_edge(p, op), f"{op} reads {p} but does not depend on it"
    # compute ops keep fx graph order after the recvs
    fx_order = [traced.op_names[n.name] for n in traced.gm.graph.nodes
                if n.op in ("call_module", "call_function", "call_method")]
    assert [op.name for op in graph.compute_ops()] == fx_order
    assert graph.compute_ops()[0].index == len(graph.recvs())
    assert not graph.sends()


def test_inference_op_fields_for_cost_models():
    graph = _graph("resnet50", batch=2)
    conv = graph.op("layer2_0_conv2")
    assert conv.op_type == "Conv2d"
    assert conv.attrs["in_channels"] == 128 and conv.attrs["out_channels"] == 128
    assert conv.attrs["kernel_size"] == [3, 3] and conv.attrs["stride"] == [2, 2]
    assert conv.attrs["padding"] == [1, 1] and conv.attrs["groups"] == 1
    assert conv.input_shapes == [[2, 128, 56, 56]] and conv.output_shapes == [[2, 128, 28, 28]]
    assert conv.dtypes == ["float32"]
    fc = graph.op("fc")
    assert fc.op_type == "Linear" and fc.attrs["in_features"] == 2048 and fc.attrs["out_features"] == 1000
    assert graph.op("flatten").op_type == "flatten"
    assert graph.op("add").op_type == "add"
    # the transformer's pos parameter is read through get_attr, which is not an op
    tg = _graph("transformer", batch=2)
    assert "pos" in tg and tg.op("pos").kind == RECV
    assert [s for s in tg.successors("pos")] == ["add"]


def _reachable_from_forward_users(graph, recv):
    g = graph.nx
    users = [u for u in g.successors(recv) if graph.op(u).phase == "forward"]
    assert users, f"no forward op uses {recv}"
    return all(nx.has_path(g, u, f"{recv}/grad") for u in users)


@pytest.mark.parametrize("name", ["small_cnn", "transformer"])
def test_training_graph_has_one_leaf_send_per_parameter(name):
    spec = SPECS[name]
    graph = _graph(name, mode="training", batch=2)
    graph.validate()
    params = [n for n, _ in _module(spec).named_parameters()]
    g = graph.nx
    assert [r.name for r in graph.recvs()] == params
    assert [s.name for s in graph.sends()] == [f"{p}/grad" for p in params]
    n = len(graph)
    assert [s.index for s in graph.sends()] == list(range(n - len(params), n))
    for send in graph.sends():
        assert send.kind == SEND and g.out_degree(send.name) == 0 and g.in_degree(send.name) == 1
        assert send.bytes == graph.op(send.param).bytes and send.phase == "backward"
        (producer,) = g.predecessors(send.name)
        assert graph.op(producer).phase == "backward"
        assert _reachable_from_forward_users(graph, send.param), send.name
    for recv in graph.recvs():
        assert g.in_degree(recv.name) == 0
    phases = {op.op_type: op.phase for op in graph.compute_ops()}
    assert phases["aten.addmm.default"] == "forward"
    assert phases["aten.nll_loss_forward.default"] == "forward"
    assert phases["aten.nll_loss_backward.default"] == "backward"
    assert all(op.op_type.startswith("aten.") or op.op_type == "getitem" for op in graph.compute_ops())


@pytest.mark.slow
def test_resnet50_training_imports_the_aten_joint_graph():
    graph = _graph("resnet50", mode="training", batch=2)
    assert len(graph.compute_ops()) > 1000
    assert len(graph.sends()) == len(graph.recvs()) == 161
    conv = graph.op("convolution")
    assert conv.op_type == "aten.convolution.default" and conv.phase == "forward"
    assert conv.attrs == {"stride": [2, 2], "padding": [3, 3], "dilation": [1, 1], "transposed": False,
                          "output_padding": [0, 0], "groups": 1}
    assert conv.input_shapes == [[2, 3, 224, 224], [64, 3, 7, 7]] and conv.output_shapes == [[2, 64, 112, 112]]
    assert list(graph.predecessors("convolution")) == ["conv1.weight"]
    types = {op.op_type for op in graph.compute_ops() if op.phase == "backward"}
    assert "aten.convolution_backward.default" in types and "aten.native_batch_norm_backward.default" in types
    assert _reachable_from_forward_users(graph, "conv1.weight")


def test_training_loss_for_non_logit_output(torch_factories):
    graph = import_factory(f"{torch_factories}:regressor", mode="training")
    types = [op.op_type for op in graph.compute_ops()]
    assert "aten.pow.Tensor_Scalar" in types and "aten.nll_loss_forward.default" not in types
    assert [s.name for s in graph.sends()] == ["lin.weight/grad", "lin.bias/grad"]


def test_non_persistent_buffers_are_not_transfers(torch_factories):
    """A buffer outside the state dict (persistent=False: derived constants such as
    rotary inv_freq) is rebuilt by every worker, so no server sends it."""
    for mode in ("inference", "training"):
        graph = import_factory(f"{torch_factories}:rotary", mode=mode, buffers=True)
        assert [r.name for r in graph.recvs()] == ["lin.weight", "lin.bias", "shift"], mode


def test_buffers_become_recvs_after_parameters(torch_factories):
    spec = f"{torch_factories}:bnnet"
    plain = import_factory(spec)
    with_buffers = import_factory(spec, buffers=True)
    names = [r.name for r in with_buffers.recvs()]
    assert names == [r.name for r in plain.recvs()] + ["bn.running_mean", "bn.running_var"]
    assert "bn.num_batches_tracked" not in with_buffers
    assert with_buffers.op("bn.running_var").bytes == 8 * 4
    assert list(with_buffers.successors("bn.running_mean")) == ["bn"]
    assert with_buffers.param_count == plain.param_count + 16
    assert plain.fingerprint() != with_buffers.fingerprint()
    # the scale parameter is read through get_attr
    assert list(plain.successors("scale")) == ["mul"]
    training = import_factory(spec, mode="training", buffers=True)
    training.validate()
    assert [r.name for r in training.recvs()] == names
    assert len(training.sends()) == len(plain.recvs())  # buffers have no gradient
    for buf in ("bn.running_mean", "bn.running_var"):
        assert training.nx.out_degree(buf) > 0 and training.nx.in_degree(buf) == 0
        types = {training.op(s).op_type for s in training.successors(buf)}
        assert "aten.native_batch_norm.default" in types, types


def test_cli_buffers_flag_on_resnet50():
    proc = run_cli("inspect", SPECS["resnet50"], "--batch", "1", "--buffers", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["recv_ops"] == 161 + 2 * 53
    assert summary["param_count"] == 25_557_032 + 2 * sum(
        m.num_features for m in _module(SPECS["resnet50"]).modules() if hasattr(m, "running_mean"))


def test_batch_changes_shapes_not_fingerprint(torch_factories):
    a = _graph("small_cnn", batch=2)
    b = _graph("small_cnn", batch=5)
    assert a.op("conv1").input_shapes == [[2, 3, 32, 32]]
    assert b.op("conv1").input_shapes == [[5, 3, 32, 32]]
    assert a.fingerprint() == b.fingerprint()
    ta = _graph("small_cnn", mode="training", batch=2)
    tb = _graph("small_cnn", mode="training", batch=5)
    assert ta.fingerprint() == tb.fingerprint() and ta.fingerprint() != a.fingerprint()
    assert ta.op("convolution").output_shapes == [[2, 32, 32, 32]]
    assert tb.op("convolution").output_shapes == [[5, 32, 32, 32]]
    # a factory without a batch keyword: the example's dim 0 (3) is resized
    for batch in (2, 7):
        g = import_factory(f"{torch_factories}:bnnet", batch=batch)
        assert g.op("conv").input_shapes == [[batch, 3, 8, 8]]
    assert import_factory(f"{torch_factories}:bnnet").op("conv").input_shapes == [[3, 3, 8, 8]]


def test_cli_batch_keeps_fingerprint():
    proc = run_cli("inspect", SPECS["small_cnn"], "--batch", "3", "--mode", "training", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fingerprint"] == _graph("small_cnn", mode="training", batch=2).fingerprint()


def test_cli_round_trip_through_dag_json(tmp_path):
    path = tmp_path / "x.dag.json"
    first = run_cli("inspect", SPECS["transformer"], "--mode", "training", "--batch", "2",
                    "--save", path, "--json")
    assert first.returncode == 0, first.stderr
    second = run_cli("inspect", path, "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(first.stdout) == json.loads(second.stdout)
    saved = json.loads(path.read_text())
    assert saved["source"] == {"format": "torch", "spec": SPECS["transformer"], "batch": 2}
    conv = next(op for op in saved["ops"] if op["name"] == "mm")
    assert conv["op_type"] == "aten.mm.default" and conv["input_shapes"]


def test_different_models_never_share_a_fingerprint(torch_factories):
    fps = {}
    for name in SPECS:
        fps[(name, "inference")] = _graph(name, batch=1).fingerprint()
        if name != "vgg16":  # the others' training graphs are cached at batch 2 by earlier tests
            fps[(name, "training")] = _graph(name, mode="training", batch=2).fingerprint()
    for name in ("bnnet", "regressor"):
        fps[(name, "inference")] = import_factory(f"{torch_factories}:{name}").fingerprint()
    assert len(set(fps.values())) == len(fps), fps


# -- bad input -------------------------------------------------------------------
def test_cli_missing_factory_file():
    assert_clean_error(run_cli("inspect", "nonexistent.py:fn"), "nonexistent.py", "no such file")


def test_cli_factory_that_raises(torch_factories):
    proc = run_cli("inspect", f"{torch_factories}:raises")
    assert_clean_error(proc, "factories.py:raises", "RuntimeError", "weights file is corrupt")


def test_cli_unknown_suffix(tmp_path):
    model = tmp_path / "model.xyz"
    model.write_text("not a model")
    assert_clean_error(run_cli("inspect", model), "model.xyz", "unknown model format")


def test_cli_module_not_found():
    assert_clean_error(run_cli("inspect", "no_such_pkg.models:fn"), "no_such_pkg.models", "not found")


@pytest.mark.parametrize("target, needles", [
    ("missing_fn", ["has no function", "missing_fn"]),
    ("not_a_module", ["must return (torch.nn.Module, example_inputs)", "int"]),
    ("branchy", ["torch.fx could not trace", "TraceError"]),
])
def test_library_errors_name_spec_and_problem(torch_factories, target, needles):
    spec = f"{torch_factories}:{target}"
    with pytest.raises(ImportFailure) as err:
        import_factory(spec)
    msg = str(err.value)
    assert spec in msg
    for needle in needles:
        assert needle in msg, msg


def test_module_spec_is_imported_by_name():
    graph = import_factory("examples.torch_models:small_cnn", batch=2)
    assert graph.name == "small_cnn" and len(graph.recvs()) == 10
    assert graph.fingerprint() == _graph("small_cnn", batch=5).fingerprint()
    assert all(op.kind == COMPUTE for op in graph.compute_ops())
