"""The oracle builder behind ``dlsched profile`` (profiling.oracle.build_oracle, answers.profile), as
library calls: no subprocess, no framework run."""
from __future__ import annotations

import json

import pytest

from dlsched.answers.options import ModelSpec
from dlsched.answers.profile import Link, Timing, profile
from dlsched.errors import DlschedError
from dlsched.formats.dag_json import save_dag
from dlsched.profiling.device_specs import BUILTIN
from dlsched.profiling.network import LinkMeasurement, parse_peer
from dlsched.profiling.oracle import build_oracle
from dlsched.synthetic import random_dag

SMALL_CNN = "examples/torch_models.py:small_cnn"


def _profile(model: str, **options):
    """The answer, its options by their command-line names (``peer`` and ``measure_network`` are the link's)."""
    link = {"peer": options.pop("peer", None), "measure": options.pop("measure_network", False)}
    return profile(ModelSpec(model, batch=options.pop("batch", None)), Timing(**options), Link(**link))


@pytest.fixture()
def no_loading(monkeypatch):
    monkeypatch.setattr("dlsched.importers.loader.load_model", lambda *a, **kw: pytest.fail("the model was loaded"))


@pytest.fixture()
def dag(tmp_path):
    g, _ = random_dag(6, 3, training=True, seed=2)
    save_dag(g, tmp_path / "m.dag.json")
    (tmp_path / "t.json").write_text(json.dumps([{"ph": "X", "name": op.name, "ts": i, "dur": 4.0}
                                                 for i, op in enumerate(g.compute_ops())]))
    return g, tmp_path


def test_analytic_transfers_are_priced_once_labelled_analytic_and_counted_as_transfers():
    g, _ = random_dag(6, 3, training=True, seed=2)
    spec = BUILTIN["a100"]
    built = build_oracle(g, spec=spec, bandwidth=1e8, default_time=1e-6)
    df = built.result.frame.set_index("op")
    xfers = g.recvs() + g.sends()
    for op in xfers:  # the given bandwidth, the spec's latency, labelled as part of the estimate
        assert df.loc[op.name, "source"] == "analytic"
        assert df.loc[op.name, "time"] == spec.network_latency + op.bytes / 1e8
    info = built.to_dict()
    assert info["transfers"] == len(xfers) and info["total_transfer_time"] == pytest.approx(
        sum(df.loc[op.name, "time"] for op in xfers))
    assert info["compute_ops"] == len(g.compute_ops()) and {r["source"] for r in info["slowest"]} == {"default"}
    assert built.network == {"source": "device spec a100", "bandwidth": 1e8, "latency": spec.network_latency}
    assert built.device == "analytic:a100" and built.runs is None


def test_transfer_rows_of_a_trace_use_the_default_link_and_name_the_file(dag):
    g, d = dag
    built = build_oracle(g, trace=str(d / "t.json"))
    assert built.network == {"source": "flags", "bandwidth": 10e9 / 8, "latency": pytest.approx(50e-6)}
    assert built.trace["file"] == str(d / "t.json") and built.trace["matched"] == len(g.compute_ops())
    assert set(built.result.frame["source"]) == {"trace", "network-model"}
    assert built.device == "cpu" and built.runs is None


def test_measured_link_is_taken_after_the_trace_is_read(dag):
    g, d = dag
    calls = []

    def measure():
        calls.append("measured")
        return LinkMeasurement(bandwidth=2e9, latency=1e-5, peer="test")

    with pytest.raises(DlschedError):
        build_oracle(g, trace=str(d / "missing.json"), measure=measure)
    assert calls == []  # a bad trace fails before the (slow) measurement
    built = build_oracle(g, trace=str(d / "t.json"), bandwidth=1.0, measure=measure)
    assert calls == ["measured"] and built.network["source"] == "measured"
    assert built.result.bandwidth == 2e9 and built.network["peer"] == "test"


def test_exactly_one_source_of_compute_times(dag):
    g, d = dag
    with pytest.raises(DlschedError, match="exactly one"):
        build_oracle(g)
    with pytest.raises(DlschedError, match="exactly one"):
        build_oracle(g, spec=BUILTIN["cpu"], trace=str(d / "t.json"))


@pytest.mark.parametrize("kwargs, needle", [
    ({"peer": "127.0.0.1:1"}, "--peer needs --measure-network"),
    ({"measure_network": True, "peer": "nonsense"}, "expected HOST:PORT"),
    ({"analytic": True, "trace": "t.json"}, "two different sources"),
    ({}, "holds no runnable model"),
    ({"analytic": True, "device_spec": "no-such-device"}, "unknown device spec"),
])
def test_profile_refuses_before_loading(dag, kwargs, needle, no_loading):
    _, d = dag
    with pytest.raises(DlschedError, match=needle):
        _profile(str(d / "m.dag.json"), **kwargs)


def test_profile_refuses_a_billion_runs_before_loading(no_loading):
    with pytest.raises(DlschedError, match="op runs"):
        _profile(SMALL_CNN, runs=10**9)


def test_profile_keeps_a_saved_dags_mode_and_loads_with_the_options_given(dag, monkeypatch):
    g, d = dag
    built = _profile(str(d / "m.dag.json"), trace=str(d / "t.json"), default_time=1e-6)
    assert built.graph.mode == "training" and built.result.untimed == {}
    seen = {}

    def load(model, **kw):
        seen.update(model=model, **kw)
        return g

    monkeypatch.setattr("dlsched.importers.loader.load_model", load)
    _profile("anything.dag.json", analytic=True, batch=3)
    assert seen == {"model": "anything.dag.json", "mode": None, "batch": 3, "ps": None, "ps_strategy": None,
                    "buffers": False}


def test_parse_peer():
    assert parse_peer("10.0.0.2:29555") == ("10.0.0.2", 29555)
    for bad in ("host", ":80", "host:0", "host:70000", "host:x"):
        with pytest.raises(DlschedError, match="HOST:PORT"):
            parse_peer(bad)
