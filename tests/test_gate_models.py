"""The CI gate out of the box: ``snapshot`` then ``check``, in training mode, with the default analytic oracle.

On models nobody here wrote (random weights from configs): Keras VGG-16 and
ResNet-50 as GraphDefs, MobileNetV2 as a SavedModel (``tests/fixtures_tf.py``,
cached), the Hugging Face BERT, GPT-2 and Llama factories
(``examples/hf_models.py``) and BERT's ONNX export. The analytic oracle
refuses a graph with an op it cannot cost, so ``snapshot`` succeeding means
that every op of these training graphs has a cost model, and ``check`` right
after it must find the same figures.

Each model is loaded once, by ``inspect --save`` (the framework's import and
capture are most of a command's time); ``snapshot`` and ``check`` read the
saved training DAG, which holds everything the analytic oracle reads.
"""
from __future__ import annotations

import json

import pytest

from tests import test_corpus_hf
from tests.conftest import run_cli

bert_onnx = test_corpus_hf.bert_onnx  # the module fixture that exports BERT to ONNX, used here too

HF = "examples/hf_models.py"
MODELS = {  # name → (the fixture and key giving the path, or a factory spec; --batch; an op type it must hold)
    "keras_vgg16": (("keras_vgg16", "graphdef"), "2", "Conv2DBackpropFilter"),
    "keras_resnet50": (("keras_resnet50", "graphdef"), "2", "Conv2DBackpropFilter"),
    "keras_mobilenetv2": (("keras_corpus", "mobilenetv2"), "2", "DepthwiseConv2dNativeBackpropFilter"),
    "bert": (f"{HF}:bert", None, "aten._safe_softmax.default"),
    "gpt2": (f"{HF}:gpt2", None, "aten.tril.default"),
    "llama": (f"{HF}:llama", None, "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"),
    "bert_onnx": (("bert_onnx", None), None, "GatherElements"),
}


def _model(source, request) -> str:
    if isinstance(source, str):
        return source
    fixture, key = source
    value = request.getfixturevalue(fixture)
    if fixture == "keras_corpus":
        return str(value(key)["tf_saved_model"])
    return str(value if key is None else value[key])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_snapshot_then_check_in_training(name, request, tmp_path):
    source, batch, op_type = MODELS[name]
    model = _model(source, request)
    dag, baseline = tmp_path / "model.dag.json", tmp_path / "baseline.json"
    saved = run_cli("inspect", model, "--mode", "training", *(["--batch", batch] if batch else []), "--save", dag)
    assert saved.returncode == 0, saved.stdout + saved.stderr

    snap = run_cli("snapshot", dag, "-o", baseline, "--json")
    assert snap.returncode == 0, snap.stdout + snap.stderr
    doc = json.loads(baseline.read_text())
    assert doc["model"]["mode"] == "training" and doc["op_types"].get(op_type), sorted(doc["op_types"])
    assert doc["metrics"]["tac_makespan"] > 0 and doc["metrics"]["critical_path"] > 0

    check = run_cli("check", dag, "--baseline", baseline, "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    result = json.loads(check.stdout)
    assert not result["regressed"] and not result["fingerprint_changed"]
    assert all(m["change"] == 0 for m in result["metrics"]), result["metrics"]  # the oracle is deterministic
