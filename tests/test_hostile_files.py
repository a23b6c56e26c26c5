"""Well-formed files of the wrong shape, through the CLI (issue 16, items 5, 8, 11, 14, 17).

Each case exits 2 with a message naming the problem, never a traceback, and
writes no output file.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dlsched.formats.dag_json import save_dag
from dlsched.formats.oracle_file import write_oracle
from dlsched.synthetic import random_dag
from tests.conftest import assert_clean_error, run_cli


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small training DAG with two servers, its oracle and a baseline."""
    d = tmp_path_factory.mktemp("hostile")
    graph, times = random_dag(10, 4, training=True, ps=2, seed=1)
    dag, orc = d / "m.dag.json", d / "o.csv"
    save_dag(graph, dag)
    write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values())}), orc)
    base = d / "b.json"
    p = run_cli("snapshot", dag, "--oracle", orc, "-o", base)
    assert p.returncode == 0, p.stderr
    pri = d / "p.json"
    assert run_cli("order", dag, "--algo", "tic", "-o", pri).returncode == 0
    return {"dir": d, "dag": dag, "oracle": orc, "baseline": base, "priorities": pri, "graph": graph}


def _edited(src: Path, dst: Path, edit) -> Path:
    doc = json.loads(src.read_text())
    out = edit(doc)
    doc = doc if out is None else out
    dst.write_text(json.dumps(doc))
    return dst


def _no_fingerprint(doc):
    doc.pop("fingerprint", None)
    return doc


# -- .dag.json of the wrong shape (items 5 and 11) -------------------------------------------------

def _first(doc, kind):
    return next(o for o in doc["ops"] if o["kind"] == kind)


DAG_EDITS = {
    "a list": (lambda d: [], "expected a JSON object"),
    "bytes Infinity": (lambda d: _first(d, "recv").update(bytes=float("inf")), "bytes"),
    "resource ps:x/down": (lambda d: _first(d, "recv").update(resource="ps:x/down"), "ps:x/down"),
    "duplicate op names": (lambda d: d["ops"].append(dict(d["ops"][0])), "duplicate op name"),
    "unknown kind": (lambda d: _first(d, "compute").update(kind="magic"), "unknown kind"),
    "zero servers": (lambda d: d["ps"].update(count=0), "zero parameter servers"),
    "server beyond the count": (lambda d: d["ps"].update(count=1), "parameter server 1"),
    "ops not a list": (lambda d: d.update(ops={"a": 1}), "'ops' list"),
}


@pytest.mark.parametrize("case", list(DAG_EDITS))
@pytest.mark.parametrize("fingerprint", [True, False], ids=["with-fp", "without-fp"])
def test_dag_of_the_wrong_shape(model, tmp_path, case, fingerprint):
    edit, needle = DAG_EDITS[case]

    def apply(doc):
        out = edit(doc)
        doc = doc if out is None else out
        if not fingerprint and isinstance(doc, dict):
            # Without a fingerprint the content is all there is to check.
            _no_fingerprint(doc)
        return doc

    bad = _edited(model["dag"], tmp_path / "bad.dag.json", apply)
    assert_clean_error(run_cli("bounds", bad, "--oracle", model["oracle"]), str(bad), needle)


def test_directory_as_dag(model, tmp_path):
    folder = tmp_path / "x.dag.json"
    folder.mkdir()
    assert_clean_error(run_cli("inspect", folder), str(folder), "directory")


# -- priority files (items 5, 14, 17) ---------------------------------------------------------------

@pytest.mark.parametrize("edit,needle", [
    (lambda d: d.update(model="resnet"), "'model' must be an object"),
    (lambda d: d["transfers"][0].update(priority=1.5), "whole number"),
    (lambda d: d["transfers"][0].update(priority="3"), "whole number"),
    (lambda d: d["transfers"][0].update(bytes=-4), "negative"),
    (lambda d: d.update(transfers={"p0": 0}), "'transfers' must be a list"),
], ids=["model-string", "priority-1.5", "priority-string", "negative-bytes", "transfers-dict"])
def test_priority_file_of_the_wrong_shape(model, tmp_path, edit, needle):
    bad = _edited(model["priorities"], tmp_path / "p.json", edit)
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", bad), needle)


def test_tictac_priority_with_a_fraction_is_refused(model, tmp_path):
    names = [r.name for r in model["graph"].recvs()]
    bad = tmp_path / "p.tsv"
    bad.write_text("".join(f"{n}\t{i}.5\n" for i, n in enumerate(names)))
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", bad),
                       "name<TAB>priority")


def test_tictac_refuses_names_it_cannot_hold(model, tmp_path):
    graph, times = random_dag(6, 2, seed=2)
    renamed = tmp_path / "tab.dag.json"
    doc = json.loads(graph.to_json())
    _no_fingerprint(doc)
    old = graph.recvs()[0].name
    for op in doc["ops"]:
        if op["name"] == old:
            op["name"] = "layer\t1.weight"
    doc["edges"] = [[("layer\t1.weight" if n == old else n) for n in e] for e in doc["edges"]]
    renamed.write_text(json.dumps(doc))
    out = tmp_path / "order.tsv"
    proc = run_cli("order", renamed, "--algo", "tic", "--format", "tictac", "-o", out)
    assert_clean_error(proc, "tab", "--format json")
    assert not out.exists()


# -- baselines (items 5 and 8) -------------------------------------------------------------------------

@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["metrics"].update(ops=float("nan")), "not finite"),
    (lambda d: d.update(options="fast"), "'options' must be an object"),
    (lambda d: d.update(tolerances={"ops": "lots"}), "tolerance"),
    (lambda d: d["options"].update(batch=-3), "batch=-3"),
], ids=["nan-metric", "options-string", "tolerance-lots", "negative-batch"])
def test_baseline_of_the_wrong_shape(model, tmp_path, edit, needle):
    bad = _edited(model["baseline"], tmp_path / "b.json", edit)
    junit = tmp_path / "j.xml"
    proc = run_cli("check", model["dag"], "--baseline", bad, "--junit", junit)
    assert_clean_error(proc, str(bad), needle)
    assert not junit.exists()


@pytest.mark.parametrize("tol", ["-5%", "nan", "inf"])
def test_check_refuses_meaningless_tolerance(model, tol):
    proc = run_cli("check", model["dag"], "--baseline", model["baseline"], "--tolerance", tol)
    assert_clean_error(proc, "fraction")


def test_absurd_oracle_times_are_refused(model, tmp_path):
    orc = tmp_path / "o.csv"
    ops = [op.name for op in model["graph"].ops()]
    orc.write_text("op,time\n" + "".join(f"{n},1e307\n" for n in ops))
    assert_clean_error(run_cli("bounds", model["dag"], "--oracle", orc), str(orc), "in seconds")


# -- impossible results (item 12, the bounds side) -----------------------------------------------------

def test_makespan_outside_the_bounds_is_a_model_error(model):
    out = json.loads(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--json").stdout)
    far = out["upper"] + 10.0
    rated = json.loads(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--makespan", f"{far}",
                               "--json").stdout)
    assert rated["efficiency"] is None and rated["model_error"] == pytest.approx(10.0)
    table = run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--makespan", f"{far}")
    assert table.returncode == 0 and "model error" in table.stdout and "above U" in table.stdout
    quick = json.loads(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--makespan",
                               f"{out['lower'] / 2}", "--json").stdout)
    assert quick["efficiency"] is None and quick["model_error"] == pytest.approx(-out["lower"] / 2)


def test_trace_with_a_negative_duration_is_refused(model, tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "conv", "ts": 0, "dur": 5000},
                                                 {"ph": "X", "name": "bad", "ts": 10, "dur": -4000}]}))
    assert_clean_error(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--trace", trace),
                       str(trace), "negative duration")


# -- messages that name the culprit (item 15) and edge numbers (item 6) --------------------------------

@pytest.mark.parametrize("args,needle", [
    (("--latency", "1e400"), "--latency"),
    (("--bandwidth", "0B/s"), "positive"),
    (("--bandwidth", "1e400Gbps"), "too large"),
], ids=["latency-1e400", "bandwidth-0", "bandwidth-1e400"])
def test_profile_network_numbers(model, tmp_path, args, needle):
    out = tmp_path / "o.csv"
    proc = run_cli("profile", model["dag"], "--analytic", "-o", out, *args)
    assert_clean_error(proc, needle)
    assert not out.exists()


def test_default_time_1e400_names_the_option(model):
    assert_clean_error(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--default-time", "1e400"),
                       "--default-time", "too large")


@pytest.mark.parametrize("yaml_text,needle", [
    ("name: x\npeak_flops: -1\nmemory_bandwidth: 1GB/s\n", "peak_flops"),
    ("name: x\npeak_flops: 1.0e12\nmemory_bandwidth: 1GB/s\nnetwork_latency: 1e400\n", "too large"),
    ("name: x\npeak_flops: [1, 2\n", "not valid YAML"),
], ids=["negative-flops", "latency-1e400", "broken-yaml"])
def test_bad_device_spec_names_the_spec(model, tmp_path, yaml_text, needle):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml_text)
    out = tmp_path / "o.csv"
    assert_clean_error(run_cli("profile", model["dag"], "--analytic", "--device-spec", spec, "-o", out),
                       str(spec), needle)
    assert not out.exists()


def test_device_spec_that_is_a_directory(model, tmp_path):
    assert_clean_error(run_cli("profile", model["dag"], "--analytic", "--device-spec", tmp_path, "-o",
                               tmp_path / "o.csv"), str(tmp_path), "cannot read the device spec")


def test_cluster_file_that_is_a_directory(model, tmp_path):
    assert_clean_error(run_cli("plan-batch", model["dag"], "--memory", "16GiB", "--cluster", tmp_path),
                       str(tmp_path), "cannot read the cluster file")


@pytest.mark.parametrize("jitter", ["1e6", "2.5"])
def test_absurd_jitter_is_refused(model, jitter):
    """σ = 1e6 used to give makespan 0 and E = 2.9 (item 12)."""
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--jitter", jitter,
                               "--workers", "2"), "--jitter", "[0, 2]")


@pytest.mark.parametrize("args,option", [
    (("plan-batch", "{dag}", "--memory", "1e400GiB"), "--memory"),
    (("plan-cluster", "--param-bytes", "1e400GB", "--workers", "4", "--bandwidth", "10Gbps",
      "--compute-time", "0.5"), "--param-bytes"),
], ids=["plan-batch-memory", "plan-cluster-param-bytes"])
def test_overflowing_sizes_are_refused(model, args, option):
    """1e400 used to overflow into a traceback (item 6)."""
    proc = run_cli(*[a.format(dag=model["dag"]) for a in args])
    assert_clean_error(proc, option, "too large")


def test_tensorflow_out_of_memory_is_named(tmp_path):
    """A step that cannot allocate its tensors is reported as out of memory, with the batch (item 15)."""
    tf = pytest.importorskip("tensorflow")
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.Variable(tf.ones([4, 4]), name="w")
        tf.reduce_sum(tf.tile(tf.matmul(x, w), [1 << 36, 1]), name="out")  # a 4 TiB intermediate
    tf.io.write_graph(g.as_graph_def(), str(tmp_path), "oom.pb", as_text=False)
    out = tmp_path / "o.csv"
    proc = run_cli("profile", tmp_path / "oom.pb", "--batch", "2", "-o", out)
    assert_clean_error(proc, "oom.pb", "out of memory", "batch 2", "--batch")
    assert not out.exists()


def test_gate_takes_the_same_units_as_the_other_commands(model, tmp_path):
    """--default-time 1us and --margin 10% work for snapshot/check as for bounds and plan-batch (issue 14 item 4)."""
    out = tmp_path / "b.json"
    proc = run_cli("snapshot", model["dag"], "--oracle", model["oracle"], "--default-time", "1us", "--margin", "10%",
                   "-o", out)
    assert proc.returncode == 0, proc.stderr
    options = json.loads(out.read_text())["options"]
    assert options["default_time"] == pytest.approx(1e-6) and options["margin"] == pytest.approx(0.1)
    assert run_cli("check", model["dag"], "--baseline", out, "--default-time", "1us").returncode == 0


@pytest.mark.parametrize("args,needle", [
    (("--mode", "inference"), "the inference graph is needed (--mode inference)"),
    (("--batch", "4"), "--batch 4 cannot apply"),
    (("--buffers",), "--buffers cannot apply"),
])
def test_saved_dag_refuses_import_options_it_cannot_honour(model, args, needle):
    """A .dag.json is fixed at capture: --mode, --batch and --buffers on it are refused, not ignored."""
    assert_clean_error(run_cli("inspect", model["dag"], *args), needle, "saved DAG")
    ok = run_cli("inspect", model["dag"], "--mode", "training", "--json")  # its own mode is fine
    assert ok.returncode == 0 and json.loads(ok.stdout)["ops"] == len(model["graph"])
