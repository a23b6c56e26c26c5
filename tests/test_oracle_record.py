"""Oracles record what they were measured at (batch, mode, device, threads, version), and every consumer checks it.

Issue 17, items 4 and 7: an oracle profiled at batch 2 was used silently at batch 4 (``simulate``) or scaled
from the wrong batch (``plan-batch``); ``profile`` picked a batch for a symbolic model without saying so; the
profiler used every core, so its times depended on the machine's other load, and nothing warned when runs varied.
"""
from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest

from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.errors import DlschedError, DlschedWarning, OracleError
from dlsched.formats.oracle_file import oracle_meta, read_oracle, write_oracle
from dlsched.profiling.oracle_times import load_times, model_batch
from tests.conftest import assert_clean_error, run_cli

SMALL_CNN = "examples/torch_models.py:small_cnn"
BERT = "examples/hf_models.py:bert"


def _graph(batch=4, mode="training", fmt="onnx") -> Graph:
    g = Graph("m", mode, {"format": fmt, "batch": batch})
    g.add_op("w", RECV, bytes=400, shape=(10, 10))
    g.add_op("conv", COMPUTE, output_shapes=[(batch or 4, 10)])
    g.add_edge("w", "conv")
    return g


def _oracle(path, meta=None, conv=0.5, w=0.1):
    write_oracle(pd.DataFrame({"op": ["w", "conv"], "time": [w, conv]}), path, meta=meta)
    return path


# -- the record in the file -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["o.csv", "o.parquet"])
def test_the_record_travels_with_the_file(tmp_path, name):
    meta = {"batch": 2, "mode": "training", "device": "cpu", "threads": 1, "dlsched_version": "0.1.0"}
    path = _oracle(tmp_path / name, {**meta})
    df = read_oracle(path)
    assert oracle_meta(df) == meta
    assert list(df.columns)[-5:] == list(meta)  # after the schema's columns
    # None values are left out: a trace's unknown batch is not recorded as a number
    _oracle(tmp_path / name, {"batch": None, "mode": "inference"})
    assert oracle_meta(read_oracle(tmp_path / name)) == {"mode": "inference"}


def test_old_and_hand_written_oracles_load_without_the_check(tmp_path):
    (tmp_path / "hand.csv").write_text("op,time\nw,0.1\nconv,0.5\n")
    for mode, batch in (("training", 4), ("inference", 64)):
        assert load_times(tmp_path / "hand.csv", _graph(batch, mode)) == {"w": 0.1, "conv": 0.5}


@pytest.mark.parametrize("column, values, needle", [
    ("batch", [2, 4], "disagree on batch"),
    ("mode", ["training", "inference"], "disagree on mode"),
    ("batch", [0, 0], "positive whole number"),
    ("batch", [2.5, 2.5], "positive whole number"),
    ("threads", ["many", "many"], "positive whole number"),
    ("mode", ["eval", "eval"], "inference, training"),
])
def test_a_bad_record_is_a_clean_error(tmp_path, column, values, needle):
    pd.DataFrame({"op": ["w", "conv"], "time": [0.1, 0.5], column: values}).to_csv(tmp_path / "o.csv", index=False)
    with pytest.raises(OracleError, match=needle):
        read_oracle(tmp_path / "o.csv")


# -- the check, in the one place every consumer goes through ----------------------------------------------------
def test_another_batch_is_refused_or_rescaled(tmp_path):
    path = _oracle(tmp_path / "o.csv", {"batch": 2, "mode": "training"})
    with pytest.raises(OracleError, match=r"profiled at batch 2, but the model is at batch 4.*--rescale-batch"):
        load_times(path, _graph(4))
    with pytest.warns(DlschedWarning, match=r"scaled ×2 to batch 4 \(linear in batch; transfers unchanged\)"):
        times = load_times(path, _graph(4), rescale_batch=True)
    assert times == {"w": 0.1, "conv": pytest.approx(1.0)}  # compute ×2, the transfer unchanged
    assert load_times(path, _graph(2)) == {"w": 0.1, "conv": 0.5}
    assert load_times(path, _graph(None)) == {"w": 0.1, "conv": 0.5}  # a symbolic batch: nothing to compare
    assert load_times(path, _graph(8), any_batch=True) == {"w": 0.1, "conv": 0.5}  # the batch planner scales itself


def test_default_time_is_not_rescaled(tmp_path):
    write_oracle(pd.DataFrame({"op": ["w"], "time": [0.1]}), tmp_path / "o.csv", meta={"batch": 2})
    with pytest.warns(DlschedWarning):
        assert load_times(tmp_path / "o.csv", _graph(4), default_time=0.3, rescale_batch=True) == {"w": 0.1,
                                                                                                   "conv": 0.3}


def test_another_mode_is_refused_even_with_rescaling(tmp_path):
    path = _oracle(tmp_path / "o.csv", {"batch": 4, "mode": "inference"})
    for rescale in (False, True):
        with pytest.raises(OracleError, match="profiled in inference mode, but the model is loaded in training"):
            load_times(path, _graph(4), default_time=1e-6, rescale_batch=rescale)


def test_a_torch_factory_without_batch_is_at_its_example_batch():
    g = _graph(None, fmt="torch")
    assert model_batch(g) == (4, " (its example inputs; pass --batch to choose)")
    assert model_batch(_graph(None, fmt="onnx")) == (None, "")  # symbolic: its shapes say nothing


# -- through the commands ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cnn_b2(tmp_path_factory):
    """small_cnn profiled in training at batch 2 (its example batch is 32)."""
    out = tmp_path_factory.mktemp("rec") / "b2.csv"
    proc = run_cli("profile", SMALL_CNN, "--mode", "training", "--batch", "2", "--runs", "2", "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


def test_profile_records_batch_mode_device_threads(cnn_b2):
    out, info = cnn_b2
    assert (info["batch"], info["batch_picked"], info["threads"], info["mode"]) == (2, False, 1, "training")
    meta = oracle_meta(pd.read_csv(out))
    assert {k: meta[k] for k in ("batch", "mode", "device", "threads")} == {"batch": 2, "mode": "training",
                                                                             "device": "cpu", "threads": 1}


@pytest.mark.parametrize("cmd, extra", [("simulate", []), ("bounds", []), ("order", ["--algo", "tac", "-o"]),
                                        ("plan-cluster", [])])
def test_every_analysis_refuses_another_batch(cnn_b2, tmp_path, cmd, extra):
    out, _ = cnn_b2
    extra = [*extra, tmp_path / "p.json"] if extra else []
    proc = run_cli(cmd, SMALL_CNN, "--mode", "training", "--batch", "4", "--oracle", out, *extra)
    assert_clean_error(proc, "profiled at batch 2", "at batch 4", "--rescale-batch")


def test_without_batch_a_factory_is_at_its_example_batch(cnn_b2):
    out, _ = cnn_b2
    assert_clean_error(run_cli("bounds", SMALL_CNN, "--mode", "training", "--oracle", out), "at batch 32",
                       "its example inputs")


def test_simulate_rescales_on_request_and_says_so(cnn_b2, tmp_path):
    out, _ = cnn_b2
    proc = run_cli("simulate", SMALL_CNN, "--mode", "training", "--batch", "4", "--oracle", out, "--rescale-batch",
                   "--algo", "tac", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and "scaled ×2 to batch 4" in proc.stderr
    # the same as an oracle scaled by hand and recorded at batch 4
    df = pd.read_csv(out)
    df.loc[df["resource"].str.startswith("compute"), "time"] *= 2
    write_oracle(df.assign(batch=4), tmp_path / "b4.csv")
    by_hand = run_cli("simulate", SMALL_CNN, "--mode", "training", "--batch", "4", "--oracle", tmp_path / "b4.csv",
                      "--algo", "tac", "--json")
    assert by_hand.returncode == 0 and "warning" not in by_hand.stderr, by_hand.stderr
    assert json.loads(proc.stdout)["makespan"] == pytest.approx(json.loads(by_hand.stdout)["makespan"], rel=1e-6)
    assert_clean_error(run_cli("simulate", SMALL_CNN, "--batch", "2", "--oracle", out), "profiled in training mode")


def test_plan_batch_scales_from_the_oracles_batch(cnn_b2):
    """The issue: ``plan-batch --batch 8 --oracle <batch-2 oracle>`` said "at batch 8" and times 4× too small."""
    out, info = cnn_b2
    proc = run_cli("plan-batch", SMALL_CNN, "--batch", "8", "--memory", "1GiB", "--oracle", out, "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert "at batch 2" in plan["time_source"]
    row = plan["throughput"][0]
    assert row["time"] == pytest.approx(info["total_compute_time"] * row["batch"] / 2, rel=1e-6)


def test_profile_says_which_batch_it_picked_for_a_symbolic_model(onnx_small_cnn, tmp_path):
    proc = run_cli("profile", onnx_small_cnn, "--runs", "2", "-o", tmp_path / "o.csv", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["batch"], info["batch_picked"]) == (1, True)
    assert "warning:" in proc.stderr and "symbolic, so it was profiled at batch 1" in proc.stderr
    assert oracle_meta(pd.read_csv(tmp_path / "o.csv"))["batch"] == 1
    assert_clean_error(run_cli("bounds", onnx_small_cnn, "--batch", "4", "--oracle", tmp_path / "o.csv"),
                       "profiled at batch 1")
    proc = run_cli("profile", onnx_small_cnn, "--batch", "4", "--runs", "2", "-o", tmp_path / "o4.csv", "--json")
    assert (json.loads(proc.stdout)["batch"], json.loads(proc.stdout)["batch_picked"]) == (4, False)
    assert "symbolic" not in proc.stderr


# -- threads and noise ----------------------------------------------------------------------------------------
def test_torch_profiler_runs_at_the_threads_asked_and_restores_them(monkeypatch):
    import torch

    from dlsched.importers.torch_importer import import_factory
    from dlsched.profiling import torch_profiler

    seen, run = [], torch_profiler._run
    monkeypatch.setattr(torch_profiler, "_run", lambda *a: (seen.append(torch.get_num_threads()), run(*a)))
    before = torch.get_num_threads()
    g = import_factory(SMALL_CNN, batch=2)
    for threads in (1, 2):
        df, _ = torch_profiler.profile_torch(SMALL_CNN, g, runs=1, warmup=0, threads=threads)
        assert df.attrs["batch"] == 2
    assert seen == [1, 2] and torch.get_num_threads() == before
    with pytest.raises(DlschedError, match="--threads"):
        torch_profiler.profile_torch(SMALL_CNN, g, threads=0)


def test_onnx_profiler_sets_intra_op_threads(onnx_small_cnn, monkeypatch):
    import onnxruntime as ort

    from dlsched.importers.onnx_importer import import_onnx
    from dlsched.profiling.onnx_profiler import profile_onnx

    options, session = [], ort.InferenceSession
    monkeypatch.setattr(ort, "InferenceSession", lambda src, so, **kw: (options.append(so), session(src, so, **kw))[1])
    profile_onnx(onnx_small_cnn, import_onnx(onnx_small_cnn, batch=2), runs=1, warmup=0, threads=2)
    assert (options[0].intra_op_num_threads, options[0].inter_op_num_threads) == (2, 1)


def test_tf_session_sets_intra_op_threads():
    tf = pytest.importorskip("tensorflow")
    from dlsched.profiling.tf_profiler import _session_config

    config = _session_config(tf, "cpu", 3)
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (3, 1)


def test_profile_threads_option(tmp_path):
    proc = run_cli("profile", SMALL_CNN, "--threads", "2", "--runs", "1", "-o", tmp_path / "o.csv", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threads"] == 2 and oracle_meta(pd.read_csv(tmp_path / "o.csv"))["threads"] == 2
    assert run_cli("profile", SMALL_CNN, "--threads", "0", "-o", tmp_path / "x.csv").returncode == 2
    assert "--threads" in run_cli("profile", "--help").stdout


def _fake_profiler(median_factor):
    """A framework profiler whose op ``c0`` varied between runs by ``median_factor``."""
    def profile(model, graph, **kw):
        ops = [op for op in graph.compute_ops()]
        times = [1e-3] * len(ops)
        medians = [t * (median_factor if i == 0 else 1.1) for i, t in enumerate(times)]
        df = pd.DataFrame({"op": [op.name for op in ops], "time": times, "median": medians, "runs": 5})
        df.attrs["batch"] = 3
        return df, {}
    return lambda model: profile


@pytest.mark.parametrize("factor, noisy", [(1.5, False), (4.0, True)])
def test_noisy_ops_are_named(monkeypatch, factor, noisy):
    from dlsched.profiling import oracle
    from dlsched.synthetic import random_dag

    monkeypatch.setattr(oracle, "_profiler", _fake_profiler(factor))
    g, _ = random_dag(20, 2, seed=1)
    first = g.compute_ops()[0].name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = oracle.build_oracle(g, model="m.py:f", threads=1)
    said = [str(w.message) for w in caught if issubclass(w.category, DlschedWarning)]
    info = built.to_dict()
    assert (info["batch"], info["threads"]) == (3, 1)
    if noisy:
        assert len(said) == 1 and "varied between runs" in said[0] and f"{first} (min 1 ms, median 4 ms)" in said[0]
        assert [r["op"] for r in info["noisy"]] == [first]
    else:
        assert said == [] and info["noisy"] == []
    assert info["run_spread"] == pytest.approx((factor + 1.1 * (len(g.compute_ops()) - 1)) / len(g.compute_ops()) - 1)


def test_back_to_back_bert_profiles_agree():
    """Two back-to-back profiles of BERT in training, at one thread, time the same ops and agree within 2×.

    A bound on gross disagreement, not on reproducibility: with every core in use and other load, some ops' minimum
    over 5 runs reached 100× their time (one profile of a pair took 326 ms against 3.4 ms). How closely profiles
    agree is a timing figure, measured in ``benchmarks/bench_profile_repeat.py``: on the 2-core Intel Xeon VM, quiet
    or beside a busy loop, a profile's total lands near 2.9 ms or near 4–5 ms from one profile to the next, and one
    pair of the bench's 80 differed by 2.05×; in CI, beside the other pytest worker, three pairs in a row differed
    by 1.2–1.6×. Up to five pairs are measured, so one unlucky pair does not decide.
    """
    from dlsched.answers.options import ModelSpec
    from dlsched.answers.profile import Timing, profile

    def frame():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return profile(ModelSpec(BERT, mode="training"), Timing(threads=1)).result.compute.set_index("op")["time"]

    ratios = []
    for _ in range(5):
        a, b = frame(), frame()
        assert list(a.index) == list(b.index) and len(a) > 400
        ratios.append(max(a.sum(), b.sum()) / min(a.sum(), b.sum()))
        if ratios[-1] <= 2.0:
            break
    assert ratios[-1] <= 2.0, ratios
