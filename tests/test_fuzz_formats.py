"""Fuzzing the five text formats dlsched reads: 8 tests × 70 examples = 560 cases.

Each reader gets byte mutations of a valid file and JSON-shape mutations of its
document (a subtree replaced by a value of another type or an absurd number).
It must either accept the file, and then the analyses that follow must work on
it, or raise :class:`DlschedError`, which the CLI prints as one paragraph with
exit 2. Any other exception would be a traceback for the user.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.bounds import bounds
from dlsched.errors import DlschedError
from dlsched.formats.baseline import read_baseline, write_baseline
from dlsched.formats.dag_json import load_dag, save_dag
from dlsched.formats.oracle_file import write_oracle
from dlsched.profiling.oracle_times import load_times
from dlsched.formats.priority_file import make_priority_file, read_priority_file, write_priority_file
from dlsched.synthetic import random_dag

SETTINGS = settings(max_examples=70, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1e308, -1e308, 1.5, -0.5, 2**70]),
    st.text(max_size=6), st.just([]), st.just({}), st.just([[]]), st.just({"a": None}),
    st.sampled_from(["ps:x/down", "compute:0", "ps:0/up", "Infinity", "NaN"]),
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    import pandas as pd

    d = tmp_path_factory.mktemp("formats")
    graph, times = random_dag(12, 4, training=True, ps=2, seed=3)
    paths = {"dag": d / "m.dag.json", "oracle": d / "o.csv", "priorities": d / "p.json",
             "tictac": d / "p.tsv", "baseline": d / "b.json"}
    save_dag(graph, paths["dag"])
    write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values())}), paths["oracle"])
    pf = make_priority_file(graph, {r.name: i for i, r in enumerate(graph.recvs())}, "tic")
    write_priority_file(pf, paths["priorities"], "json")
    write_priority_file(pf, paths["tictac"], "tictac")
    write_baseline({"model": {"spec": "m", "name": graph.name, "fingerprint": graph.fingerprint(), "mode": "training"},
                    "options": {"mode": "training", "batch": None, "margin": 0.1, "default_time": None},
                    "metrics": {"ops": len(graph), "upper_bound": 1.5}, "tolerances": {"ops": 0.0}},
                   paths["baseline"])
    return paths


def _read(kind: str, path: Path, files: dict[str, Path]) -> None:
    """Read ``path`` as ``kind`` and use it the way the commands do."""
    graph = load_dag(files["dag"])
    if kind == "dag":
        g = load_dag(path)
        times = {op.name: 1e-3 for op in g.ops()}
        b = bounds(g, times)
        assert math.isfinite(b.upper) and b.lower <= b.upper
    elif kind == "oracle":
        times = load_times(path, graph, default_time=1e-6)
        b = bounds(graph, times)
        assert math.isfinite(b.upper)
    elif kind in ("priorities", "tictac"):
        pf = read_priority_file(path, graph)
        assert all(isinstance(t.priority, int) for t in pf.transfers)
    else:
        doc = read_baseline(path)
        assert all(math.isfinite(v) for v in doc["metrics"].values())


def _accepts_or_refuses(kind: str, data: bytes, files: dict[str, Path], tmp: Path) -> None:
    path = tmp / files[kind].name
    path.write_bytes(data)
    try:
        _read(kind, path, files)
    except DlschedError as e:
        assert str(e).strip(), "an error with no message"


@st.composite
def byte_mutations(draw, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and data:
            del data[i:i + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[i:]
    return bytes(data)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            yield from _paths(v, prefix + (i,))


@st.composite
def shape_mutations(draw, original: dict) -> bytes:
    doc = copy.deepcopy(original)
    if draw(st.booleans()) and isinstance(doc, dict):
        doc.pop("fingerprint", None)  # files without a fingerprint must be validated by content too
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        value = copy.deepcopy(draw(ODD_VALUES))  # st.just shares one object between draws
        if not path:
            doc = value
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
    return json.dumps(doc, allow_nan=True).encode()


@pytest.mark.parametrize("kind", ["dag", "oracle", "priorities", "tictac", "baseline"])
def test_byte_mutations_never_escape(files, tmp_path, kind):
    original = files[kind].read_bytes()

    @SETTINGS
    @given(byte_mutations(original))
    def run(data):
        _accepts_or_refuses(kind, data, files, tmp_path)

    run()


@pytest.mark.parametrize("kind", ["dag", "priorities", "baseline"])
def test_json_shape_mutations_never_escape(files, tmp_path, kind):
    original = json.loads(files[kind].read_text())

    @SETTINGS
    @given(shape_mutations(original))
    def run(data):
        _accepts_or_refuses(kind, data, files, tmp_path)

    run()
