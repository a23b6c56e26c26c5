"""The CI gate as library calls (dlsched.answers.snapshot, dlsched.answers.check): what snapshot records, what
check judges and exits with. tests/test_check.py runs the same through the CLI on real torch models."""
from __future__ import annotations

import pandas as pd
import pytest

from dlsched.answers.check import check
from dlsched.answers.gate import OPTION_KEYS, GateOptions, gate_times, parse_tolerances
from dlsched.answers.options import ModelSpec
from dlsched.answers.snapshot import snapshot
from dlsched.errors import DlschedError
from dlsched.formats.dag_json import save_dag
from dlsched.profiling.analytic import analytic_oracle
from dlsched.profiling.device_specs import BUILTIN
from dlsched.synthetic import random_dag


@pytest.fixture()
def model(tmp_path):
    g, times = random_dag(8, 3, training=True, seed=4)
    save_dag(g, tmp_path / "m.dag.json")
    pd.DataFrame({"op": list(times), "time": list(times.values())}).to_csv(tmp_path / "o.csv", index=False)
    return g, tmp_path


def test_snapshot_records_its_options_and_tolerances(model):
    _, d = model
    snap = snapshot(ModelSpec(str(d / "m.dag.json")), GateOptions(default_time=1e-6, device_spec="h100"),
                    ["tac_makespan=5%"])
    assert list(snap.doc["options"]) == list(OPTION_KEYS)
    assert snap.doc["options"]["device_spec"] == "h100" and snap.doc["options"]["oracle"] is None
    assert snap.doc["tolerances"] == {"tac_makespan": 0.05}
    assert snap.doc["model"]["mode"] == "training" and snap.graph.name == snap.doc["model"]["name"]


def test_analytic_times_match_the_estimate_with_its_own_network(model):
    # The gate's analytic oracle goes through build_oracle; its times are the roofline's, transfers included.
    g, d = model
    times = gate_times(g, GateOptions(default_time=1e-6, device_spec="a100"))
    df, _ = analytic_oracle(g, BUILTIN["a100"])
    for op, t in zip(df["op"], df["time"]):
        assert times[op] == t
    assert all(times[op.name] == 1e-6 for op in g.compute_ops() if op.name not in set(df["op"]))


def test_analytic_oracle_without_default_time_names_the_op_types(model):
    _, d = model
    with pytest.raises(DlschedError, match=r"cannot cost \d+ op\(s\).*op types: AddN, Bwd, Fwd.*--default-time"):
        snapshot(ModelSpec(str(d / "m.dag.json")), GateOptions())


def test_check_reuses_recorded_options_unless_given(model):
    _, d = model
    spec = str(d / "m.dag.json")
    base = snapshot(ModelSpec(spec), GateOptions(oracle=str(d / "o.csv"))).doc
    same = check(base, ModelSpec(spec), GateOptions())  # not given: the recorded oracle is used
    assert same.regressed == [] and same.exit_code == 0 and same.note is None
    # Given: no oracle file, so the analytic estimate with 1 s for each op it cannot cost: far slower.
    slow = check(base, ModelSpec(spec), GateOptions(default_time=1.0), given={"oracle", "default_time"})
    assert slow.regressed and slow.exit_code == 1
    assert "tac_makespan" in slow.regressed and set(slow.table["verdict"]) >= {"REGRESSED", "ok"}
    assert slow.to_dict()["regressed"] == slow.regressed and "regressed" not in slow.to_dict()["metrics"][0]


def test_update_and_tolerances(model):
    _, d = model
    spec = str(d / "m.dag.json")
    base = snapshot(ModelSpec(spec), GateOptions(oracle=str(d / "o.csv")), ["param_count=0"]).doc
    opts, given = GateOptions(default_time=1.0), {"oracle", "default_time"}
    updated = check(base, ModelSpec(spec), opts, given, update=True)
    assert updated.regressed and updated.exit_code == 0 and updated.to_dict()["updated"]
    assert updated.doc["tolerances"] == {"param_count": 0.0}  # an update keeps the baseline's tolerances
    assert updated.doc["options"]["default_time"] == 1.0
    lenient = check(base, ModelSpec(spec), opts, given, tolerance="1e9", tolerance_for=["speedup_bound=1e9"])
    assert lenient.exit_code == 0
    with pytest.raises(DlschedError, match="cannot parse"):
        check(base, ModelSpec(spec), GateOptions(), tolerance="bad")


def test_fingerprint_change_is_a_note(model):
    _, d = model
    spec = str(d / "m.dag.json")
    base = snapshot(ModelSpec(spec), GateOptions(default_time=1e-6)).doc
    base["model"]["fingerprint"] = "0000"
    result = check(base, ModelSpec(spec), GateOptions())
    assert result.note.startswith("the model's structure changed (fingerprint 0000 → ")
    assert result.to_dict()["fingerprint_changed"] and result.exit_code == 0


@pytest.mark.parametrize("items, needle", [(["nope"], "expects METRIC=TOL"), (["nope=5%"], "unknown metric"),
                                           (["ops=lots"], "cannot parse")])
def test_parse_tolerances_refuses(items, needle):
    with pytest.raises(DlschedError, match=needle):
        parse_tolerances(items)
