"""``tf.custom_gradient`` models in training mode (DESIGN §2): a one-op reproduction, and Keras EfficientNetB0.

A ``tf.custom_gradient`` is an IdentityN whose ``_gradient_op_type`` names a Python function registered in
the process that traced it; Keras's swish (``tf.nn.silu``) is one. The models are built in a subprocess, as a
user's files are, so this process's gradient registry knows none of them:

- a GraphDef does not hold the function: the backward differentiates the ops the IdentityN wraps (warned);
- a SavedModel holds it, but its captures name tensors of the un-inlined function graph: the importer maps
  them to the flat graph and the backward runs the saved function's own ops;
- the ``Identity`` that ``tf.custom_gradient`` leaves unread beside each use is not a model output, and a
  SavedModel's captured constant is a ``Const``, not an input to feed.

The gradients are checked by running the imported training graph against a hand-written NumPy backward.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from dlsched.errors import DlschedWarning
from tests.conftest import REPO, run_cli

BUILD_TINY = r'''
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from dlsched.importers.tf_importer import resource_placeholders_to_variables


class Tiny(tf.Module):
    def __init__(self):
        super().__init__()
        self.kernel = tf.Variable(np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3), name="dense/kernel")
        self.bias = tf.Variable(np.array([0.1, -0.2, 0.3], "float32"), name="dense/bias")
        self.shift = tf.constant([[0.5, -0.5, 0.25]])  # captured, like Keras Normalization's mean

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return tf.nn.silu(tf.matmul(x, self.kernel) + self.bias - self.shift)  # silu: a tf.custom_gradient


out = Path(sys.argv[1])
model = Tiny()
concrete = model.serve.get_concrete_function()
handles = {id(v.handle): v for v in model.variables}
specs = {inner.op.name: (handles[id(outer)].name.split(":")[0], handles[id(outer)].shape.as_list(),
                         tf.float32.as_datatype_enum, True)
         for outer, inner in concrete.graph.captures if id(outer) in handles}
(out / "tiny.pb").write_bytes(resource_placeholders_to_variables(concrete.graph.as_graph_def(), specs)
                              .SerializeToString())
tf.saved_model.save(model, str(out / "tiny_savedmodel"), signatures={"serving_default": concrete})
tf.saved_model.save(model, str(out / "tiny_nograd_savedmodel"), signatures={"serving_default": concrete},
                    options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
'''
KERNEL = np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)
BIAS = np.array([0.1, -0.2, 0.3], "float32")
SHIFT = np.array([[0.5, -0.5, 0.25]], "float32")
X = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 1.5, -1.0, 2.0]], "float32")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("custom_gradient")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", BUILD_TINY, str(out)], check=True, env=env, capture_output=True,
                   timeout=300)
    return {"graphdef": out / "tiny.pb", "savedmodel": out / "tiny_savedmodel",
            "nograd": out / "tiny_nograd_savedmodel"}


def _numpy_gradients() -> dict[str, np.ndarray]:
    """d mean(silu(x·W + b − s)²) / dW and / db, by hand."""
    z = X @ KERNEL + BIAS - SHIFT
    sig = 1 / (1 + np.exp(-z))
    y = z * sig
    dz = (2 * y / y.size) * sig * (1 + z * (1 - sig))
    return {"dense/kernel": X.T @ dz, "dense/bias": dz.sum(axis=0)}


def _run_gradients(path, fmt: str) -> dict[str, np.ndarray]:
    """The imported training graph's gradient for each variable, run on X with the fixed weights."""
    from dlsched.importers.tf_importer import _tf, prepare

    tf = _tf()
    prepared = prepare(path, fmt, "training", batch=len(X))
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(prepared.graph_def, name="")
        init = [tf.raw_ops.AssignVariableOp(resource=g.get_tensor_by_name(f"{v.node}:0"), value=value)
                for v, value in zip(prepared.variables, (KERNEL, BIAS))]
    assert [v.name for v in prepared.variables] == ["dense/kernel", "dense/bias"]
    assert prepared.inputs == ["x"]  # the captured constant is not a placeholder to feed
    with tf.compat.v1.Session(graph=g) as sess:
        sess.run(init)
        names = sorted(prepared.gradients)
        got = sess.run([f"{prepared.gradients[n]}:0" for n in names], {"x:0": X})
    return dict(zip(names, got))


def _import(path, fmt: str, mode: str, batch: int = 2):
    from dlsched.importers.tf_importer import import_graphdef, import_saved_model

    g = (import_graphdef if fmt == "graphdef" else import_saved_model)(path, mode=mode, batch=batch)
    g.validate()
    return g


def _loss_terms(g) -> int:
    return sum(op.op_type == "Square" and op.name.startswith("dlsched_loss/") for op in g.compute_ops())


def test_graphdef_differentiates_the_wrapped_ops(tiny):
    with pytest.warns(DlschedWarning, match=r"1 op has a custom gradient .*IdentityN.* GraphDef does not hold"):
        g = _import(tiny["graphdef"], "graphdef", "training")
    assert sorted(s.name for s in g.sends()) == ["dense/bias/grad", "dense/kernel/grad"]
    types = [op.op_type for op in g.compute_ops()]
    assert "SigmoidGrad" in types  # TF's gradient of the Sigmoid the IdentityN wraps
    assert "ZerosLike" not in types  # no zeros for the IdentityN's unread pass-through outputs
    assert _loss_terms(g) == 1  # the unread Identity beside the custom gradient is no output
    with pytest.warns(DlschedWarning):
        got = _run_gradients(tiny["graphdef"], "graphdef")
    for name, want in _numpy_gradients().items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-7)


def test_savedmodel_runs_the_saved_gradient(tiny):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DlschedWarning)
        g = _import(tiny["savedmodel"], "savedmodel", "training")
        got = _run_gradients(tiny["savedmodel"], "savedmodel")
    assert sorted(s.name for s in g.sends()) == ["dense/bias/grad", "dense/kernel/grad"]
    saved = [op for op in g.compute_ops() if "/custom_gradient/" in op.name]
    # TF's swish gradient recomputes the sigmoid after the incoming gradient arrives, instead of SigmoidGrad.
    assert "Sigmoid" in {op.op_type for op in saved} and all(op.phase == "backward" for op in saved)
    assert "SigmoidGrad" not in {op.op_type for op in g.compute_ops()}
    assert _loss_terms(g) == 1
    for name, want in _numpy_gradients().items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-7)


def test_savedmodel_saved_without_its_gradient(tiny):
    with pytest.warns(DlschedWarning, match="SavedModel does not hold"):
        got = _run_gradients(tiny["nograd"], "savedmodel")
    for name, want in _numpy_gradients().items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-7)


def test_savedmodel_captured_constant_is_a_const(tiny):
    g = _import(tiny["savedmodel"], "savedmodel", "inference", batch=5)
    consts = [op for op in g.compute_ops() if op.op_type == "Const" and op.output_shapes == [[1, 3]]]
    assert len(consts) == 1 and not list(g.predecessors(consts[0].name))  # not given the batch, not fed
    assert g.param_count == 15 and _loss_terms(g) == 0


# -- Keras EfficientNetB0 (swish everywhere) ---------------------------------------------------

# Keras's Normalization layer copies its mean, variance and count into constants when built, so the traced
# graph never reads those three variables (3 + 3 + 1 values): they are in count_params() but not in the graph.
UNREAD = {"normalization/mean": 3, "normalization/variance": 3, "normalization/count": 1}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["graphdef", "savedmodel"])
def test_efficientnetb0_imports(keras_efficientnetb0, fmt):
    keras = keras_efficientnetb0["keras"]
    path = keras_efficientnetb0[fmt]
    inference = _import(path, fmt, "inference")
    if fmt == "graphdef":
        with pytest.warns(DlschedWarning, match="49 ops have a custom gradient"):
            training = _import(path, fmt, "training")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DlschedWarning)
            training = _import(path, fmt, "training")
    for g in (inference, training):
        assert sorted(r.name for r in g.recvs()) == sorted(set(keras["variable_names"]) - set(UNREAD))
        assert g.param_count == keras["count_params"] - sum(UNREAD.values()) == 5_330_564
        assert sum(op.op_type == "IdentityN" for op in g.compute_ops()) == 49
    sends = training.sends()
    assert len(sends) == keras["trainable_variables"] == 213
    assert sum(s.params for s in sends) == keras["trainable_params"]
    assert _loss_terms(training) == 1


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["graphdef", "savedmodel"])
def test_efficientnetb0_plan_batch(keras_efficientnetb0, fmt):
    proc = run_cli("plan-batch", keras_efficientnetb0[fmt], "--memory", "4GiB", "--batch", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["batch"] > 2 and 0 < plan["memory"]["total"] <= plan["usable"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["graphdef", "savedmodel"])
def test_efficientnetb0_snapshot(keras_efficientnetb0, fmt, tmp_path):
    out = tmp_path / "baseline.json"
    proc = run_cli("snapshot", keras_efficientnetb0[fmt], "--mode", "training", "--memory", "4GiB",
                   "--batch", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["send_ops"] == 213 and metrics["largest_batch"] > 2
    assert metrics["param_count"] == 5_330_564
