"""Co-runners: load the machine as a cluster's other workers do while one worker's compute is profiled.

On a machine with few cores a cluster's ranks share the CPU, so a profile
taken alone is too fast (``dlsched validate``, DESIGN §4.7). A co-runner is
this module run as ``python -m dlsched.jobs.co_runner SPEC``; it imports only
the model's framework, so it is computing within a second.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

#: the module a co-runner runs (``python -m CO_RUNNER SPEC``): this one
CO_RUNNER = "dlsched.jobs.co_runner"


@contextlib.contextmanager
def cluster_load(model: str, mode: str, batch: int, threads: int, workers: int):
    """Load the machine as the cluster's other workers do, while compute is profiled or timed.

    On a machine with few cores the cluster's ranks share the CPU: ``W``
    workers compute at once, so a profile taken alone is too fast. This runs
    ``W − 1`` co-runners computing the model's step in a loop (``threads`` each).
    """
    procs = []
    try:
        spec = json.dumps({"model": model, "mode": mode, "batch": batch, "threads": threads})
        for _ in range(workers - 1):
            procs.append(subprocess.Popen([sys.executable, "-m", CO_RUNNER, spec],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          env=dict(os.environ, OMP_NUM_THREADS=str(threads))))
        time.sleep(1.0)  # the co-runners are past their imports
        yield
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)


def _co_run(spec_json: str) -> int:
    """A co-runner of :func:`cluster_load`: the model's step in a loop until killed."""
    import torch

    from dlsched.factory import call_factory, training_loss
    spec = json.loads(spec_json)
    torch.set_num_threads(spec["threads"])
    module, inputs, _ = call_factory(spec["model"], batch=spec["batch"])
    while True:
        if spec["mode"] == "training":
            module.train()
            training_loss(module(*inputs)).backward()
        else:
            with torch.no_grad():
                module(*inputs)


if __name__ == "__main__":
    sys.exit(_co_run(sys.argv[1]))
