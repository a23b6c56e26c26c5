"""TAC on ONNX exports (issue: numbers a user can trust, item 2).

Exported with ``do_constant_folding=False``, each Linear weight reaches its
MatMul through ``Transpose(initializer)``; with folding, through a new
anonymous initializer. Either way TAC must not lose to TIC or to the unordered
baseline: the Transpose is part of reading the weight, not work that its
transfer alone unlocks. Profiled for real with onnxruntime, as a user would."""
from __future__ import annotations

import json
import warnings

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

MODELS = {"transformer": "examples/torch_models.py:transformer", "bert": "examples/hf_models.py:bert"}


def _export(spec: str, path, folding: bool) -> None:
    import torch

    from dlsched.factory import call_factory
    module, inputs, _ = call_factory(spec)
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs), str(path), dynamo=False, do_constant_folding=folding,
                          input_names=["input"], dynamic_axes={"input": {0: "batch"}})


@pytest.mark.parametrize("folding", [False, True], ids=["no-folding", "folding"])
@pytest.mark.parametrize("name", list(MODELS))
def test_tac_keeps_up_with_tic_on_onnx_exports(tmp_path, name, folding):
    model, oracle = tmp_path / f"{name}.onnx", tmp_path / "oracle.csv"
    _export(MODELS[name], model, folding)
    proc = run_cli("profile", model, "--batch", "8", "--bandwidth", "1Gbps", "-o", oracle, timeout=600)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("simulate", model, "--batch", "8", "--oracle", oracle, "--compare", "tac,tic,unordered", "--json")
    assert proc.returncode == 0, proc.stderr
    e = {r["algorithm"]: r["efficiency"] for r in json.loads(proc.stdout)["compare"]}
    assert e["tac"] >= e["tic"] - 0.02 and e["tac"] >= e["unordered"] and e["tic"] >= e["unordered"], e
    if not folding:  # every Linear's Transpose(weight) merged into its recv
        from dlsched.importers.onnx_importer import import_onnx
        graph = import_onnx(model, batch=8)
        assert not any(op.op_type == "Transpose" and all(graph.op(p).kind == "recv"
                                                         for p in graph.predecessors(op.name))
                       for op in graph.compute_ops())
