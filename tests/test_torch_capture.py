"""Which capture the torch importer uses in inference, and the make_fx inference graph (DESIGN §2, §3).

Symbolic tracing stays first for the models it handles (names and fingerprints
unchanged); make_fx takes over where it fails, as on Hugging Face models. The
capture is recorded in the DAG, saved in ``.dag.json``, shown by ``inspect``,
and reused by the profiler.
"""
from __future__ import annotations

import pytest

from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.errors import ImportFailure
from dlsched.factory import call_factory
from dlsched.importers.torch_importer import _PARAM_VIEWS, import_factory
from tests.conftest import run_cli

SMALL_CNN = "examples/torch_models.py:small_cnn"


def _params(spec, batch=2):
    module, _, _ = call_factory(spec, batch)
    return [(n, p.numel()) for n, p in module.named_parameters()]


def _no_view_reads_a_recv_alone(graph):
    for op in graph.compute_ops():
        preds = list(graph.predecessors(op.name))
        assert not (op.op_type in _PARAM_VIEWS and len(preds) == 1 and graph.op(preds[0]).kind == RECV), op.name


def test_plain_models_keep_symbolic_trace_and_the_capture_is_saved():
    graph = import_factory(SMALL_CNN, batch=2)
    assert graph.capture == "symbolic_trace"
    again = Graph.from_dict(graph.to_dict())
    assert again.capture == "symbolic_trace" and again.fingerprint() == graph.fingerprint()
    # Formats without a choice of capture write no field.
    plain = Graph("g")
    assert "capture" not in plain.to_dict() and Graph.from_dict(plain.to_dict()).capture is None


def test_make_fx_inference_graph_of_a_plain_model():
    graph = import_factory(SMALL_CNN, batch=2, capture="make_fx")
    assert graph.capture == "make_fx" and graph.mode == "inference" and not graph.sends()
    params = _params(SMALL_CNN)
    assert [(r.name, r.params) for r in graph.recvs()] == params
    assert graph.param_count == sum(n for _, n in params)
    nx = graph.nx
    assert all(nx.in_degree(r.name) == 0 and nx.out_degree(r.name) > 0 for r in graph.recvs())
    assert all(op.op_type.startswith("aten.") or op.op_type == "getitem" for op in graph.compute_ops())
    _no_view_reads_a_recv_alone(graph)
    # The Linear weight's aten.t merged into its recv, which feeds the product itself.
    fc = [r.name for r in graph.recvs() if r.shape and len(r.shape) == 2][-1]
    assert {graph.op(s).op_type for s in graph.successors(fc)} == {"aten.addmm.default"}


def test_profiler_times_the_make_fx_inference_graph():
    from dlsched.profiling.torch_profiler import profile_torch

    graph = import_factory(SMALL_CNN, batch=2, capture="make_fx")
    df, missing = profile_torch(SMALL_CNN, graph, runs=2, warmup=0)
    assert missing == {}
    assert list(df["op"]) == [op.name for op in graph.compute_ops()]
    assert (df["time"] > 0).all() and (df["time"] <= df["median"]).all()


def test_value_dependent_control_flow_fails_both_captures(torch_factories):
    spec = f"{torch_factories}:branchy"
    with pytest.raises(ImportFailure) as err:
        import_factory(spec)
    msg = str(err.value)
    for needle in (spec, "torch.fx could not trace", "TraceError", "make_fx could not trace the forward pass"):
        assert needle in msg, msg


@pytest.mark.parametrize("mode, capture, needle", [
    ("inference", "jit", "unknown capture 'jit'"),
    ("training", "symbolic_trace", "captured with make_fx"),
])
def test_capture_argument_is_checked(mode, capture, needle):
    with pytest.raises(ImportFailure, match=needle):
        import_factory(SMALL_CNN, mode=mode, batch=2, capture=capture)


def test_hf_gpt2_inference_falls_back_to_make_fx(tmp_path):
    spec = "examples/hf_models.py:gpt2"
    graph = import_factory(spec)
    assert graph.capture == "make_fx"
    params = _params(spec)
    assert [r.name for r in graph.recvs()] == [n for n, _ in params]
    # The LM head is tied to the token embedding: one transfer, read by the embedding and the head's product.
    assert "lm_head.weight" not in graph
    readers = {graph.op(s).op_type for s in graph.successors("transformer.wte.weight")}
    assert readers == {"aten.embedding.default", "aten.mm.default"}
    _no_view_reads_a_recv_alone(graph)
    assert all(op.kind == COMPUTE for op in graph.compute_ops())
    dag = tmp_path / "gpt2.dag.json"
    from dlsched.formats.dag_json import save_dag

    save_dag(graph, dag)
    proc = run_cli("inspect", dag)
    assert proc.returncode == 0, proc.stderr
    assert "captured with" in proc.stdout and "make_fx" in proc.stdout
