"""Predicting each worker's sample speed for the next iteration (LB-BSP §3.2.2, paper ``002_*``).

A predictor sees, at every iteration boundary ``k``, the speeds ``v^{k−1}``
just measured (samples per second of each worker's own busy time; NaN where a
worker processed nothing) and the current resource readings ``c^k`` (share of
a core available) and ``m^k`` (fraction of memory used), and predicts ``v^k``.

- :class:`Memoryless`: ``v̂^k = v^{k−1}``.
- :class:`EMA`: ``v̂^k = α·v^{k−1} + (1 − α)·v̂^{k−1}`` with ``α = 0.2``.
- :class:`NARX`: ``v^k = F(v^{k−1}, v^{k−2}, c^k, c^{k−1}, c^{k−2}, m^k, m^{k−1}, m^{k−2})``
  (paper eq. 4, look-back 2), ``F`` a one-hidden-layer network trained online
  with Adam; EMA answers until ``warmup`` training samples have been seen.

Examples
--------
>>> import numpy as np
>>> p = make_predictor("ema", 2)
>>> p.step(np.array([10.0, 20.0]), np.ones(2), np.zeros(2))
array([10., 20.])
>>> p.step(np.array([20.0, 20.0]), np.ones(2), np.zeros(2))
array([12., 20.])
"""
from __future__ import annotations

import numpy as np

from dlsched.errors import DlschedError

PREDICTORS = ("memoryless", "ema", "narx")


class Memoryless:
    """The last measured speed (a worker that processed nothing keeps its previous prediction)."""

    name = "memoryless"

    def __init__(self, workers: int):
        self.n = workers
        self.last = np.full(workers, np.nan)

    def step(self, speeds, cpu, mem) -> np.ndarray:
        """Record ``v^{k−1}`` (NaN: unmeasured), return ``v̂^k`` (NaN until a worker has been measured once)."""
        speeds = np.asarray(speeds, dtype=float)
        seen = np.isfinite(speeds) & (speeds > 0)
        self.last = np.where(seen, speeds, self.last)
        return self.last.copy()


class EMA(Memoryless):
    """``v̂^k = α·v^{k−1} + (1 − α)·v̂^{k−1}``, started at the first measurement."""

    name = "ema"

    def __init__(self, workers: int, alpha: float = 0.2):
        super().__init__(workers)
        if not 0 < alpha <= 1:
            raise DlschedError(f"the EMA smoothing factor must be in (0, 1], got {alpha}")
        self.alpha = alpha

    def step(self, speeds, cpu, mem) -> np.ndarray:
        speeds = np.asarray(speeds, dtype=float)
        seen = np.isfinite(speeds) & (speeds > 0)
        first = seen & ~np.isfinite(self.last)
        blend = self.alpha * speeds + (1 - self.alpha) * self.last
        self.last = np.where(first, speeds, np.where(seen, blend, self.last))
        return self.last.copy()


class NARX:
    """One-hidden-layer NARX network, look-back 2, shared by all workers (model reuse, paper §4).

    The network works on logarithms so one model fits workers of any base
    speed: its inputs are ``log v^{k−2} − log v^{k−1}``, ``log c^k``,
    ``log c^{k−1}``, ``log c^{k−2}``, ``m^k``, ``m^{k−1}``, ``m^{k−2}`` and
    its output is ``log v^k − log v^{k−1}``. Each boundary adds one training
    sample per measured worker to a bounded buffer and takes ``steps`` Adam
    steps on random mini-batches of it. Until ``warmup`` samples exist (or
    when a worker lacks two past speeds) the EMA's prediction stands in
    (the paper uses EMA for its first 500 iterations).

    ``shared=False`` keeps one network per worker instead (the paper's
    Algorithm 1 as written).
    """

    name = "narx"

    def __init__(self, workers: int, *, hidden: int = 16, warmup: int = 500, steps: int = 2, batch: int = 128,
                 lr: float = 3e-3, buffer: int = 20000, shared: bool = True, seed: int = 0):
        self.n, self.hidden, self.warmup, self.steps, self.batch = workers, hidden, warmup, steps, batch
        self.lr, self.cap, self.shared = lr, buffer, shared
        self.rng = np.random.default_rng(seed)
        self.ema = EMA(workers)
        self.v = np.full((2, workers), np.nan)     # v^{k−1}, v^{k−2}
        self.c = np.full((3, workers), np.nan)     # c^k, c^{k−1}, c^{k−2} (index 0 is refreshed each step)
        self.m = np.full((3, workers), np.nan)
        self.pending = np.full((workers, 7), np.nan)  # inputs used for the last prediction, waiting for its target
        models = 1 if shared else workers
        self.nets = [self._init_net() for _ in range(models)]
        # per model: a ring buffer of (inputs, target) rows and how many were ever added
        self.data = [(np.empty((buffer, 7)), np.empty(buffer), [0]) for _ in range(models)]

    # -- the network -------------------------------------------------------------------------------------------
    def _init_net(self):
        d, h = 7, self.hidden
        net = {"W1": self.rng.normal(0, 1 / np.sqrt(d), (d, h)), "b1": np.zeros(h),
               "W2": self.rng.normal(0, 1 / np.sqrt(h), (h, 1)) * 0.1, "b2": np.zeros(1), "t": 0}
        net["m"] = {k: np.zeros_like(v) for k, v in net.items() if k != "t"}
        net["s"] = {k: np.zeros_like(v) for k, v in net.items() if k not in ("t", "m")}
        return net

    @staticmethod
    def _forward(net, x):
        hid = np.tanh(x @ net["W1"] + net["b1"])
        return (hid @ net["W2"] + net["b2"])[:, 0], hid

    def _train(self, net, X, y):
        """``steps`` Adam steps on the mean squared error of the log-speed change."""
        for _ in range(self.steps):
            idx = self.rng.integers(0, len(X), min(self.batch, len(X)))
            x, t = X[idx], y[idx]
            out, hid = self._forward(net, x)
            g = 2 * (out - t)[:, None] / len(x)
            grads = {"W2": hid.T @ g, "b2": g.sum(0)}
            gh = (g @ net["W2"].T) * (1 - hid ** 2)
            grads["W1"], grads["b1"] = x.T @ gh, gh.sum(0)
            net["t"] += 1
            for k, gk in grads.items():
                net["m"][k] = 0.9 * net["m"][k] + 0.1 * gk
                net["s"][k] = 0.999 * net["s"][k] + 0.001 * gk ** 2
                mh, sh = net["m"][k] / (1 - 0.9 ** net["t"]), net["s"][k] / (1 - 0.999 ** net["t"])
                net[k] -= self.lr * mh / (np.sqrt(sh) + 1e-8)

    def _model(self, i):
        return 0 if self.shared else i

    # -- one boundary --------------------------------------------------------------------------------------------
    def step(self, speeds, cpu, mem) -> np.ndarray:
        speeds = np.asarray(speeds, dtype=float)
        seen = np.isfinite(speeds) & (speeds > 0)
        fallback = self.ema.step(speeds, cpu, mem)
        # the prediction made at the last boundary now has its target
        for i in np.flatnonzero(seen & np.isfinite(self.pending).all(1)):
            X, y, count = self.data[self._model(i)]
            X[count[0] % self.cap] = self.pending[i]
            y[count[0] % self.cap] = np.log(speeds[i]) - np.log(self.v[0, i])
            count[0] += 1
        for mi, (X, y, count) in enumerate(self.data):
            if count[0] >= min(self.batch, self.warmup):
                self._train(self.nets[mi], X[:min(count[0], self.cap)], y[:min(count[0], self.cap)])
        self.v = np.vstack([np.where(seen, speeds, np.nan), self.v[:1]])
        self.c = np.vstack([np.clip(np.asarray(cpu, dtype=float), 1e-3, None), self.c[:2]])
        self.m = np.vstack([np.asarray(mem, dtype=float), self.m[:2]])
        x = np.column_stack([np.log(self.v[1]) - np.log(self.v[0]), np.log(self.c[0]), np.log(self.c[1]),
                             np.log(self.c[2]), self.m[0], self.m[1], self.m[2]])
        self.pending = x
        out = fallback.copy()
        for i in np.flatnonzero(np.isfinite(x).all(1)):
            mi = self._model(i)
            if self.data[mi][2][0] >= self.warmup:
                change = float(self._forward(self.nets[mi], x[i:i + 1])[0][0])
                out[i] = self.v[0, i] * np.exp(np.clip(change, -3, 3))
        return out


def make_predictor(name: str, workers: int, seed: int = 0, **options):
    """A speed predictor by name (``memoryless``, ``ema``, ``narx``).

    Raises
    ------
    DlschedError
        An unknown name.
    """
    if name == "memoryless":
        return Memoryless(workers)
    if name == "ema":
        return EMA(workers, **options)
    if name == "narx":
        return NARX(workers, seed=seed, **options)
    raise DlschedError(f"unknown speed predictor {name!r}; choose one of {', '.join(PREDICTORS)}")
