"""The ordered all-reduce (issue 29 item 4) on real gloo processes, and its coverage check.

- 2 ranks train ``small_cnn`` 5 steps with torch's own DDP and with the ordered all-reduce under four
  schedules (one piece per parameter in reverse order; parameters split into slices, shuffled and
  regrouped; forward order with the large layer split; another split read from an order file, as
  ``plan-ddp --write-order`` writes it): the parameters equal DDP's to 1e-6;
- the step records hold every piece, issued in order and one at a time on the link, and every parameter's update;
- a SIGKILLed or a stalled (SIGSTOP) rank ends the other with exit code 2 and one
  ``dlsched: error:`` line, within the timeout;
- a parameter without gradient fails its step's backward (exit 2, one process);
- construction refuses a schedule that misses or duplicates elements (hypothesis, no processes).

The jobs (``tests/ordered_ar_jobs.py``) start real processes: run this file under
``flock /tmp/dlsched-heavy.lock``.
"""
from __future__ import annotations

import random
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.hooks.ordered_allreduce import (OrderedAllreduce, OrderedAllreduceError, PieceCoverageError,
                                             check_pieces, pieces_per_parameter)
from tests.ordered_ar_jobs import model_and_names, run_job

pytestmark = pytest.mark.timeout(300)

BASE = dict(steps=5, batch=8, lr=0.1, momentum=0.9, timeout=60.0)


def _split_mixed(model, seed=3):
    """Every parameter in up to 3 slices, shuffled, regrouped into pieces of 1–3 slices of any parameters."""
    rng = random.Random(seed)
    slices = []
    for n, p in model.named_parameters():
        cuts = sorted({0, p.numel(), *(rng.randrange(1, p.numel()) for _ in range(2) if p.numel() > 1)})
        slices += [(n, a, b) for a, b in zip(cuts, cuts[1:])]
    rng.shuffle(slices)
    pieces = []
    while slices:
        k = rng.randint(1, 3)
        pieces.append(slices[:k])
        slices = slices[k:]
    return pieces


def _forward_split(model, parts=4):
    """Registration (forward) order, one piece per parameter, the largest split into ``parts`` pieces."""
    named = list(model.named_parameters())
    big = max(named, key=lambda np_: np_[1].numel())[0]
    pieces = []
    for n, p in named:
        cuts = [p.numel() * i // parts for i in range(parts + 1)] if n == big else [0, p.numel()]
        pieces += [[(n, a, b)] for a, b in zip(cuts, cuts[1:])]
    return pieces


def _order_file(path, pieces):
    """``pieces`` written as plan-ddp's order file (``formats/allreduce_order_file``)."""
    from dlsched.formats.allreduce_order_file import OrderFile, OrderPiece, write_order_file
    size = {n: p.element_size() for n, p in model_and_names()[0].named_parameters()}
    write_order_file(OrderFile("small_cnn", "-", 2, 1 << 20, [
        OrderPiece(tuple(pc), sum((b - a) * size[n] for n, a, b in pc), i) for i, pc in enumerate(pieces)]), path)
    return str(path)


@pytest.fixture(scope="module")
def equal_job(tmp_path_factory):
    model, _ = model_and_names()
    schedules = {"reverse": pieces_per_parameter(model), "split_mixed": _split_mixed(model),
                 "forward_split": _forward_split(model)}
    order = _order_file(tmp_path_factory.mktemp("order") / "order.json", _split_mixed(model, seed=5))
    job = run_job({**BASE, "ddp": True, "schedules": {**schedules, "order_file": {"order_file": order}}})
    schedules["order_file"] = _split_mixed(model, seed=5)
    return schedules, [p.numel() for p in model.parameters()], job.results


def test_parameters_equal_ddp(equal_job):
    schedules, _, results = equal_job
    want = results[0]["ddp"]
    first = model_and_names()[0]
    assert (want - torch.cat([p.detach().reshape(-1) for p in first.parameters()])).abs().max() > 1e-3  # it trained
    torch.testing.assert_close(results[1]["ddp"], want, rtol=0, atol=0)
    for name in schedules:
        for r in results:
            diff = float((r[name][0] - want).abs().max())
            assert diff <= 1e-6, (name, r["rank"], diff)


def test_records_hold_each_piece_in_order_and_each_update(equal_job):
    schedules, numels, results = equal_job
    names = [n for n, _ in model_and_names()[0].named_parameters()]
    for name, pieces in schedules.items():
        for r in results:
            recs = r[name][1]
            assert [s["step"] for s in recs] == list(range(BASE["steps"]))
            for s in recs:
                assert len(s["pieces"]) == len(pieces) and sorted(s["updated_s"]) == sorted(names)
                assert sorted(s["ready_s"]) == sorted(names)
                ps = s["pieces"]
                for i, (issued, landed) in enumerate(ps):
                    # issued in order, each after its gradients were ready; one at a time on the link: a piece
                    # is issued only once the one before it has landed
                    assert issued <= landed, (name, s["step"], i)
                    assert all(s["ready_s"][n] <= issued for n, _, _ in pieces[i])
                    if i:
                        assert ps[i - 1][1] <= issued, (name, s["step"], i)
                assert 0 <= s["first_layer_s"] and s["backward_end_s"] >= max(s["ready_s"].values())
                # the training thread's CPU time lies within the wall time of its forward and backward, and
                # within the whole process's
                wall = s["backward_end_s"] - s["first_layer_s"]
                assert 0 < s["compute_cpu_s"] <= wall + 0.01 and s["compute_cpu_s"] <= s["process_cpu_s"] + 1e-6
                # a parameter is updated after its last piece landed
                last = {n: s["pieces"][i][1] for i, pc in enumerate(pieces) for n, _, _ in pc}
                assert all(s["updated_s"][n] >= last[n] for n in names)
            assert all(s["next_first_layer_s"] >= s["next_forward_s"] > 0 for s in recs[:-1])
            assert recs[-1]["next_forward_s"] is None


@pytest.mark.parametrize("how,victim", [("kill", 0), ("stall", 1)])
def test_dead_or_stalled_peer_ends_the_other_with_exit_2(tmp_path, how, victim):
    from dlsched.runtime.launcher import JobFailed
    model, _ = model_and_names()
    timeout = 10.0
    cfg = {**BASE, "steps": 40, "timeout": timeout, "schedules": {"reverse": pieces_per_parameter(model)},
           "fail": {"rank": victim, "step": 2, "how": how, "dir": str(tmp_path)}}
    t0 = time.monotonic()
    with pytest.raises(JobFailed) as ei:
        # killed: the survivor fails after the victim, within the grace; stalled: the survivor fails first, and
        # the grace only holds the launcher beside a stopped victim that never ends
        run_job(cfg, grace=timeout + 15 if how == "kill" else 2.0)
    survivor = 1 - victim
    codes, errs = ei.value.returncodes, ei.value.stderr
    assert codes[survivor] == 2 and codes[victim] < 0, (codes, str(ei.value))
    lines = [ln for ln in errs[survivor].splitlines() if ln.startswith("dlsched: error:")]
    assert len(lines) == 1 and "Traceback" not in errs[survivor], errs[survivor]
    assert f"rank {survivor}:" in lines[0] and "all-reduce" in lines[0], lines[0]
    if how == "kill":
        assert "peer" in lines[0], lines[0]
    else:
        assert f"{timeout:g} s" in lines[0], lines[0]
    # the survivor noticed by itself, within the timeout (and a margin for a loaded machine)
    noticed = float((tmp_path / f"rank{survivor}").read_text()) - float((tmp_path / "victim").read_text())
    assert 0 <= noticed <= timeout + 15, noticed
    assert time.monotonic() - t0 < 4 * timeout + 120


def test_a_parameter_without_gradient_fails_its_backward():
    """As DDP without find_unused_parameters: the step's backward raises, the rank exits 2 (one process)."""
    from dlsched.runtime.launcher import JobFailed
    with pytest.raises(JobFailed) as ei:
        run_job({**BASE, "unused": True, "schedules": {"per": "per-parameter"}}, world=1)
    assert ei.value.returncodes == [2], str(ei.value)
    assert "rank 0: 1 parameter(s) got no gradient in step 0 ('unused')" in str(ei.value)


# -- the coverage check (no processes) ------------------------------------------------------------

def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


@pytest.mark.parametrize("pieces,needle", [
    ([[("0.weight", 0, 12)], [("0.bias", 0, 3)], [("2.weight", 0, 6)]], "'2.bias' elements 0:2 are in no piece"),
    ([[("0.weight", 0, 12), ("0.bias", 0, 3)], [("2.weight", 0, 6), ("2.bias", 0, 2)], [("0.bias", 1, 2)]],
     "'0.bias' elements 1:2 are in more than one piece"),
    ([[("0.weight", 0, 13), ("0.bias", 0, 3), ("2.weight", 0, 6), ("2.bias", 0, 2)]], "outside 0:12"),
    ([[("9.weight", 0, 1)], *pieces_per_parameter(_model())], "'9.weight', which is not a trainable"),
    ([[], *pieces_per_parameter(_model())], "piece 0 has no slices"),
    ([[("0.bias", 0, 1.5)], *pieces_per_parameter(_model())], "is not (parameter name, start, stop)"),
], ids=["missing", "duplicate", "out-of-bounds", "unknown", "empty", "malformed"])
def test_construction_refuses_a_bad_schedule(pieces, needle):
    with pytest.raises(PieceCoverageError) as ei:
        OrderedAllreduce(_model(), pieces, lambda ps: torch.optim.SGD(ps, lr=0.1))
    assert needle in str(ei.value) and "\n" not in str(ei.value) and ei.value.exit_code == 2


def test_construction_refuses_frozen_parameters_in_the_schedule():
    m = _model()
    m[0].bias.requires_grad_(False)
    with pytest.raises(PieceCoverageError, match="'0.bias', which is not a trainable"):
        OrderedAllreduce(m, pieces_per_parameter(_model()), lambda ps: torch.optim.SGD(ps, lr=0.1))


def test_construction_refuses_a_parameter_off_the_cpu():
    m = _model().to("meta")
    with pytest.raises(OrderedAllreduceError, match="'0.weight' is on meta; the ordered all-reduce runs on CPU"):
        OrderedAllreduce(m, pieces_per_parameter(m), lambda ps: torch.optim.SGD(ps, lr=0.1))


@st.composite
def _schedules(draw):
    """Random parameter sizes and a random exact cover of them: cut, shuffled, regrouped."""
    numels = {f"p{i}": draw(st.integers(1, 40)) for i in range(draw(st.integers(1, 6)))}
    slices = []
    for n, size in numels.items():
        cuts = sorted(set(draw(st.lists(st.integers(1, size), max_size=4))) | {0, size})
        slices += [(n, a, b) for a, b in zip(cuts, cuts[1:]) if a < b]
    slices = draw(st.permutations(slices))
    sizes = draw(st.lists(st.integers(1, 4), min_size=len(slices), max_size=len(slices)))
    pieces, at = [], 0
    for k in sizes:
        if at < len(slices):
            pieces.append(list(slices[at:at + k]))
            at += k
    return numels, pieces


@settings(max_examples=200, deadline=None)
@given(_schedules())
def test_an_exact_cover_is_accepted(case):
    numels, pieces = case
    assert check_pieces(numels, pieces) == pieces


@settings(max_examples=200, deadline=None)
@given(_schedules(), st.data())
def test_a_lost_or_repeated_element_is_refused(case, data):
    numels, pieces = case
    flat = [(i, j) for i, pc in enumerate(pieces) for j in range(len(pc))]
    i, j = data.draw(st.sampled_from(flat))
    name, a, b = pieces[i][j]
    how = data.draw(st.sampled_from(["drop", "shrink", "repeat", "grow"]))
    bad = [list(pc) for pc in pieces]
    if how == "drop":
        del bad[i][j]
    elif how == "shrink" and b - a > 1:
        bad[i][j] = (name, a, b - 1)
    elif how == "grow" and b < numels[name]:
        bad[i][j] = (name, a, b + 1)  # overlaps the next slice of the parameter
    else:
        k = data.draw(st.integers(a, b - 1))
        bad[data.draw(st.integers(0, len(bad) - 1))].append((name, k, k + 1))
    with pytest.raises(PieceCoverageError, match=f"'{name}' elements"):
        check_pieces(numels, bad)


def test_piece_gap_counts_only_pieces_that_waited_for_nothing():
    """The ordered job's cost per piece: from a piece's end to the next one's issue, only where the next
    piece's gradients were ready before that end (else the gap is a wait for backward, not the hook's work)."""
    from dlsched.hooks.ordered_allreduce import StepRecord
    from dlsched.jobs.ordered_run import piece_gap
    pieces = [[("a", 0, 4)], [("b", 0, 4)], [("c", 0, 2), ("d", 0, 2)]]
    rec = StepRecord(0, ready_s={"a": 0.0, "b": 0.1, "c": 0.5, "d": 2.2},
                     pieces=[[0.0, 1.0], [1.003, 2.0], [2.5, 3.0]])
    assert piece_gap([rec], pieces) == pytest.approx(0.003)  # d was ready only at 2.2: a wait, not counted
    assert piece_gap([StepRecord(0, ready_s={"a": 0.0, "b": 5.0}, pieces=[[0.0, 1.0], [5.0, 6.0]])],
                     pieces[:2]) is None
    # the hook issues a ready piece before it lands the one in flight: the link did not idle
    assert piece_gap([StepRecord(0, ready_s={"a": 0.0, "b": 0.1}, pieces=[[0.0, 1.0], [0.2, 1.5]])],
                     pieces[:2]) == 0.0
