"""Third-party models through the CLI, as a user runs them: Hugging Face BERT, GPT-2, Llama, Mixtral, Qwen2-MoE.

The models are ``transformers`` code, not written for dlsched (random weights
from small configs, ``examples/hf_models.py``; nothing downloaded). Symbolic
torch.fx tracing fails on all of them, so inference goes through the importer's
``make_fx`` capture. Each model, in each mode, runs the user's sequence:
``inspect --save`` (exact parameter totals against ``named_parameters()``),
``profile``, ``order --algo tac``, ``simulate``, and ``snapshot`` (the
analytic oracle must cost every op). BERT exported to ONNX runs the same steps.

One test per model and mode, sharing the saved ``.dag.json`` and the oracle
between its steps: only ``inspect`` and ``profile`` load the framework. The
Hugging Face pipelines run two at a time (a module fixture), each one's steps in
order; the figures they check do not depend on the machine's load.
"""
from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import pytest

from tests.conftest import assert_ok_and_quiet, run_cli

HF = "examples/hf_models.py"
MODES = ("inference", "training")


@functools.lru_cache(maxsize=None)
def _named_parameters(name: str) -> tuple:
    """``(name, numel)`` of the factory's ``named_parameters()`` (a tied weight once)."""
    from dlsched.factory import call_factory

    module, _, _ = call_factory(f"{HF}:{name}")
    return tuple((n, p.numel()) for n, p in module.named_parameters())


def _ok(proc) -> dict:
    assert_ok_and_quiet(proc)
    return json.loads(proc.stdout)


def _run_steps(model: str, mode: str, folder) -> dict:
    """inspect → profile → order --algo tac → simulate → snapshot, as a user runs them; the completed processes."""
    dag, oracle, prio = folder / "model.dag.json", folder / "oracle.csv", folder / "tac.json"
    return {
        "inspect": run_cli("inspect", model, "--mode", mode, "--save", dag, "--json"),
        "profile": run_cli("profile", model, "--mode", mode, "-o", oracle, "--bandwidth", "1Gbps", "--json"),
        "order": run_cli("order", dag, "--algo", "tac", "--oracle", oracle, "-o", prio, "--json"),
        "simulate": run_cli("simulate", dag, "--oracle", oracle, "--priorities", prio, "--json"),
        # The CI gate's analytic oracle has a cost model for every op of the graph (it refuses otherwise).
        "snapshot": run_cli("snapshot", dag, "-o", folder / "baseline.json", "--json"),
    }


def _check_steps(runs: dict, mode: str, params: tuple, folder, capture: str | None) -> None:
    """Each step's figures: exact parameter totals, every op timed, every transfer ordered, L ≤ makespan ≤ U."""
    n = len(params)
    summary = _ok(runs["inspect"])
    assert summary["param_count"] == sum(k for _, k in params)
    assert summary["recv_ops"] == n and summary["send_ops"] == (n if mode == "training" else 0)
    assert summary["capture"] == capture
    saved = json.loads((folder / "model.dag.json").read_text())
    assert saved.get("capture") == capture
    recvs = sorted((op for op in saved["ops"] if op["kind"] == "recv"), key=lambda op: op["index"])
    assert [(op["name"], op["params"]) for op in recvs] == list(params)

    prof = _ok(runs["profile"])
    assert prof["timed"] == summary["compute_ops"] and not prof["untimed"] and not prof["defaulted"]

    order = _ok(runs["order"])
    assert order["transfers"] == n
    transfers = json.loads((folder / "tac.json").read_text())["transfers"]
    assert sorted(t["name"] for t in transfers) == sorted(p for p, _ in params)

    sim = _ok(runs["simulate"])
    assert sim["lower"] * (1 - 1e-9) <= sim["makespan"] <= sim["upper"] * (1 + 1e-9)
    assert sim["makespan"] == pytest.approx(order["makespan"])
    assert_ok_and_quiet(runs["snapshot"])


HF_MODELS = ["bert", "gpt2", "llama", "mixtral", "qwen2_moe"]


@pytest.fixture(scope="module")
def hf_runs(request, tmp_path_factory) -> dict:
    """Every selected model and mode through the CLI, two pipelines at a time: the steps of one run in order,
    and the figures checked do not depend on the machine's load (no timing is compared here)."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = sorted({(item.callspec.params["name"], item.callspec.params["mode"]) for item in request.session.items
                     if getattr(item, "originalname", "") == "test_hf_model_through_the_cli"})
    folders = {key: tmp_path_factory.mktemp(f"{key[0]}_{key[1]}") for key in wanted}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(_run_steps, f"{HF}:{key[0]}", key[1], folders[key]) for key in wanted}
        return {key: (f.result(), folders[key]) for key, f in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", HF_MODELS)
def test_hf_model_through_the_cli(name, mode, hf_runs):
    runs, folder = hf_runs[(name, mode)]
    _check_steps(runs, mode, _named_parameters(name), folder, capture="make_fx")


@pytest.fixture(scope="module")
def bert_onnx(tmp_path_factory):
    """BERT exported with the TorchScript exporter (``dynamo=False``), every parameter its own initializer."""
    import torch

    from dlsched.factory import call_factory
    from examples.export_onnx import _drop_initializer_inputs

    module, inputs, _ = call_factory(f"{HF}:bert")
    module.eval()
    path = tmp_path_factory.mktemp("hf_onnx") / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # As examples/export_onnx.py does: no folding, and initializers kept as inputs while exporting so
        # that equal ones (the LayerNorm weights are all ones) are not merged behind Identity nodes.
        torch.onnx.export(module, inputs, str(path), dynamo=False, opset_version=17, input_names=["input_ids"],
                          output_names=["logits"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.EVAL, keep_initializers_as_inputs=True)
    _drop_initializer_inputs(str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_hf_bert_exported_to_onnx_through_the_cli(bert_onnx, mode, tmp_path):
    _check_steps(_run_steps(str(bert_onnx), mode, tmp_path), mode, _named_parameters("bert"), tmp_path, capture=None)


@pytest.fixture(scope="module")
def dynamo_exports(tmp_path_factory):
    """BERT and the example ResNet-50 exported as a user calls it in torch 2.13: ``torch.onnx.export(model, args,
    f)``, the dynamo exporter (onnxscript), weights in a ``.onnx.data`` file beside it, constants folded."""
    import torch

    from dlsched.factory import call_factory

    folder = tmp_path_factory.mktemp("dynamo")
    paths = {}
    for name, spec in (("bert", f"{HF}:bert"), ("resnet50", "examples/torch_models.py:resnet50")):
        module, inputs, _ = call_factory(spec, batch=2)
        paths[name] = folder / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module.eval(), inputs, str(paths[name]))
        assert paths[name].with_name(f"{name}.onnx.data").exists()
        paths[name + ":parameters"] = sum(1 for _ in module.named_parameters())
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["bert", "resnet50"])
def test_default_onnx_exporter_through_the_cli(dynamo_exports, name, mode, tmp_path):
    """inspect says what the exporter folded (ResNet-50's BatchNorm goes into its convolutions, BERT's weights
    are stored transposed under new names), and the file goes through profile, order and simulate in both modes."""
    import onnx

    model = dynamo_exports[name]
    summary = _ok(run_cli("inspect", model, "--mode", mode, "--json"))
    folded = summary["exporter_folded"]
    if name == "resnet50":  # BatchNorm into the convolutions: 53 layers' weight and bias, 25,557,032 in torch
        assert folded["parameters"] == 106 and folded["rules"]["FuseBatchNormIntoConv"] == 53
        assert summary["recv_ops"] + folded["parameters"] == dynamo_exports[name + ":parameters"]
        stored = onnx.load(str(model))
        assert summary["param_count"] == sum(int(np.prod(t.dims)) for t in stored.graph.initializer
                                          if t.data_type == onnx.TensorProto.FLOAT) == 25_503_912
    else:  # transposed weights stored anew, under names the exporter made up
        assert 0 < folded["parameters"] < dynamo_exports[name + ":parameters"]
    oracle, prio = tmp_path / "oracle.csv", tmp_path / "tac.json"
    prof = _ok(run_cli("profile", model, "--mode", mode, "-o", oracle, "--runs", "2", "--json"))
    assert prof["timed"] == summary["compute_ops"] and not prof["untimed"]
    order = _ok(run_cli("order", model, "--mode", mode, "--algo", "tac", "--oracle", oracle, "-o", prio, "--json"))
    assert order["transfers"] == summary["recv_ops"]
    sim = _ok(run_cli("simulate", model, "--mode", mode, "--oracle", oracle, "--priorities", prio, "--json"))
    assert sim["makespan"] == pytest.approx(order["makespan"])
