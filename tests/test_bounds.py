"""Bounds U, L, S and efficiency E (TicTac §3.2, DESIGN §4.1)."""
from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.bounds import bounds, schedule_efficiency, trace_makespan
from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.errors import DlschedError, OracleError
from dlsched.synthetic import random_dag
from tests.paper_graphs import figure1


def test_figure1_bounds():
    g, t = figure1()
    b = bounds(g, t)
    assert (b.upper, b.lower, b.speedup) == (4.0, 2.0, 1.0)
    assert b.loads == {"compute:0": 2.0, "ps:0/down": 2.0}
    assert b.schedule_efficiency(3.0) == 0.5  # the good order of Figure 1(b)
    assert b.schedule_efficiency(4.0) == 0.0  # the bad order of Figure 1(c) is fully serial
    f = b.frame()
    assert list(f.columns) == ["resource", "ops", "load", "share"]
    assert f["ops"].tolist() == [2, 2] and f["share"].tolist() == [0.5, 0.5]


def test_upper_equals_lower():
    g, t = figure1()
    t = {**t, "recv1": 0.0, "recv2": 0.0}  # all work on one resource
    b = bounds(g, t)
    assert b.upper == b.lower == 2.0 and b.speedup == 0.0
    assert b.schedule_efficiency(2.0) == 1.0 and schedule_efficiency(5.0, 5.0, 7.0) == 1.0
    empty = bounds(Graph("empty"), {})
    assert (empty.upper, empty.lower, empty.speedup) == (0.0, 0.0, 0.0)


def test_efficiency_formula():
    assert schedule_efficiency(10.0, 4.0, 7.0) == pytest.approx(0.5)
    assert schedule_efficiency(10.0, 4.0, 4.0) == 1.0
    assert schedule_efficiency(10.0, 4.0, 10.0) == 0.0
    assert schedule_efficiency(10.0, 4.0, 13.0) == pytest.approx(-0.5)  # not clipped


def test_missing_and_bad_times():
    g, t = figure1()
    with pytest.raises(OracleError, match="op2"):
        bounds(g, {k: v for k, v in t.items() if k != "op2"})
    with pytest.raises(OracleError, match="recv1"):
        bounds(g, {**t, "recv1": -1.0})


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 40), p=st.integers(0, 10), training=st.booleans(), ps=st.integers(1, 3),
       seed=st.integers(0, 10**6), integer=st.booleans())
def test_bounds_properties(n, p, training, ps, seed, integer):
    g, t = random_dag(n, p, training=training, ps=ps, seed=seed, integer_times=integer)
    b = bounds(g, t)
    assert 0 <= b.lower <= b.upper
    assert b.speedup >= 0
    assert b.upper == pytest.approx(sum(t.values()))
    assert b.lower == max(b.loads.values())
    assert sum(b.ops.values()) == len(g)
    if b.upper > b.lower:
        assert b.schedule_efficiency(b.lower) == pytest.approx(1.0)
        assert b.schedule_efficiency(b.upper) == pytest.approx(0.0)


def test_trace_makespan(tmp_path):
    events = [{"ph": "X", "name": "a", "ts": 1000, "dur": 500},
              {"ph": "X", "name": "b", "ts": 1200, "dur": 2000},
              {"ph": "i", "name": "marker", "ts": 99999},       # not a complete event: ignored
              {"ph": "M", "name": "process_name", "args": {}}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    assert trace_makespan(p) == pytest.approx(2200e-6)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))
    assert trace_makespan(bare) == pytest.approx(2200e-6)
    gz = tmp_path / "t.json.gz"
    with gzip.open(gz, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert trace_makespan(gz) == pytest.approx(2200e-6)


@pytest.mark.parametrize("content,needle", [
    ("not json", "not a json trace file"),
    (json.dumps({"foo": 1}), "not a chrome trace"),
    (json.dumps({"traceEvents": [{"ph": "i", "ts": 1}]}), "no complete"),
])
def test_trace_makespan_errors(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(DlschedError) as e:
        trace_makespan(p)
    assert needle in str(e.value).lower() and str(p) in str(e.value)
    with pytest.raises(DlschedError, match="no such trace"):
        trace_makespan(tmp_path / "missing.json")


def test_trace_makespan_shares_the_trace_reader(tmp_path):
    """bounds --trace and profile --from-trace read traces with one reader: same gzip detection
    (magic bytes, whatever the suffix), same error class, same refusal of negative durations."""
    from dlsched.profiling.trace_import import TraceError, read_trace_events

    events = [{"ph": "X", "name": "a", "ts": 0, "dur": 10}, {"ph": "X", "name": "b", "ts": "5", "dur": 20}]
    gz_no_suffix = tmp_path / "t.json"
    gz_no_suffix.write_bytes(gzip.compress(json.dumps(events).encode()))
    assert trace_makespan(gz_no_suffix) == pytest.approx(25e-6)
    assert [e["ts"] for e in read_trace_events(gz_no_suffix)] == [0.0, 5.0]
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps([{"ph": "X", "name": "conv", "ts": 3, "dur": -1}]))
    with pytest.raises(TraceError, match=r"neg\.json: event 'conv' at ts=3 has a negative duration"):
        trace_makespan(neg)
    with pytest.raises(TraceError, match="is a directory"):
        trace_makespan(tmp_path)
    assert issubclass(TraceError, DlschedError) and TraceError.exit_code == 2
