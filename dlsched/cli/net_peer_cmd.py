"""``dlsched net-peer``: the far end of ``dlsched profile --measure-network --peer HOST:PORT``."""
from __future__ import annotations

import click

from dlsched.answers import net_peer as answer

from .common import FiniteFloat, gather


@click.command("net-peer")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (use the address the profiling host can reach).")
@click.option("--port", type=click.IntRange(0, 65535), default=29555, show_default=True,
              help="TCP port to listen on; 0 picks a free one and announces it.")
@click.option("--sessions", type=click.IntRange(min=0), default=0, show_default=True,
              help="Serve this many measurements, then exit; 0 serves until interrupted.")
@click.option("--timeout", type=FiniteFloat(min=0.1), default=60.0, show_default=True,
              help="Seconds any wait inside a measurement may take before it is abandoned.")
@gather("listen", answer.Listen, ("host", "port", "sessions", "timeout"))
def net_peer(listen):
    """Serve network measurements over torch.distributed (gloo).

    Start this on the machine at the other end of the link, then run
    ``dlsched profile MODEL --measure-network --peer HOST:PORT`` on the
    profiling machine. The peer hosts a TCPStore on HOST:PORT; the profiler
    joins as rank 1, sends tensors of a few sizes and times the round trips
    (protocol: dlsched.profiling.network). Prints one line
    ``dlsched net-peer listening on HOST:PORT`` when ready.
    """
    answer.net_peer(listen, announce=click.echo)
