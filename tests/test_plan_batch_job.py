"""The plan-batch answer in the library: cluster files, --worker texts, oracle sums, margin and batch precedence."""
from __future__ import annotations

import pandas as pd
import pytest

from dlsched.errors import DlschedError, OracleError
from dlsched.formats.dag_json import save_dag
from dlsched.formats.oracle_file import write_oracle
from dlsched.planning.batch import TimeReference, oracle_compute_seconds, profiled_batch
from dlsched.answers.options import ModelSpec, OracleSpec
from dlsched.answers.plan_batch import DEFAULT_MARGIN, DeviceAnswer, Memory, SplitAnswer, Workers, plan_batch
from dlsched.planning.cluster_file import Worker, parse_cluster, parse_workers, read_cluster, worker_specs
from dlsched.planning.memory import MemoryEstimate
from dlsched.synthetic import random_dag


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("job")
    g, times = random_dag(12, 4, training=True, seed=5)
    save_dag(g, d / "m.dag.json")
    write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values()),
                               "resource": [g.op(n).resource for n in times]}), d / "m.csv")
    compute = sum(t for n, t in times.items() if g.op(n).kind == "compute")
    return g, times, str(d / "m.dag.json"), str(d / "m.csv"), compute


def test_oracle_sum_with_and_without_the_graph(model, tmp_path):
    g, times, _, oracle, compute = model
    assert oracle_compute_seconds(oracle, g) == pytest.approx(compute)
    assert oracle_compute_seconds(oracle) == pytest.approx(compute)  # by the resource column
    # no resource column: the graph's compute ops, an op the file lacks counting 0 s
    names = [op.name for op in g.compute_ops()]
    write_oracle(pd.DataFrame({"op": names[1:], "time": [times[n] for n in names[1:]]}), tmp_path / "part.csv")
    assert oracle_compute_seconds(tmp_path / "part.csv", g) == pytest.approx(compute - times[names[0]])
    # ... and without a graph, every row
    assert oracle_compute_seconds(tmp_path / "part.csv") == pytest.approx(compute - times[names[0]])
    write_oracle(pd.DataFrame({"op": ["x"], "time": [0.0]}), tmp_path / "zero.csv")
    with pytest.raises(OracleError, match="no compute-op times"):
        oracle_compute_seconds(tmp_path / "zero.csv", g)


def test_profiled_batch_comes_from_batch_then_graph(model):
    g = model[0]
    assert profiled_batch(3, g) == 3 and profiled_batch(None, g) == 8
    with pytest.raises(DlschedError, match="needs --batch"):
        profiled_batch(None, None, "--oracle needs --batch")


def test_cluster_file_checks(tmp_path):
    ok = parse_cluster({"global_batch": 8.0, "margin": "20%", "workers": [
        {"name": "a", "memory": "1GiB", "times": {16: 0.2, 8: 0.1}}, {"name": 7, "memory": 1024}]}, "c.yaml")
    assert (ok.global_batch, ok.margin) == (8, 0.2)
    assert ok.workers == [Worker("a", 2**30, times={16: 0.2, 8: 0.1}), Worker("7", 1024)]
    for doc, needle in [
        ({"workers": []}, "non-empty 'workers' list"),
        ({"workers": [{"name": "a"}]}, "worker 1 needs 'name' and 'memory'"),
        ({"workers": [{"name": "a", "memory": 1, "gpu": 1}]}, "unknown key(s) gpu"),
        ({"workers": [{"name": "a", "memory": 1}, {"name": "a", "memory": 1}]}, "'a' appears twice"),
        ({"workers": [{"name": "a", "memory": 1, "speed": "inf"}]}, "finite number above 0"),
        ({"workers": [{"name": "a", "memory": 0}]}, "(a): memory: must be positive"),
        ({"workers": [{"name": "a", "memory": 1, "times": {8: -1}}]}, "finite times ≥ 0"),
        ({"global_batch": True, "workers": [{"name": "a", "memory": 1}]}, "global_batch must be"),
        ({"margin": 1, "workers": [{"name": "a", "memory": 1}]}, "c.yaml: margin"),
    ]:
        with pytest.raises(DlschedError) as e:
            parse_cluster(doc, "c.yaml")
        assert needle in str(e.value) and "c.yaml" in str(e.value)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text("workers:\n  - {name: a, memory: 1GiB, oracle: a.csv}\n"
                                             "  - {name: b, memory: 1GiB, oracle: /abs/b.csv}\n")
    workers = read_cluster(tmp_path / "sub" / "c.yaml").workers
    assert [w.oracle for w in workers] == [str((tmp_path / "sub" / "a.csv").resolve()), "/abs/b.csv"]


def test_worker_texts():
    assert parse_workers(["a:1KiB", "b:1KiB:2.5"]).workers == [Worker("a", 1024), Worker("b", 1024, 2.5)]
    for texts, needle in [(["a"], "expected NAME:MEMORY[:SPEED]"), ([":1GiB"], "expected NAME"),
                          (["a:1GiB:x"], "speed 'x' is not a number"), (["a:1:1", "a:2:1"], "given twice: a")]:
        with pytest.raises(DlschedError) as e:
            parse_workers(texts)
        assert needle in str(e.value)


def test_worker_specs_scale_the_reference():
    est = MemoryEstimate("m", "static", "sgd", param_bytes=100, activation_bytes_per_sample=10)
    ref = TimeReference(lambda b: 0.5 * b, True, "s", "oracle")
    specs, unit, source = worker_specs([Worker("a", 1000, 2.0), Worker("b", 1000, times={10: 1.0})], est, 0.1, ref)
    assert (unit, source) == ("s", "oracle")
    assert specs[0].curve(4) == pytest.approx(1.0) and specs[0].linear and not specs[1].linear
    assert [s.max_batch for s in specs] == [70, 70]


def test_plan_batch_margin_and_global_batch_precedence(model, tmp_path):
    _, _, path, oracle, compute = model
    single = plan_batch(ModelSpec(path), OracleSpec(oracle), Memory(20_000_000))
    assert isinstance(single, DeviceAnswer) and single.plan.margin == DEFAULT_MARGIN
    assert single.reference.source == f"oracle {oracle} at batch 8"
    assert single.to_dict()["throughput"][-1]["time"] == pytest.approx(compute * single.plan.batch / 8)
    assert "measurements" not in single.to_dict()
    assert "throughput" not in plan_batch(ModelSpec(path), OracleSpec(None), Memory(20_000_000)).to_dict()
    c = tmp_path / "c.yaml"
    c.write_text("global_batch: 12\nmargin: 0.5\nworkers:\n  - {name: a, memory: 1GiB}\n  - {name: b, memory: 1GiB}\n")
    split = plan_batch(ModelSpec(path), OracleSpec(None), Memory(), workers=Workers(cluster=str(c)))
    assert isinstance(split, SplitAnswer) and (split.margin, split.plan.global_batch) == (0.5, 12)
    assert split.to_dict()["time_unit"] == "reference-sample" and split.plan.batches == [6, 6]
    split = plan_batch(ModelSpec(path), OracleSpec(None), Memory(margin=0.2), workers=Workers(4, cluster=str(c)))
    assert (split.margin, split.plan.global_batch) == (0.2, 4)
    with pytest.raises(DlschedError, match="not both"):
        plan_batch(ModelSpec(path), OracleSpec(None), Memory(), workers=Workers(workers=["a:1GiB"], cluster=str(c)))
    with pytest.raises(DlschedError, match="needs --global-batch"):
        plan_batch(ModelSpec(path), OracleSpec(None), Memory(), workers=Workers(workers=["a:1GiB"]))
