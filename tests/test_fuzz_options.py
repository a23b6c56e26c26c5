"""Fuzzing the options of the commands that start real work: --imbalance specs, the cluster options of
validate and train-ps, and the budgets of train-allreduce, train-ps, validate and replay-batch (issue 32).

Every case holds at least one value that is malformed, meaningless or above a budget, so no case starts a
process: each must end with exit 2 and one paragraph, never a traceback or another exit code. The
imbalance grammar is fuzzed on its own too: a spec either parses and draws finite delays within range, or is
refused with a :class:`DlschedError`.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.imbalance import MAX_DELAY, parse_imbalance
from dlsched.cli.main import main
from dlsched.errors import DlschedError

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
SMALL = "examples/torch_models.py:small_cnn"

ODD_DURATIONS = ["0ms", "50ms", "-1ms", "1e-300s", "1e300s", "2e9s", "nan", "inf", "1h", "", "x", "5", "3601s"]
ODD_NUMBERS = ["0", "1", "2", "-1", "1e9", "nan", "inf", "1e-300", "0.5", "x", ""]


@st.composite
def imbalance_specs(draw) -> str:
    d, n = st.sampled_from(ODD_DURATIONS), st.sampled_from(ODD_NUMBERS)
    kind = draw(st.sampled_from(["none", "random", "skew", "rotate", "speed", "lognormal", "trace", "gauss"]))
    if kind == "random":
        return f"random:k={draw(n)}:delay={draw(d)}"
    if kind == "skew":
        return f"skew:{draw(st.sampled_from(['linear', 'log']))}:{draw(d)}:{draw(d)}"
    if kind == "rotate":
        return f"rotate:{draw(d)}:{draw(d)}"
    if kind == "speed":
        return "speed:" + ",".join(draw(st.lists(n, min_size=1, max_size=4)))
    if kind == "lognormal":
        return f"lognormal:mean={draw(d)}:sd={draw(d)}:min={draw(d)}:max={draw(d)}"
    if kind == "trace":
        return "trace:/nonexistent/trace.csv"
    return draw(st.sampled_from(["none", "none:3", "gauss:1ms", ""]))


@SETTINGS
@given(imbalance_specs(), st.integers(1, 9), st.integers(1, 20))
def test_imbalance_specs_parse_and_draw_or_are_refused(spec, processes, steps):
    try:
        factors, delays = parse_imbalance(spec).draw(processes, steps, seed=1)
    except DlschedError as e:
        assert "--imbalance" in str(e)
        return
    assert np.isfinite(factors).all() and np.isfinite(delays).all()
    assert (delays >= 0).all() and (delays <= MAX_DELAY).all() and (factors > 0).all()


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue() + err.getvalue()


# Per command: option → (values that start nothing on their own, values refused before anything starts).
RANKS_OVER = ["65", "10000", "1000000"]
OPTIONS = {
    "train-allreduce": {
        "--processes": (["2", "3"], ["0", "1", "-4", "x", "nan", *RANKS_OVER]),
        "--iterations": (["5"], ["0", "-1", "x", "1e99", "10000000", "1000000000"]),
        "--imbalance": (["none"], ["gauss:1ms", "lognormal:mean=1e-300s:sd=1s:min=0s:max=1s", "skew:linear:0s:1e9s",
                                   "speed:1,1e308"]),
        "--step-pad": (["0ms"], ["-1ms", "1e400s", "x"]),
        "--sync-every": (["0", "33"], ["-1", "x", "1.5"]),
        "--max-work": (["100"], ["0", "-3", "1.5", "nan"]),
    },
    "train-ps": {
        "--workers": (["2"], ["0", "-1", "x", *RANKS_OVER]),
        "--servers": (["1"], ["0", "x", "1000000"]),
        "--iterations": (["3"], ["0", "x", "1000000000"]),
        "--global-batch": (["8"], ["0", "-8", "x"]),
        "--cpu-quota": (["1,1"], ["x,y", "1,,2"]),
        "--timeout": (["30s"], ["0s", "-1s", "nan"]),
        "--max-work": (["1000"], ["0", "x"]),
    },
    "validate": {
        "--workers": (["2"], ["0", "-2", "x", *RANKS_OVER]),
        "--servers": (["1"], ["0", "x", "1000000"]),
        "--rate": (["1gbit"], ["0mbit", "-1gbit", "abc", "nan", "1e400gbit", "5furlongs"]),
        "--network": (["localhost"], ["wormhole", ""]),
        "--orders": (["random,tac"], ["", "random,random", "tictac", ","]),
        "--iterations": (["2"], ["0", "x", "1000000"]),
        "--warmup": (["1"], ["-1", "x", "1000000"]),
        "--max-work": (["500"], ["0", "x"]),
    },
    "replay-batch": {
        "--workers": (["4"], ["0", "x", "1000000", "10000000"]),
        "--iterations": (["20"], ["0", "x", "1000000000"]),
        "--global-batch": (["64"], ["0", "-1", "x"]),
        "--noise": (["0"], ["-1", "nan", "inf"]),
        "--caps": (["100,100,100,100"], ["x", "1,,2", "1.5,2"]),
        "--max-work": (["1000000"], ["0", "x"]),
    },
}
POSITIONAL = {"train-ps": [SMALL], "validate": [SMALL], "train-allreduce": [], "replay-batch": []}


@st.composite
def hostile_command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(OPTIONS)))
    options = OPTIONS[command]
    names = sorted(options)
    bad = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    others = draw(st.lists(st.sampled_from([n for n in names if n not in bad]), max_size=3, unique=True))
    argv = [command, *POSITIONAL[command]]
    for name in bad:
        argv += [name, draw(st.sampled_from(options[name][1]))]
    for name in others:
        argv += [name, draw(st.sampled_from(options[name][0]))]
    return argv


@SETTINGS
@given(hostile_command_lines())
def test_hostile_options_of_the_real_jobs_exit_2_in_one_paragraph(argv):
    code, out = _run(argv)
    assert code == 2, (argv, code, out[-1500:])
    assert "Traceback" not in out, (argv, out[-1500:])
    assert out.strip().splitlines()[-1].strip(), argv
