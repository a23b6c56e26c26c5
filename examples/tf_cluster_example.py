"""TF hook in a real local TensorFlow cluster (DESIGN §6).

Starts a ps task and a worker task as separate processes serving gRPC on free
localhost ports (``tf.distribute.Server``), places the variables of a small MLP
on ``/job:ps/task:0`` and the compute on ``/job:worker/task:0``, enforces the
priority order on the variable reads with :func:`dlsched.hooks.tf_order.order_graph`,
and runs a few SGD steps through a ``tf.compat.v1.Session`` on the worker's target
with a full trace. Prints the observed read order and the losses.

    python examples/tf_cluster_example.py [--order reverse] [--window 1] [--no-hook] [--json]
                                          [--steps N] [--timeout SECONDS]

The server tasks never outlive this launcher (:mod:`dlsched.runtime.lifetime`):
each one watches it (``--parent PID``) and ends as soon as it dies, even by
SIGKILL, and while they run SIGTERM, SIGINT (Ctrl-C) or SIGHUP first kill both
servers, then end the launcher (exit 143 / 130 / 129). ``--timeout`` bounds the
servers' start-up and every session call, so a signal is acted on within it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LAYERS = 5
WIDTH = 256
# Sessions not closed yet. Referenced here so that the unwinding after a signal (which has killed the
# servers) does not close them: closing a session on dead servers blocks for the whole --timeout.
OPEN_SESSIONS: list = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(cluster: dict, job: str, task: int, parent: int | None) -> None:
    if parent is not None:  # before importing TF: a launcher killed during start-up is noticed too
        from dlsched.runtime.lifetime import watch_launcher
        watch_launcher(parent, name=f"the {job} server")
    import tensorflow as tf
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=task, start=True)
    print("ready", flush=True)
    server.join()


def build(tf):
    """Variables on the ps, compute on the worker; returns (loss, train_op, var names)."""
    tf.compat.v1.set_random_seed(0)
    names = []
    with tf.device("/job:ps/task:0"):
        ws = []
        for i in range(LAYERS):
            w = tf.compat.v1.get_variable(f"layer{i}/kernel", [WIDTH, WIDTH],
                                          initializer=tf.compat.v1.glorot_uniform_initializer(seed=i))
            ws.append(w)
            names.append(f"layer{i}/kernel")
    with tf.device("/job:worker/task:0"):
        x = tf.random.stateless_normal([16, WIDTH], seed=[1, 2])
        y = tf.random.stateless_normal([16, WIDTH], seed=[3, 4])
        h = x
        for i, w in enumerate(ws):
            h = tf.matmul(h, w)
            if i < LAYERS - 1:
                h = tf.nn.relu(h)
        loss = tf.reduce_mean((h - y) ** 2)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss)
    return loss, train, names


def client(target: str, order_kind: str, window: int, hook: bool, steps: int, timeout: float) -> dict:
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.disable_resource_variables()
    from dlsched.hooks.tf_order import order_graph
    graph = tf.Graph()
    with graph.as_default():
        loss, train, names = build(tf)
        order = names if order_kind == "forward" else names[::-1]
        edges = order_graph(graph, order, window) if hook else []
        init = tf.compat.v1.global_variables_initializer()
    opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    losses, read_orders = [], []
    # every call is bounded: the launcher's signal handlers run only between calls. No `with`: after
    # a signal main() ends the process without closing the session (see OPEN_SESSIONS)
    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=int(timeout * 1000))
    sess = tf.compat.v1.Session(target, graph=graph, config=config)
    OPEN_SESSIONS.append(sess)
    sess.run(init)
    for _ in range(steps):
        md = tf.compat.v1.RunMetadata()
        lv, _ = sess.run([loss, train], options=opts, run_metadata=md)
        losses.append(float(lv))
        starts = {}
        for dev in md.step_stats.dev_stats:
            for ns in dev.node_stats:
                if ns.node_name.endswith("/read") and ns.node_name[:-5] in names:
                    starts[ns.node_name[:-5]] = (ns.all_start_micros, ns.all_start_micros + ns.all_end_rel_micros)
        read_orders.append(sorted(starts, key=lambda n: starts[n]))
        spans = starts
    final = {n: sess.run(graph.get_tensor_by_name(n + ":0")).tolist() for n in names}
    sess.close()
    OPEN_SESSIONS.remove(sess)
    return {"order": order, "window": window, "hook": hook, "edges": len(edges), "losses": losses,
            "read_orders": read_orders, "last_spans": spans, "final": final}


def wait_ready(procs: list, timeout: float) -> bool:
    """Whether every server printed "ready" within ``timeout`` seconds (a server that died did not)."""
    deadline = time.monotonic() + timeout
    for p in procs:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
                return False
            line = p.stdout.readline()
            if not line:  # it exited
                return False
            if line.strip() == "ready":
                break
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", nargs=3, metavar=("CLUSTER_JSON", "JOB", "TASK"), help=argparse.SUPPRESS)
    ap.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # a server: the launcher's pid
    ap.add_argument("--order", choices=["forward", "reverse"], default="forward")
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--no-hook", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds the servers may take to start, and any one session call (default 120)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--compare", action="store_true",
                    help="run unhooked, hooked forward and hooked reverse on the same cluster")
    a = ap.parse_args()
    if a.serve:
        serve(json.loads(a.serve[0]), a.serve[1], int(a.serve[2]), a.parent)
        return 0
    if not (a.timeout > 0 and math.isfinite(a.timeout)) or a.steps < 1:
        print("dlsched: error: --timeout must be a finite number of seconds above 0, and --steps at least 1",
              file=sys.stderr)
        return 2
    from dlsched.runtime.lifetime import children_die_with_launcher, end_children
    cluster = {"ps": [f"localhost:{free_port()}"], "worker": [f"localhost:{free_port()}"]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    procs: list[subprocess.Popen] = []
    ended_by = None  # the exit code when a signal ends the run
    # from the first server on, SIGTERM / SIGINT / SIGHUP kill both servers before ending this process
    with children_die_with_launcher(procs):
        try:
            for job in ("ps", "worker"):
                # own session: a terminal's Ctrl-C reaches the launcher only, which then kills the servers
                cmd = [sys.executable, __file__, "--serve", json.dumps(cluster), job, "0", "--parent", str(os.getpid())]
                procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                              text=True, start_new_session=True))
            if not wait_ready(procs, a.timeout):
                print(f"dlsched: error: a TF server task did not start within {a.timeout:g} s", file=sys.stderr)
                return 2
            target = "grpc://" + cluster["worker"][0]
            if a.compare:
                runs = [client(target, "forward", a.window, False, a.steps, a.timeout),
                        client(target, "forward", a.window, True, a.steps, a.timeout),
                        client(target, "reverse", a.window, True, a.steps, a.timeout)]
            else:
                runs = [client(target, a.order, a.window, not a.no_hook, a.steps, a.timeout)]
        except KeyboardInterrupt:  # SIGINT; the servers are already dead (the handler killed them)
            print("dlsched: interrupted", file=sys.stderr)
            ended_by = 130
        except SystemExit as e:  # SIGTERM or SIGHUP, likewise
            ended_by = e.code if isinstance(e.code, int) else 1
        finally:
            end_children(procs)
    if ended_by is not None:  # skip closing OPEN_SESSIONS on dead servers
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(ended_by)
    for res in runs:
        print(f"hook={'on' if res['hook'] else 'off'} order={res['order'][0]}… window={a.window} "
              f"control edges added: {res['edges']}")
        for i, (lv, ro) in enumerate(zip(res["losses"], res["read_orders"])):
            print(f"  step {i}: loss {lv:.6f}; reads on the ps in order: {', '.join(ro)}")
    if a.json:
        Path(a.json).write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
