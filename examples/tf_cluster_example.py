"""TF hook in a real local TensorFlow cluster (DESIGN §6).

Starts a ps task and a worker task as separate processes serving gRPC on free
localhost ports (``tf.distribute.Server``), places the variables of a small MLP
on ``/job:ps/task:0`` and the compute on ``/job:worker/task:0``, enforces the
priority order on the variable reads with :func:`dlsched.hooks.tf_order.order_graph`,
and runs a few SGD steps through a ``tf.compat.v1.Session`` on the worker's target
with a full trace. Prints the observed read order and the losses.

    python examples/tf_cluster_example.py [--order reverse] [--window 1] [--no-hook] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(cluster: dict, job: str, task: int) -> None:
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


def client(target: str, order_kind: str, window: int, hook: bool, steps: int) -> dict:
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
    with tf.compat.v1.Session(target, graph=graph) as sess:
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
    return {"order": order, "window": window, "hook": hook, "edges": len(edges), "losses": losses,
            "read_orders": read_orders, "last_spans": spans, "final": final}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", nargs=3, metavar=("CLUSTER_JSON", "JOB", "TASK"), help=argparse.SUPPRESS)
    ap.add_argument("--order", choices=["forward", "reverse"], default="forward")
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--no-hook", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--compare", action="store_true",
                    help="run unhooked, hooked forward and hooked reverse on the same cluster")
    a = ap.parse_args()
    if a.serve:
        serve(json.loads(a.serve[0]), a.serve[1], int(a.serve[2]))
        return 0
    cluster = {"ps": [f"localhost:{free_port()}"], "worker": [f"localhost:{free_port()}"]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    procs = [subprocess.Popen([sys.executable, __file__, "--serve", json.dumps(cluster), job, "0"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for job in ("ps", "worker")]
    try:
        deadline = time.monotonic() + 120
        for p in procs:  # wait for "ready"
            line = p.stdout.readline()
            if "ready" not in line or time.monotonic() > deadline:
                print("dlsched: error: a TF server task did not start", file=sys.stderr)
                return 2
        target = "grpc://" + cluster["worker"][0]
        if a.compare:
            runs = [client(target, "forward", a.window, False, a.steps),
                    client(target, "forward", a.window, True, a.steps),
                    client(target, "reverse", a.window, True, a.steps)]
        else:
            runs = [client(target, a.order, a.window, not a.no_hook, a.steps)]
    finally:
        for p in procs:
            p.kill()
            p.wait()
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
