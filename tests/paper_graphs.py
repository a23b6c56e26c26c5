"""Graphs from the TicTac paper, shared by the bounds, order and simulator tests."""
from __future__ import annotations

from dlsched.dag import COMPUTE, RECV, Graph


def figure1():
    """TicTac Figure 1(a): recv1 → op1; recv1, recv2 → op2; unit times, one channel.

    Returns the graph and its oracle.
    """
    g = Graph("fig1")
    for n in ("recv1", "recv2"):
        g.add_op(n, RECV)
    for n in ("op1", "op2"):
        g.add_op(n, COMPUTE)
    for u, v in [("recv1", "op1"), ("recv1", "op2"), ("recv2", "op2")]:
        g.add_edge(u, v)
    return g, dict.fromkeys(["recv1", "recv2", "op1", "op2"], 1.0)
