"""Algorithm table CSVs: round trip, the shipped AlexNet example, and bad files refused with the file's name."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.errors import DlschedError
from dlsched.formats.algorithm_table import COLUMNS, read_algorithm_table, write_algorithm_table
from dlsched.planning.paper_alexnet import alexnet_algorithm_table

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "alexnet_algorithms.csv"
HEADER = ",".join(COLUMNS)
GOOD = f"{HEADER}\nconv1,gemm,32,0.01,1000\nconv1,fft,32,0.005,9000\nconv2,gemm,32,0.02,0\n"


def test_round_trip_keeps_rows_order_and_extra_columns(tmp_path):
    table = alexnet_algorithm_table([16, 32]).assign(note="assumed")
    write_algorithm_table(table, tmp_path / "t.csv")
    back = read_algorithm_table(tmp_path / "t.csv")
    assert list(back.columns) == [*COLUMNS, "note"]
    pd.testing.assert_frame_equal(back.drop(columns="note"), table.drop(columns="note"), rtol=1e-8,
                                  check_dtype=False)


def test_shipped_example_is_the_generated_table(tmp_path):
    """examples/alexnet_algorithms.csv is what examples/make_alexnet_algorithms.py writes today."""
    write_algorithm_table(alexnet_algorithm_table(), tmp_path / "now.csv")
    assert (tmp_path / "now.csv").read_bytes() == EXAMPLE.read_bytes()
    assert len(read_algorithm_table(EXAMPLE)) == 64 * 5 * 2


@pytest.mark.parametrize("text, match", [
    ("", "is empty"),
    ("layer,algorithm,batch\nconv1,gemm,32\n", r"lacks the column\(s\) time_s, workspace_bytes"),
    (f"{HEADER}\n", "has no rows"),
    (f"{HEADER}\n,gemm,32,0.01,1\n", "no layer name"),
    (f"{HEADER}\nconv1, ,32,0.01,1\n", "no algorithm name"),
    (f"{HEADER}\nconv1,gemm,32.5,0.01,1\n", "batch that is not a whole number ≥ 1"),
    (f"{HEADER}\nconv1,gemm,0,0.01,1\n", "batch that is not a whole number ≥ 1"),
    (f"{HEADER}\nconv1,gemm,32,fast,1\n", "time_s that is not a finite number of seconds above 0"),
    (f"{HEADER}\nconv1,gemm,32,0,1\n", "time_s that is not"),
    (f"{HEADER}\nconv1,gemm,32,inf,1\n", "time_s that is not"),
    (f"{HEADER}\nconv1,gemm,32,0.01,-5\n",
     r"workspace_bytes that is not a finite number of bytes ≥ 0 \(row 1: conv1"),
    (f"{HEADER}\nconv1,gemm,32,0.01,NaN\n", "workspace_bytes that is not"),
    (GOOD + "conv1,fft,32,0.004,1\n", r"repeat a layer, algorithm and batch \(row 4: conv1, fft, batch 32\)"),
    (GOOD + "conv1,gemm,64,0.02,2000\n", "conv2 at batch 64"),
    ("a,b\n\"unclosed\n", "cannot read the algorithm table"),
])
def test_bad_files_name_the_file_and_the_problem(tmp_path, text, match):
    path = tmp_path / "table.csv"
    path.write_text(text)
    with pytest.raises(DlschedError, match=match) as e:
        read_algorithm_table(path)
    assert str(e.value).startswith(str(path))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DlschedError, match="no such algorithm table"):
        read_algorithm_table(tmp_path / "nope.csv")
    with pytest.raises(DlschedError, match="is a directory"):
        read_algorithm_table(tmp_path)


@settings(max_examples=70, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.binary(max_size=200), st.integers(0, len(GOOD)))
def test_mutated_files_are_accepted_or_refused_cleanly(tmp_path_factory, noise, at):
    """Bytes spliced into a valid file: the reader accepts it or raises DlschedError, never anything else."""
    path = tmp_path_factory.mktemp("fuzz") / "t.csv"
    path.write_bytes(GOOD.encode()[:at] + noise + GOOD.encode()[at:])
    try:
        table = read_algorithm_table(path)
    except DlschedError:
        return
    assert table["time_s"].gt(0).all() and table["workspace_bytes"].ge(0).all()
