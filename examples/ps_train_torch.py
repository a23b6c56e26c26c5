"""Parameter-server training of the example small CNN with enforced transfer order.

Launches a local cluster (2 servers, 2 workers, gloo over loopback) and trains
for a few iterations, sending each worker its parameters in priority order.

    python examples/ps_train_torch.py                       # order = model's own graph order
    python examples/ps_train_torch.py --priorities tac.json # a file from `dlsched order`

Without ``--priorities`` the priority file is TIC (timing-independent, no oracle
needed) over the torch importer's graph (``dlsched.loader.load_model``), or,
where the importer or TIC is unavailable, ``named_parameters()`` in
declaration order.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

MODEL = "examples/torch_models.py:small_cnn"


def default_priority_file():
    from dlsched.exporters.priority_file import PriorityFile, Transfer, make_priority_file
    try:
        from dlsched.analyses.tic import tic_order
        from dlsched.loader import load_model
        graph = load_model(MODEL, mode="training", ps=2)
        return make_priority_file(graph, tic_order(graph), "tic")
    except ImportError:  # importer or TIC not available: parameter names in declaration order
        from dlsched.hooks.torch_ps import order_from_module
        names = order_from_module(MODEL)
        return PriorityFile("declaration", [Transfer(n, i, 0, i % 2) for i, n in enumerate(names)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--priorities", help="priority file (json or tictac)")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--unordered", action="store_true", help="random order per worker and iteration")
    a = ap.parse_args()
    os.chdir(REPO)
    from dlsched.errors import DlschedError
    from dlsched.exporters.priority_file import read_priority_file
    from dlsched.hooks.torch_ps import config_from_priority_file, launch_local
    try:
        pf = read_priority_file(a.priorities) if a.priorities else default_priority_file()
        cfg = config_from_priority_file(MODEL, pf, servers=2, workers=2, iterations=a.iterations, batch=8,
                                        window=a.window, unordered=a.unordered, timeout=60)
        run = launch_local(cfg)
    except DlschedError as e:
        print(f"dlsched: error: {e}", file=sys.stderr)
        return 2
    rec = run.timeline.get(0, a.iterations - 1)
    print(f"priority file: {pf.algorithm}, {len(pf.transfers)} transfers")
    print(f"trained {len(run.params)} parameters for {a.iterations} iterations on 2 servers / 2 workers")
    print("worker 0, last iteration, arrival order:", ", ".join(rec.arrival_order()))
    for it in run.timeline.iteration_spans():
        print(f"iteration {it['iteration']}: {1e3 * (it['end'] - it['start']):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
