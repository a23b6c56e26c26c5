"""Keras corpus: MobileNetV2 and InceptionV3 saved the way users save them, through the CLI.

Each model is saved with ``tf.saved_model.save(model, d)`` and with
``model.export(d)`` (``examples/build_keras.py --corpus``, weights=None, small
inputs) and goes through the commands a user runs: ``inspect --json`` (the
parameter total is Keras's ``count_params()``), ``profile``, ``order --algo tac``
and ``simulate``. ``inspect --save`` writes the DAG once, and ``order`` and
``simulate`` read that ``.dag.json``, as docs/walkthrough.md does, instead of
re-importing the SavedModel.

The four pipelines run two at a time (a module fixture). They run under the machine's oneDNN setting: the
``dlsched`` commands run in their own processes anyway, and the fused-kernel
rule they rely on is covered in both oneDNN settings by the ``tf_onednn``
tests (``tests/test_tf_onednn.py``); running the corpus twice would add about
a minute for no new path.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import assert_ok_and_quiet, run_cli

BATCH = "2"


def _json(proc):
    assert_ok_and_quiet(proc)
    return json.loads(proc.stdout)


def _run_steps(model, folder) -> dict:
    """inspect --save → profile → order --algo tac → simulate, as a user runs them; the completed processes."""
    dag, oracle, prio = folder / "m.dag.json", folder / "oracle.csv", folder / "prio.json"
    return {"inspect": run_cli("inspect", model, "--batch", BATCH, "--save", dag, "--json"),
            "profile": run_cli("profile", model, "--batch", BATCH, "-o", oracle, "--json"),
            "order": run_cli("order", dag, "--algo", "tac", "--oracle", oracle, "-o", prio, "--json"),
            "simulate": run_cli("simulate", dag, "--oracle", oracle, "--priorities", prio, "--json")}


@pytest.fixture(scope="module")
def keras_runs(request, keras_corpus, tmp_path_factory) -> dict:
    """Every selected model and save style through the CLI, two at a time (each one's steps in order; nothing
    checked depends on the machine's load)."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = sorted({(item.callspec.params["name"], item.callspec.params["style"]) for item in request.session.items
                     if getattr(item, "originalname", "") == "test_keras_model_through_the_cli"})
    folders = {key: tmp_path_factory.mktemp(f"{key[0]}_{key[1]}") for key in wanted}
    paths = {name: keras_corpus(name) for name in {name for name, _ in wanted}}  # built once, before the pool
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(_run_steps, paths[key[0]][key[1]], folders[key]) for key in wanted}
        return {key: (f.result(), folders[key]) for key, f in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("style", ["tf_saved_model", "export"])
@pytest.mark.parametrize("name", ["mobilenetv2", "inceptionv3"])
def test_keras_model_through_the_cli(name, style, keras_corpus, keras_runs):
    paths = keras_corpus(name)
    runs, folder = keras_runs[(name, style)]
    dag, oracle, prio = folder / "m.dag.json", folder / "oracle.csv", folder / "prio.json"
    info = _json(runs["inspect"])
    assert info["param_count"] == paths["keras"]["count_params"]
    assert dag.exists()

    prof = _json(runs["profile"])
    assert prof["untimed"] == {} and prof["timed"] == prof["compute_ops"] == info["compute_ops"]
    df = pd.read_csv(oracle)
    compute = df[df["source"] == "profiled"].set_index("op")
    assert len(compute) == info["compute_ops"]
    for op, why in prof["fused"].items():  # fused into another op's kernel: a 0 row, its time on X
        into = why.split()[2].rstrip(":")
        assert compute.loc[op, "time"] == 0 and compute.loc[into, "time"] > 0, why
    assert (compute.drop(index=list(prof["fused"]))["time"] > 0).all()

    order = _json(runs["order"])
    assert prio.exists() and order["makespan"] > 0, order

    sim = _json(runs["simulate"])
    assert sim["makespan"] == pytest.approx(order["makespan"], rel=1e-9)
    assert sim["lower"] <= sim["makespan"] <= sim["upper"] and 0 < sim["efficiency"] <= 1, sim
