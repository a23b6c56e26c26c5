"""eager-SGD (Algorithm 2) and its synchronous baseline, DDP, as a local job of real processes.

Each process trains a one-layer linear regression on the hyperplane task of
eager-SGD §7.2.1 (``y = a·x + noise``, ``dim`` inputs, its own shard of
``batch``-sample batches) and free-runs its ``iterations`` steps:

1. forward and loss on the step's batch;
2. sleep until the step has lasted ``step_pad · f + d`` (the imbalance's speed
   factor and injected delay for this process and step: the paper injects load
   imbalance by sleeping in the training step);
3. backward; then
   - ``ddp``: torch's own :class:`~torch.nn.parallel.DistributedDataParallel`
     all-reduces the gradient during backward (gloo), SGD step;
   - ``solo`` / ``majority``: the gradient joins the send buffer of a
     :class:`~dlsched.hooks.partial_allreduce.PartialAllreduce` (a gradient that
     missed its collective enters the next one, so none is lost); the process
     waits until collective ``t`` is done and applies the latest result,
     ``w ← w − lr · Σ/P`` (Algorithm 2, lines 6–8).
   - ``full``: the same partial-collective machinery, activated by the last
     process to arrive: synchronous, so it must give DDP's parameters.

``model_sync_every=K`` averages the replicas (a synchronous all-reduce of the
parameters) after every ``K`` steps: partial collectives let replicas drift
(§5). ``sync_every=N`` is the limiter of the authors' code: every ``N``-th
solo or majority round is synchronous. ``barrier=True`` starts every
iteration with a barrier, as the Fig. 9 micro-benchmark does. Every wait is bounded by ``timeout``; a rank that dies or
stalls makes every other one exit with code 2 and one ``dlsched: error:`` line
(:mod:`dlsched.runtime.launcher`).

Examples
--------
>>> cfg = EagerConfig(collective="solo", processes=4, iterations=20, dim=64, batch=16,
...                   step_times=[[0.01] * 4] * 20)
>>> cfg.collective, len(cfg.step_times)
('solo', 20)
>>> run = train_allreduce(cfg)                                    # doctest: +SKIP
>>> run.steps_per_s, run.mean_nap                                 # doctest: +SKIP

Public API: :class:`EagerConfig`, :class:`EagerRun`, :func:`train_allreduce`,
:func:`compare_collectives`, :func:`hyperplane`, :class:`EagerConfigError`,
:class:`EagerTrainingError`, :data:`COLLECTIVES`; the rank
entry point is ``python -m dlsched.jobs.eager_sgd``.
"""
from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field

from dlsched.errors import DlschedError
from dlsched.hooks.partial_allreduce import PartialAllreduce
from dlsched.runtime import launcher, torchrun
from dlsched.runtime.ps_failures import seconds, transfer_failure

#: ``ddp`` is the synchronous baseline, ``solo`` and ``majority`` eager-SGD's partial collectives, ``full`` the
#: partial-collective machinery activated by the last arrival (synchronous: it must give DDP's parameters).
COLLECTIVES = ("ddp", "solo", "majority", "full")
FAIL_HOW = ("kill", "stall")
MAX_SHARD = 2**28  # float32 numbers of one process's data shard


class EagerConfigError(DlschedError):
    """An eager-SGD setting is out of range; nothing was started."""


class EagerTrainingError(DlschedError):
    """A rank of the eager-SGD job failed, stalled, or lost a peer."""


@dataclass
class EagerConfig:
    """Settings of one eager-SGD (or DDP) job; checked on construction, JSON-serialisable.

    ``step_times[t][p]`` is how long process ``p``'s step ``t`` lasts before
    backward (compute padded by sleeping); ``fail_rank`` / ``fail_step`` /
    ``fail_how`` make that rank SIGKILL or SIGSTOP itself (tests).
    """

    collective: str
    processes: int
    iterations: int
    step_times: list = field(default_factory=list)
    dim: int = 8192
    batch: int = 256
    shard_batches: int = 8
    lr: float = 0.02
    noise: float = 0.1
    seed: int = 0
    model_sync_every: int = 0
    sync_every: int = 0
    barrier: bool = False
    timeout: float = 30.0
    fail_rank: int | None = None
    fail_step: int = 0
    fail_how: str = "kill"

    def _check_step_times(self) -> list[str]:
        self.step_times = self.step_times or [[0.0] * self.processes] * self.iterations
        try:
            times = [[float(x) for x in row] for row in self.step_times]
        except (TypeError, ValueError):
            times = None
        if times is None or len(times) != self.iterations or any(len(r) != self.processes for r in times):
            return [f"step_times must have {self.iterations} rows of {self.processes} seconds each"]
        if not all(math.isfinite(x) and 0 <= x <= 3600 for row in times for x in row):
            return ["step_times must be finite numbers of seconds between 0 and 3600"]
        self.step_times = times
        return []

    def __post_init__(self):
        bad = []

        def whole(name, low):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) and not (hasattr(v, "__index__")):
                bad.append(f"{name} must be a whole number, got {v!r}")
            elif int(v) < low:
                bad.append(f"{name} must be at least {low}, got {int(v)}")
            else:
                setattr(self, name, int(v))
        if self.collective not in COLLECTIVES:
            bad.append(f"collective must be one of {', '.join(COLLECTIVES)}, got {self.collective!r}")
        for name, low in (("processes", 2), ("iterations", 1), ("dim", 1), ("batch", 1), ("shard_batches", 1),
                          ("seed", 0), ("model_sync_every", 0), ("sync_every", 0), ("fail_step", 0)):
            whole(name, low)
        for name in ("lr", "noise", "timeout"):
            v = getattr(self, name)
            low = "≥ 0" if name == "noise" else "above 0"
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                    or (name != "noise" and v == 0) or (name == "timeout" and v > 86400):
                bad.append(f"{name} must be a finite number {low}{' (seconds, at most a day)' * (name == 'timeout')}"
                           f", got {v!r}")
            else:
                setattr(self, name, float(v))
        if self.fail_how not in FAIL_HOW:
            bad.append(f"fail_how must be one of {', '.join(FAIL_HOW)}, got {self.fail_how!r}")
        shard = self.batch * self.shard_batches * self.dim if not bad else 0
        if shard > MAX_SHARD:
            bad.append(f"each process's data (batch × shard_batches × dim = {shard:,} numbers) must stay within "
                       f"{MAX_SHARD:,} (1 GiB)")
        if not bad and self.fail_rank is not None and not (0 <= self.fail_rank < self.processes):
            bad.append(f"fail_rank must be a rank below processes={self.processes}, got {self.fail_rank!r}")
        if not bad:
            bad += self._check_step_times()
        if bad:
            raise EagerConfigError("invalid eager-SGD configuration: " + "; ".join(bad))


@dataclass
class EagerRun:
    """What a job measured; ``steps_per_s`` counts collectives (rounds of the global model) per second.

    ``mean_staleness`` / ``max_staleness`` are the index lag (rounds between a
    gradient's step and the round that takes it), ``mean_version_staleness`` /
    ``max_version_staleness`` the model's age (rounds completed between the
    start of the gradient's step and that round: Lemma 6.1's τ).
    ``last_arrival_latency_s`` is the mean latency of each step's last process
    to arrive, which waits for nobody: the collective's own cost in the same
    job; ``activation_s`` the mean time from a round's activation to the last
    progress thread seeing it (partial collectives).
    """

    collective: str
    processes: int
    iterations: int
    wall_s: float
    steps_per_s: float
    mean_iteration_s: float
    iteration_s_per_process: list
    mean_latency_s: float
    mean_nap: float
    nap: list
    mean_staleness: float
    max_staleness: int
    missed_rate: float
    queued_at_end: int
    final_loss: float
    replica_spread: float
    initiators: list
    initiators_agree: bool
    initiators_active: bool
    mean_version_staleness: float = 0.0
    max_version_staleness: int = 0
    last_arrival_latency_s: float = 0.0
    activation_s: float | None = None
    extra: dict = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        """The JSON form (no tensors)."""
        return {k: v for k, v in asdict(self).items() if k != "extra"}


# -- data ------------------------------------------------------------------------------------------

def hyperplane(dim: int, rows: int, seed: int, part: int, noise: float):
    """``(x, y)``: ``rows`` samples of the hyperplane ``y = a·x + noise`` (``a`` fixed by ``seed``,
    the samples by ``part``: a rank's shard, or the validation set).

    Examples
    --------
    >>> x, y = hyperplane(8, 5, seed=1, part=0, noise=0.0)
    >>> tuple(x.shape), tuple(y.shape)
    ((5, 8), (5, 1))
    """
    import torch
    a = torch.randn(dim, 1, generator=torch.Generator().manual_seed(seed)) / math.sqrt(dim)
    g = torch.Generator().manual_seed(seed * 1_000_003 + 17 + part)
    x = torch.randn(rows, dim, generator=g)
    return x, x @ a + noise * torch.randn(rows, 1, generator=g)


VALIDATION_PART = 10**6


# -- one rank --------------------------------------------------------------------------------------

def _flat(tensors):
    import torch
    return torch.cat([t.reshape(-1) for t in tensors])


def _barrier(group, what: str, timeout: float, rank: int):
    import torch.distributed as dist
    try:
        dist.barrier(group=group, async_op=True).wait(seconds(timeout))
    except Exception as e:
        raise transfer_failure(f"rank {rank}: {what} failed or timed out after {timeout:g} s", e) from None


def _model_sync(model, group, cfg, rank, step):
    import torch
    import torch.distributed as dist
    vec = _flat([p.data for p in model.parameters()])
    try:
        dist.all_reduce(vec, group=group, async_op=True).wait(seconds(cfg.timeout))
    except Exception as e:
        raise transfer_failure(f"rank {rank}: model synchronisation after step {step} failed or timed out", e) \
            from None
    vec /= cfg.processes
    torch.nn.utils.vector_to_parameters(vec, model.parameters())
    return vec.clone()


def _fail_here(cfg, rank, step):
    if cfg.fail_rank == rank and cfg.fail_step == step:
        os.kill(os.getpid(), signal.SIGKILL if cfg.fail_how == "kill" else signal.SIGSTOP)


def run_rank(config: dict, rank: int, init_method: str) -> dict:
    """Train one rank (the launcher's ``run_rank``); returns its measurements and final parameters.

    The rank joins from the launcher variables in its environment (:func:`dlsched.runtime.torchrun.join`),
    which the launcher set from ``init_method``."""
    import torch
    import torch.distributed as dist
    cfg = EagerConfig(**config)
    torch.set_num_threads(1)
    try:  # through env://, as a user's torchrun script joins (the launcher set RANK, MASTER_ADDR, ...)
        env = torchrun.join(cfg.timeout)
        store = torchrun.store_client(env, cfg.timeout, "eager")
        aux = dist.new_group(backend="gloo", timeout=seconds(cfg.timeout))  # barriers, model syncs
    except Exception as e:
        raise transfer_failure(f"rank {rank}: joining the job failed", e) from None
    xs, ys = hyperplane(cfg.dim, cfg.batch * cfg.shard_batches, cfg.seed, rank, cfg.noise)
    model = torch.nn.Linear(cfg.dim, 1)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    ddp = pa = None
    if cfg.collective == "ddp":
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
    else:
        try:
            client = torchrun.store_client(env, cfg.timeout, "eager")
        except torchrun.TorchrunError as e:
            raise transfer_failure(f"rank {rank}: joining the job failed", e) from None
        pa = PartialAllreduce(store, client, dist.group.WORLD, rank, cfg.processes, numel, cfg.collective, cfg.seed,
                              cfg.iterations, cfg.timeout, sync_every=cfg.sync_every)
    grad_sum = torch.zeros(numel, dtype=torch.float64)
    steps, syncs, applied, missed = [], [], -1, 0
    _barrier(aux, "the start barrier", cfg.timeout, rank)
    t_start = time.perf_counter()
    if pa is not None:
        pa.start(t_start)
    for t in range(cfg.iterations):
        if cfg.barrier:
            _barrier(aux, f"the barrier of step {t}", cfg.timeout, rank)
        t0 = time.perf_counter()
        _fail_here(cfg, rank, t)
        b = t % cfg.shard_batches
        x, y = xs[b * cfg.batch:(b + 1) * cfg.batch], ys[b * cfg.batch:(b + 1) * cfg.batch]
        loss = torch.nn.functional.mse_loss((ddp or model)(x), y)
        pause = t0 + cfg.step_times[t][rank] - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        t_call = time.perf_counter()
        if ddp is not None:
            opt.zero_grad(set_to_none=False)
            try:
                loss.backward()  # DDP's gloo all-reduce runs inside
            except Exception as e:
                raise transfer_failure(f"rank {rank}: DDP's all-reduce of step {t} failed", e) from None
            grad_sum += _flat([p.grad for p in params]).double()
            opt.step()
        else:
            grad = _flat(torch.autograd.grad(loss, params))
            grad_sum += grad.double()
            pa.arrive(t, grad, version=applied + 1)  # the model of this step holds rounds 0 … applied
            r, latest = pa.wait_round(t)
            if r > applied:
                with torch.no_grad():
                    vec = _flat([p.data for p in params]) - cfg.lr / cfg.processes * latest
                    torch.nn.utils.vector_to_parameters(vec, params)
                missed += r - applied - 1  # rounds overwritten in the receive buffer before this process looked
                applied = r
        t_end = time.perf_counter()
        steps.append((t0 - t_start, t_call - t0, t_end - t_call, float(loss.detach())))
        if cfg.model_sync_every and (t + 1) % cfg.model_sync_every == 0:
            syncs.append(_model_sync(model, aux, cfg, rank, t))
    t_done = time.perf_counter()
    result = {"rank": rank, "steps": steps, "t_done": t_done - t_start, "t_start": t_start, "syncs": syncs,
              "grad_sum": grad_sum, "params": _flat([p.data for p in params]).clone()}
    if pa is not None:
        pa.join()
        queued, n_queued = pa.queued()
        result.update(records=[asdict(r) for r in pa.records], initiated=pa.initiated, missed=missed,
                      activated_s=pa.activated_s, max_staleness=pa.max_staleness, max_age=pa.max_age,
                      reduced_sum=pa.reduced_sum, queued=queued.double(), n_queued=n_queued)
    _leave(store, cfg, rank)
    return result


def _leave(store, cfg, rank):
    """End together: the store lives in rank 0, which must outlast every other rank's last use of it."""
    try:
        if store.add("eager/done", 1) == cfg.processes:
            store.set("eager/all-done", "1")
        store.wait(["eager/all-done"], seconds(cfg.timeout))
        if rank:
            store.add("eager/left", 1)
            return
        deadline = time.monotonic() + cfg.timeout
        while store.add("eager/left", 0) < cfg.processes - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    except Exception as e:
        raise transfer_failure(f"rank {rank}: the end of the job failed", e) from None


# -- the launcher ----------------------------------------------------------------------------------

def train_allreduce(cfg: EagerConfig, job_timeout: float | None = None, workdir: str | None = None) -> EagerRun:
    """Run the job as ``cfg.processes`` local processes and summarise it.

    Parameters
    ----------
    cfg : EagerConfig
    job_timeout : float, optional
        Limit of the whole job in seconds (default: generous, from the
        settings); ``cfg.timeout`` bounds each single wait.
    workdir : str, optional
        Where the job directory is made.

    Raises
    ------
    EagerTrainingError
        A rank failed, stalled or died; the message quotes each failed rank.
    """
    import torch
    limit = job_timeout or (120 + cfg.timeout * 2 + sum(max(row) for row in cfg.step_times) * 3
                            + cfg.iterations * 0.5)
    job = launcher.launch_ranks(__name__, asdict(cfg), cfg.processes, job_timeout=limit, grace=cfg.timeout + 5,
                                workdir=workdir, prefix="dlsched-eager-", kind="eager-SGD",
                                refused=EagerConfigError, failed=EagerTrainingError)
    res = job.results
    x, y = hyperplane(cfg.dim, 2048, cfg.seed, VALIDATION_PART, cfg.noise)
    w = res[0]["params"]
    final = float(torch.mean((x @ w[:-1, None] + w[-1] - y) ** 2))
    spread = max(float((r["params"] - w).abs().max()) for r in res)
    iters = [r["steps"][-1][0] + r["steps"][-1][1] + r["steps"][-1][2] for r in res]
    lat = [s[2] for r in res for s in r["steps"]]
    common = dict(collective=cfg.collective, processes=cfg.processes, iterations=cfg.iterations,
                  iteration_s_per_process=[i / cfg.iterations for i in iters],
                  mean_iteration_s=sum(iters) / len(iters) / cfg.iterations,
                  mean_latency_s=sum(lat) / len(lat), final_loss=final, replica_spread=spread,
                  last_arrival_latency_s=_last_arrival_latency(res), extra={"results": res})
    if cfg.collective == "ddp":
        wall = res[0]["steps"][-1][0] + res[0]["steps"][-1][1] + res[0]["steps"][-1][2]
        return EagerRun(wall_s=wall, steps_per_s=cfg.iterations / wall, mean_nap=float(cfg.processes),
                        nap=[cfg.processes] * cfg.iterations, mean_staleness=0.0, max_staleness=0, missed_rate=0.0,
                        queued_at_end=0, initiators=[], initiators_agree=True, initiators_active=True, **common)
    recs = res[0]["records"]
    wall = recs[-1]["done_s"]
    grads = sum(r["gradients"] for r in recs)
    initiators = _initiators(cfg, res)
    # a round whose result a process never applied (it lagged and saw a later one) is a missed update
    missed = sum(r["missed"] for r in res)
    return EagerRun(wall_s=wall, steps_per_s=cfg.iterations / wall,
                    mean_nap=sum(sum(r["fresh"]) for r in recs) / len(recs),
                    nap=[sum(r["fresh"]) for r in recs],
                    mean_staleness=sum(r["staleness_sum"] for r in recs) / max(grads, 1),
                    max_staleness=max(r["max_staleness"] for r in res),
                    mean_version_staleness=sum(r["age_sum"] for r in recs) / max(grads, 1),
                    max_version_staleness=max(r["max_age"] for r in res), activation_s=_activation(res),
                    missed_rate=missed / (cfg.processes * cfg.iterations),
                    queued_at_end=sum(r["n_queued"] for r in res), initiators=initiators,
                    initiators_agree=_agree(cfg, res),
                    initiators_active=all(i is not None and rec["fresh"][i] for rec, i in zip(recs, initiators)
                                          if not rec["synchronous"] or cfg.collective != "majority"),
                    **common)


def compare_collectives(collectives, processes: int, iterations: int, imbalance: str | None = None,
                        step_pad: float = 0.0, seed: int = 0, job_timeout: float | None = None,
                        **settings) -> dict:
    """Run one job per collective under the same imbalance; the JSON report of them side by side.

    ``imbalance`` is a :mod:`dlsched.analyses.imbalance` spec; process ``p``'s
    step ``t`` lasts ``step_pad · f[t, p] + d[t, p]`` before backward, with the
    speed factors ``f`` and delays ``d`` drawn from ``seed`` (the simulator's
    draw). ``settings`` go to :class:`EagerConfig` (``timeout`` bounds each
    wait); ``job_timeout`` bounds each job.

    Returns
    -------
    dict
        ``processes``, ``iterations``, ``imbalance``, ``step_pad_s``,
        ``activation`` and ``collectives``: one :meth:`EagerRun.to_dict` per
        collective, with ``speedup`` (steps/s over DDP's) when ``ddp`` ran.

    Raises
    ------
    EagerConfigError
        An unknown or repeated collective, a bad setting or imbalance spec.
    EagerTrainingError
        A job failed.
    """
    from dlsched.analyses.imbalance import parse_imbalance
    names = list(collectives)
    if not names or len(set(names)) != len(names) or not set(names) <= set(COLLECTIVES):
        raise EagerConfigError(f"collectives must be distinct names from {', '.join(COLLECTIVES)}, got "
                               f"{','.join(map(str, names)) or 'none'}")
    if isinstance(step_pad, bool) or not isinstance(step_pad, (int, float)) or not 0 <= step_pad <= 3600:
        raise EagerConfigError(f"step pad must be between 0 and 3600 seconds, got {step_pad!r}")
    try:
        f, d = parse_imbalance(imbalance).draw(processes, iterations, seed=seed)
    except DlschedError as e:
        raise EagerConfigError(str(e)) from None
    configs = [EagerConfig(collective=c, processes=processes, iterations=iterations,
                           step_times=(step_pad * f + d).tolist(), seed=seed, **settings) for c in names]
    runs = {c.collective: train_allreduce(c, job_timeout=job_timeout) for c in configs}
    out = {"processes": processes, "iterations": iterations, "imbalance": imbalance or "none",
           "step_pad_s": float(step_pad), "activation": "barrier" if configs[0].barrier else "free-running",
           "collectives": {k: r.to_dict() for k, r in runs.items()}}
    if "ddp" in runs:
        for k, r in out["collectives"].items():
            r["speedup"] = r["steps_per_s"] / runs["ddp"].steps_per_s
    return out


def _agree(cfg, res) -> bool:
    """Every process saw the same rounds; majority: every vote named the same initiator; else one initiator a round."""
    def shared(rec):  # what every process must agree on (its own clock's readings aside)
        return {k: v for k, v in rec.items() if k not in ("done_s", "woke_s")}
    same = all([shared(rec) for rec in r["records"]] == [shared(rec) for rec in res[0]["records"]] for r in res)
    if cfg.collective == "majority":
        return same and all(rec["votes_agree"] for r in res for rec in r["records"])
    return same and sorted(t for r in res for t in r["initiated"]) == list(range(cfg.iterations))


def _last_arrival_latency(res) -> float:
    """Mean over steps of the latency of the process that arrived last (its wait is the collective alone).

    Arrival times compare across ranks: ``time.perf_counter`` is the host's
    monotonic clock, shared by the local processes.
    """
    lat = []
    for t in range(len(res[0]["steps"])):
        arrive = [r["t_start"] + r["steps"][t][0] + r["steps"][t][1] for r in res]
        last = max(range(len(res)), key=arrive.__getitem__)
        lat.append(res[last]["steps"][t][2])
    return sum(lat) / len(lat)


def _activation(res) -> float | None:
    """Mean seconds from a round's activation (the initiator's store ``add``) until the last progress thread
    woke to it, over the rounds whose activation was timed."""
    gaps = []
    for r in res:
        for round_, t in r["activated_s"].items():
            woke = max(o["t_start"] + o["records"][round_]["woke_s"] for o in res)
            gaps.append(woke - (r["t_start"] + t))
    return sum(gaps) / len(gaps) if gaps else None


def _initiators(cfg, res) -> list:
    """The initiator of every round: the store's first arrival (solo) or the agreed draw (majority)."""
    if cfg.collective == "majority":
        return [r["initiator"] for r in res[0]["records"]]
    who = [None] * cfg.iterations
    for r in res:
        for t in r["initiated"]:
            who[t] = r["rank"]
    return who


def main(argv=None):
    launcher.rank_main(argv, "one rank of an eager-SGD job", run_rank)


if __name__ == "__main__":
    main(sys.argv[1:])
