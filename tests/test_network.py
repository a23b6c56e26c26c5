"""The network model, its fit, and real gloo measurements between local processes."""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from dlsched.profiling.network import (READY_LINE, NetworkError, _read_line, fit_link, transfer_rows,
                                       transfer_time)
from dlsched.synthetic import random_dag
from tests.conftest import REPO, assert_clean_error, run_cli


@pytest.fixture(scope="module")
def dag(tmp_path_factory):
    """A synthetic training DAG and a trace covering all its compute ops (no framework needed)."""
    from dlsched.formats.dag_json import save_dag

    d = tmp_path_factory.mktemp("net")
    g, _ = random_dag(6, 4, training=True, seed=7)
    save_dag(g, d / "m.dag.json")
    (d / "t.json").write_text(json.dumps([{"ph": "X", "name": op.name, "ts": i, "dur": 1.0}
                                          for i, op in enumerate(g.compute_ops())]))
    return g, d


def _profile(d, *extra):
    return run_cli("profile", d / "m.dag.json", "--from-trace", d / "t.json", "-o", d / "o.csv", *extra,
                   timeout=300)


def _check_transfer_rows(g, d, bw, lat):
    df = pd.read_csv(d / "o.csv").set_index("op")
    for op in g.recvs() + g.sends():
        assert df.loc[op.name, "source"] == "network-model"
        assert df.loc[op.name, "resource"] == op.resource
        assert df.loc[op.name, "time"] == pytest.approx(lat + op.bytes / bw, rel=1e-6)


def test_transfer_time_and_rows():
    assert transfer_time(1e6, 1e9, 1e-5) == pytest.approx(1.01e-3)
    g, _ = random_dag(5, 3, training=True, ps=2, seed=1)
    g.assign_ps(2)
    rows = transfer_rows(g, 2e9, 3e-6).set_index("op")
    assert set(rows.index) == {op.name for op in g.recvs() + g.sends()}
    for op in g.recvs() + g.sends():
        assert rows.loc[op.name, "time"] == pytest.approx(3e-6 + op.bytes / 2e9)
        assert rows.loc[op.name, "resource"] == op.resource


def test_fit_link_recovers_parameters_and_rejects_nonsense():
    sizes = [4096, 65536, 1 << 20, 16 << 20]
    bw, a = fit_link(sizes, [2e-5 + s / 3e9 for s in sizes])
    assert bw == pytest.approx(3e9, rel=1e-9) and a == pytest.approx(2e-5, rel=1e-9)
    bw, a = fit_link([1e3, 1e6], [1e-9, 1e-3])  # negative intercept is clamped
    assert a == 0 and bw > 0
    with pytest.raises(NetworkError, match="does not grow"):
        fit_link([1e3, 1e6], [1e-3, 1e-4])
    with pytest.raises(NetworkError, match="two distinct"):
        fit_link([1e3, 1e3], [1e-3, 1e-3])


def test_default_network_model(dag):
    g, d = dag
    proc = _profile(d, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["network"]["source"] == "flags"
    assert info["bandwidth"] == pytest.approx(10e9 / 8) and info["latency"] == pytest.approx(50e-6)
    _check_transfer_rows(g, d, 10e9 / 8, 50e-6)
    assert info["transfers"] == len(g.recvs()) + len(g.sends())


@pytest.mark.slow
def test_measure_network_between_two_local_processes(dag):
    g, d = dag
    proc = _profile(d, "--measure-network", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    net = info["network"]
    assert net["source"] == "measured" and net["peer"].startswith("local process")
    bw, lat = info["bandwidth"], info["latency"]
    assert math.isfinite(bw) and bw > 0 and math.isfinite(lat) and lat >= 0
    assert bw == net["bandwidth"] and lat == net["latency"]
    assert len(net["min_times"]) == len(net["sizes"]) >= 2 and all(t > 0 for t in net["min_times"])
    _check_transfer_rows(g, d, bw, lat)


def _start_peer(*extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.cli.main", "net-peer", "--host", "127.0.0.1",
                             "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env=env)
    line = _read_line(proc, time.monotonic() + 120)
    assert line and READY_LINE in line, (line, proc.poll())
    return proc, int(line.rsplit(":", 1)[1])


@pytest.mark.slow
def test_net_peer_and_peer_option(dag):
    g, d = dag
    peer, port = _start_peer("--sessions", "1", "--timeout", "60")
    try:
        proc = _profile(d, "--measure-network", "--peer", f"127.0.0.1:{port}", "--json")
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        assert info["network"]["peer"] == f"127.0.0.1:{port}" and info["bandwidth"] > 0
        _check_transfer_rows(g, d, info["bandwidth"], info["latency"])
        assert peer.wait(timeout=30) == 0  # one session served, then it exits by itself
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
        peer.stdout.close()
        peer.stderr.close()


def test_dead_peer_is_clean_error_within_seconds(dag):
    _, d = dag
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    out = d / "o_dead.csv"
    proc = run_cli("profile", d / "m.dag.json", "--from-trace", d / "t.json", "-o", out, "--measure-network",
                   "--peer", f"127.0.0.1:{port}", timeout=120)
    assert_clean_error(proc, f"127.0.0.1:{port}", "net-peer")
    assert time.monotonic() - t0 < 30
    assert not out.exists()


def test_silent_peer_times_out(dag):
    """Something listens but never speaks the protocol: bounded by --network-timeout, then exit 2."""
    _, d = dag
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        t0 = time.monotonic()
        proc = _profile(d, "--measure-network", "--peer", f"127.0.0.1:{port}", "--network-timeout", "3")
    assert_clean_error(proc, f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 60


def test_peer_option_errors(dag):
    _, d = dag
    assert_clean_error(_profile(d, "--peer", "127.0.0.1:1"), "--measure-network")
    assert_clean_error(_profile(d, "--measure-network", "--peer", "nohostport"), "HOST:PORT")


@pytest.mark.parametrize("host", ["no.such.host.invalid", "256.1.1.1"])
def test_net_peer_bad_host_is_one_line(host):
    """A host this machine cannot listen on: one paragraph, no C++ warnings or stack frames (issue 16 item 15)."""
    proc = run_cli("net-peer", "--host", host, "--port", "0", "--sessions", "1", "--timeout", "2", timeout=60)
    assert_clean_error(proc, host, "cannot listen")
    assert "frame #" not in proc.stderr and "socket.cpp" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2
