"""Parameter-server training of the example small CNN with enforced transfer order.

Launches a local cluster (2 servers, 2 workers by default, gloo over loopback)
and trains for a few iterations, sending each worker its parameters in priority
order. Bad settings or a priority file made for another graph exit with code 2
and one message before any process starts; SIGTERM or Ctrl-C ends every rank
(exit 143 / 130).

    python examples/ps_train_torch.py                       # order = model's own graph order
    python examples/ps_train_torch.py --priorities tac.json # a file from `dlsched order`

Without ``--priorities`` the priority file is TIC (timing-independent, no oracle
needed) over the torch importer's graph (``dlsched.importers.loader.load_model``), or,
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


def default_priority_file(servers: int):
    from dlsched.formats.priority_file import PriorityFile, Transfer, make_priority_file
    try:
        from dlsched.analyses.tic import tic_order
        from dlsched.importers.loader import load_model
        graph = load_model(MODEL, mode="training", ps=servers)
        return make_priority_file(graph, tic_order(graph), "tic")
    except ImportError:  # importer or TIC not available: parameter names in declaration order
        from dlsched.hooks.torch_ps import order_from_module
        names = order_from_module(MODEL)
        return PriorityFile("declaration", [Transfer(n, i, 0, i % servers) for i, n in enumerate(names)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--priorities", help="priority file (json or tictac)")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60, help="seconds any one transfer may take")
    ap.add_argument("--unordered", action="store_true", help="random order per worker and iteration")
    ap.add_argument("--keep", action="store_true", help="keep the job directory (configuration, logs, results)")
    a = ap.parse_args()
    priorities = os.path.abspath(a.priorities) if a.priorities else None  # relative to the caller's folder
    os.chdir(REPO)
    from dlsched.errors import DlschedError
    from dlsched.formats.priority_file import read_priority_file
    from dlsched.hooks.torch_ps import check_settings, config_from_priority_file, launch_local
    settings = dict(servers=a.servers, workers=a.workers, iterations=a.iterations, batch=8, window=a.window,
                    unordered=a.unordered, timeout=a.timeout)
    try:
        check_settings(**settings)  # before the model is imported: a bad number costs nothing
        pf = read_priority_file(priorities) if priorities else default_priority_file(a.servers)
        # given the path, the checks name the file in their messages
        cfg = config_from_priority_file(MODEL, priorities or pf, **settings)
        run = launch_local(cfg, keep=a.keep)
    except DlschedError as e:
        print(f"dlsched: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the ranks are already dead (launch_local killed them)
        print("dlsched: interrupted", file=sys.stderr)
        return 130
    rec = run.timeline.get(0, a.iterations - 1)
    print(f"priority file: {pf.algorithm}, {len(pf.transfers)} transfers")
    print(f"trained {len(run.params)} parameters for {a.iterations} iterations on "
          f"{a.servers} servers / {a.workers} workers")
    print("worker 0, last iteration, arrival order:", ", ".join(rec.arrival_order()))
    for it in run.timeline.iteration_spans():
        print(f"iteration {it['iteration']}: {1e3 * (it['end'] - it['start']):.1f} ms")
    if run.workdir:
        print(f"job directory kept: {run.workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
