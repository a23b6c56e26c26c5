"""Random DAGs with the shape of real training graphs, for tests and benchmarks.

Layered like a network: parameters feed compute ops, compute ops form a chain
with random skip edges, and in training mode a mirrored backward pass ends in
one gradient send per parameter.
"""
from __future__ import annotations

import random

from .dag import COMPUTE, RECV, Graph, add_gradient_sends


def random_dag(n_compute: int, n_params: int, training: bool = False, ps: int = 1, seed: int = 0,
               skip_prob: float = 0.2, share_prob: float = 0.1, integer_times: bool = False):
    """Build a random model DAG and a time oracle for it.

    Parameters
    ----------
    n_compute : int
        Forward compute ops (training doubles them with backward ops).
    n_params : int
        Parameters (recv ops); each feeds one forward op, a few feed two.
    training : bool
        Add a backward pass and one gradient send per parameter.
    ps : int
        Parameter servers (round-robin).
    seed : int
    skip_prob, share_prob : float
        Chance of an extra (skip) dependency per op, and of a parameter being
        shared by a second op.
    integer_times : bool
        Draw small integer times (exercises ties), else floats.

    Returns
    -------
    (Graph, dict)
        The graph and ``{op name: seconds}`` for every op.

    Examples
    --------
    >>> g, t = random_dag(20, 5, training=True, seed=1)
    >>> len(g.recvs()), len(g.sends()), len(t) == len(g)
    (5, 5, True)
    """
    rng = random.Random(seed)
    n_compute = max(n_compute, 1)
    g = Graph(f"random-{n_compute}-{n_params}-{seed}", "training" if training else "inference",
              {"format": "synthetic", "seed": seed})
    draw = (lambda lo, hi: float(rng.randint(lo, hi))) if integer_times else (lambda lo, hi: rng.uniform(lo, hi))
    times: dict[str, float] = {}
    for p in range(n_params):
        size = rng.choice([1, 4, 16, 64, 256]) * 1024
        op = g.add_op(f"p{p}", RECV, bytes=size * 4, params=size, shape=[size], dtypes=["float32"])
        times[op.name] = draw(1, 10) * 1e-3
    fwd = []
    for i in range(n_compute):
        op = g.add_op(f"f{i}", COMPUTE, op_type="Fwd", output_shapes=[[8, 16]], dtypes=["float32"])
        times[op.name] = draw(1, 10) * 1e-3
        if fwd:
            g.add_edge(fwd[-1], op.name)
            if len(fwd) > 1 and rng.random() < skip_prob:
                g.add_edge(rng.choice(fwd[:-1]), op.name)
        fwd.append(op.name)
    # Spread parameters over the forward ops in order, like layers.
    users: dict[str, list[str]] = {}
    for p in range(n_params):
        at = min(n_compute - 1, p * n_compute // max(n_params, 1) + rng.randint(0, max(0, n_compute // max(n_params, 1) - 1)))
        users[f"p{p}"] = [fwd[at]]
        if rng.random() < share_prob:
            users[f"p{p}"].append(fwd[rng.randrange(n_compute)])
        for u in users[f"p{p}"]:
            g.add_edge(f"p{p}", u)
    if training:
        bwd = {}
        for name in reversed(fwd):
            op = g.add_op(f"{name}/bwd", COMPUTE, op_type="Bwd", phase="backward")
            times[op.name] = times[name] * 2
            bwd[name] = op.name
            g.add_edge(name, op.name)
        for u, v in list(g.nx.edges()):
            if u in bwd and v in bwd:
                g.add_edge(bwd[v], bwd[u])
        producers = {}
        for p, us in users.items():
            if len(us) == 1:
                producers[p] = bwd[us[0]]
            else:
                acc = g.add_op(f"{p}/accum", COMPUTE, op_type="AddN", phase="backward")
                times[acc.name] = draw(1, 3) * 1e-4
                for u in us:
                    g.add_edge(bwd[u], acc.name)
                producers[p] = acc.name
        add_gradient_sends(g, producers)
        for s in g.sends():
            times[s.name] = times[s.param]
    g.assign_ps(ps)
    g.validate()
    return g, times
