"""Through the CLI: work budgets refused before anything loads, progress on a terminal, meaningless
numbers refused, and plan-cluster's two lemmas answered each from its own inputs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from dlsched.synthetic import random_dag
from tests.conftest import REPO, assert_clean_error, run_cli

TORCH_MODEL = "examples/torch_models.py:resnet50"  # slow to load: a refusal that loads it takes far more than 5 s


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A 2-server training DAG (148 ops, 14 transfers) and its oracle."""
    from dlsched.formats.dag_json import save_dag
    from dlsched.formats.oracle_file import write_oracle

    d = tmp_path_factory.mktemp("limits")
    g, t = random_dag(60, 14, training=True, ps=2, seed=21)
    save_dag(g, d / "m.dag.json")
    write_oracle(pd.DataFrame({"op": list(t), "time": list(t.values())}), d / "m.csv")
    return {"dir": d, "dag": d / "m.dag.json", "oracle": d / "m.csv", "ops": len(g)}


def _timed(*args, **kw):
    t0 = time.perf_counter()
    proc = run_cli(*args, timeout=120, **kw)
    return proc, time.perf_counter() - t0


# -- refusals before any heavy work (issue 10 item 5) -------------------------------------------

def test_simulate_a_million_workers_for_a_billion_iterations_is_refused_at_once():
    # A torch factory and an oracle that does not exist: the refusal must come before either is read.
    proc, took = _timed("simulate", TORCH_MODEL, "--oracle", "no-such-oracle.csv", "--mode", "training",
                        "--workers", "1000000", "--iterations", "1000000000")
    assert_clean_error(proc, "simulate", "limit of 10,000,000", "--max-work", "--workers", "--iterations")
    assert "no-such-oracle" not in proc.stderr
    assert took < 5, f"took {took:.1f} s"


def test_simulate_refusal_counts_the_real_model_and_max_work_lifts_it(model):
    args = ("simulate", model["dag"], "--oracle", model["oracle"], "--workers", "4", "--iterations", "5")
    work = 4 * 5 * (model["ops"] + 8)
    proc = run_cli(*args, "--max-work", str(work - 1), "--json")
    assert_clean_error(proc, f"{model['ops']} ops", f"--max-work {work}")
    assert proc.stdout == ""
    out = json.loads(run_cli(*args, "--max-work", str(work), "--json").stdout)
    assert out["workers"] == 4 and out["iterations"] == 5
    # --compare multiplies the work: one run per order, five for random
    assert_clean_error(run_cli(*args, "--compare", "tac,random", "--max-work", str(work * 6)), "7 runs")


def test_profile_a_billion_runs_is_refused_before_loading():
    proc, took = _timed("profile", TORCH_MODEL, "--runs", "1000000000", "-o", "never.csv")
    assert_clean_error(proc, "profile", "op runs", "--runs", "--max-work")
    assert took < 5, f"took {took:.1f} s"
    assert not (REPO / "never.csv").exists()


def test_plan_cluster_a_billion_devices_is_refused():
    proc, took = _timed("plan-cluster", "--overhead-ratio", "0.1", "--max-devices", "1000000000")
    assert_clean_error(proc, "table rows", "limit of 5,000", "--max-devices", "--max-work")
    assert took < 5, f"took {took:.1f} s"
    out = json.loads(run_cli("plan-cluster", "--overhead-ratio", "0.1", "--max-devices", "6000",
                             "--max-work", "6000", "--json").stdout)
    assert len(out["table"]) == 6000


def test_a_far_target_keeps_the_default_table_short():
    out = json.loads(run_cli("plan-cluster", "--overhead-ratio", "0.001", "--target-speedup", "999", "--json").stdout)
    assert out["devices"] > 5_000 and len(out["table"]) == 8


def test_exact_order_refusal_names_both_ways_out(model):
    proc = run_cli("order", model["dag"], "--algo", "exact", "--oracle", model["oracle"], "-o",
                   model["dir"] / "never.json")
    assert_clean_error(proc, "candidate transfer orders", "7! × 7!", "--time-limit", "--max-work")
    assert not (model["dir"] / "never.json").exists()


def test_plan_batch_exact_split_has_a_budget(model):
    proc = run_cli("plan-batch", model["dag"], "--cluster", REPO / "examples" / "cluster.yaml", "--max-work", "100")
    assert_clean_error(proc, "candidate batch sizes", "--global-batch", "--max-work")


# -- progress on a terminal --------------------------------------------------------------------

def test_long_simulation_shows_progress_on_a_terminal_and_json_stays_clean(model):
    """stderr on a pseudo-terminal, stdout piped: a bar on stderr, one JSON object on stdout."""
    import pty

    master, slave = pty.openpty()
    # a real terminal type: under TERM=dumb (some CI runners) rich rightly draws no bar
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore", COLUMNS="100", TERM="xterm")
    # ~1.5 M op-steps: about 10 s of simulation on an idle 2-core Intel Xeon (2026-11-28; 4.4 M took 31 s),
    # five times the bar's 2 s delay
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.cli.main", "simulate", model["dag"], "--oracle",
                             model["oracle"], "--workers", "50", "--iterations", "200", "--json"],
                            stdout=subprocess.PIPE, stderr=slave, cwd=REPO, env=env)
    os.close(slave)
    chunks = []

    def drain():  # keep the terminal's buffer from filling up
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=300)
    reader.join(timeout=10)
    os.close(master)
    err = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, err
    out = json.loads(stdout)
    assert out["workers"] == 50 and out["iterations"] == 200
    assert "simulating" in err and "op-steps" in err and f"/{model['ops'] * 50 * 200}" in err, err[-2000:]


def test_short_run_and_pipes_show_no_bar(model):
    proc = run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--workers", "2", "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    json.loads(proc.stdout)


# -- numbers with no meaning (issue 10 item 5) -----------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (("--global-batch", "0", "--worker", "a:16GiB:1"), "--global-batch"),
    (("--global-batch", "-4", "--worker", "a:16GiB:1"), "--global-batch"),
    (("--memory", "0"), "--memory"),
    (("--memory", "-1GiB"), "--memory"),
    (("--memory", "1GiB", "--margin", "1"), "--margin"),
    (("--memory", "1GiB", "--margin", "nan"), "--margin"),
    (("--memory", "1GiB", "--batch", "0"), "--batch"),
    (("--global-batch", "8", "--worker", "a:0:1"), "memory"),
    (("--global-batch", "8", "--worker", "a:1GiB:inf"), "speed"),
    (("--global-batch", "8", "--worker", "a:1GiB:0"), "speed"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_plan_batch_meaningless_numbers(model, args, needle):
    assert_clean_error(run_cli("plan-batch", model["dag"], *args), needle)


def test_cluster_file_global_batch_zero(model, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("global_batch: 0\nworkers:\n  - {name: a, memory: 1GiB}\n")
    assert_clean_error(run_cli("plan-batch", model["dag"], "--cluster", f), str(f), "global_batch")
    f.write_text("global_batch: 8\nmargin: 2\nworkers:\n  - {name: a, memory: 1GiB}\n")
    assert_clean_error(run_cli("plan-batch", model["dag"], "--cluster", f), "margin")


@pytest.mark.parametrize("args,needle", [
    (("--workers", "0"), "--workers"), (("--workers", "-2"), "--workers"), (("--iterations", "0"), "--iterations"),
    (("--jitter", "nan"), "--jitter"), (("--jitter", "-0.1"), "--jitter"), (("--seed", "-1"), "--seed"),
    (("--algo", "exact", "--time-limit", "inf"), "--time-limit"), (("--max-work", "0"), "--max-work"),
    (("--max-work", "1.5"), "--max-work"), (("--ps", "0"), "--ps"), (("--default-time", "-1ms"), "--default-time"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_simulate_meaningless_numbers(model, args, needle):
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], *args), needle)


@pytest.mark.parametrize("args,needle", [
    (("--runs", "0"), "--runs"), (("--warmup", "-1"), "--warmup"), (("--bandwidth", "-1Gbps"), "--bandwidth"),
    (("--latency", "nan"), "--latency"), (("--network-timeout", "inf"), "--network-timeout"),
])
def test_profile_meaningless_numbers(model, args, needle):
    assert_clean_error(run_cli("profile", model["dag"], "--analytic", "-o", model["dir"] / "x.csv", *args), needle)


@pytest.mark.parametrize("args,needle", [
    (("--overhead-ratio", "-0.1"), "--overhead-ratio"), (("--overhead-ratio", "inf"), "--overhead-ratio"),
    (("--overhead-ratio", "nan"), "--overhead-ratio"),
    (("--overhead-ratio", "0.1", "--target-speedup", "0"), "--target-speedup"),
    (("--overhead-ratio", "0.1", "--max-devices", "0"), "--max-devices"),
    (("--param-bytes", "0", "--workers", "4", "--bandwidth", "10Gbps", "--compute-time", "1s"), "--param-bytes"),
    (("--param-bytes", "1MB", "--workers", "0", "--bandwidth", "10Gbps", "--compute-time", "1s"), "--workers"),
    (("--param-bytes", "1MB", "--workers", "4", "--bandwidth", "0bps", "--compute-time", "1s"), "--bandwidth"),
    (("--param-bytes", "1MB", "--workers", "4", "--bandwidth", "10Gbps", "--compute-time", "0s"), "--compute-time"),
])
def test_plan_cluster_meaningless_numbers(args, needle):
    assert_clean_error(run_cli("plan-cluster", *args), needle)


# -- plan-cluster: each lemma from its own inputs (issue 10 item 6, issue 16 item 3) --------------

PS_ARGS = ("--param-bytes", "180MB", "--workers", "4", "--bandwidth", "10Gbps", "--compute-time", "0.5")


def _cluster_json(*args):
    proc = run_cli("plan-cluster", *args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_parameter_server_lemma_alone():
    out = _cluster_json(*PS_ARGS)
    assert out["parameter_servers"] == 3
    assert out["parameter_server_inputs"]["workers"] == 4
    assert "table" not in out and "overhead_ratio" not in out
    proc = run_cli("plan-cluster", *PS_ARGS)
    assert proc.returncode == 0, proc.stderr
    assert "Lemma 3.2" in proc.stdout and "Lemma 3.1" not in proc.stdout


def test_device_lemma_alone_and_both_together():
    out = _cluster_json("--overhead-ratio", "0.1", "--target-speedup", "3")
    assert out["devices"] == 4 and "parameter_servers" not in out
    both = _cluster_json("--overhead-ratio", "0.1", "--target-speedup", "3", *PS_ARGS)
    assert both["devices"] == 4 and both["parameter_servers"] == 3
    proc = run_cli("plan-cluster", "--overhead-ratio", "0.1", *PS_ARGS)
    assert proc.returncode == 0 and "Lemma 3.1" in proc.stdout and "Lemma 3.2" in proc.stdout


def test_neither_lemma_says_what_each_needs():
    assert_clean_error(run_cli("plan-cluster"), "Lemma 3.1", "--overhead-ratio", "Lemma 3.2", "--param-bytes",
                       "--workers", "--bandwidth", "--compute-time")
    assert_clean_error(run_cli("plan-cluster", "--target-speedup", "3"), "--target-speedup", "--overhead-ratio")
    assert_clean_error(run_cli("plan-cluster", "--workers", "4"), "--param-bytes", "--bandwidth", "--compute-time")
