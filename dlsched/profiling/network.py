"""The network model for transfers, and a real measurement of it (DESIGN §3).

Every recv/send op costs ``latency + bytes / bandwidth`` on its link (TicTac
§3: a transfer is an op on the channel resource). Bandwidth and latency come
from the user (``--bandwidth 10Gbps --latency 50us`` are the defaults), or
from a real measurement between two processes over ``torch.distributed``.

Measurement protocol (gloo over TCP)
------------------------------------
The *peer* (``dlsched net-peer --port PORT``) is rank 0: it hosts a
``TCPStore`` on ``HOST:PORT`` and prints ``dlsched net-peer listening on
HOST:PORT`` once it listens. The *client* (``dlsched profile
--measure-network``) checks with a plain TCP connect that something listens
(so a dead peer fails in seconds), joins as rank 1 and writes the plan
``{"sizes": [...], "repeats": n}`` (JSON) under the store key
``dlsched/plan``. For every size and repeat the client sends a ``uint8``
tensor of that many bytes to rank 0 and waits for a 1-byte acknowledgement;
the client times that round trip. The minimum over repeats per size is fitted
by least squares to ``t = a + bytes / bandwidth``; ``a`` covers the data's
and the acknowledgement's latency, so the one-way ``latency = a / 2``.
Every wait is bounded: each transfer by ``timeout`` (the process group's
timeout), and the client side runs in a child process
(``python -m dlsched.profiling.network PLAN``) that the caller kills when a
deadline passes, since a store handshake with a peer that accepts the
connection but never answers has no timeout of its own.

Without ``--peer``, ``--measure-network`` starts a peer itself on
``127.0.0.1`` with a free port (``net-peer --port 0 --sessions 1``), so the
transfer crosses two processes through the loopback interface.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

import pandas as pd

from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .schema import oracle_frame, oracle_row

DEFAULT_BANDWIDTH = "10Gbps"
DEFAULT_LATENCY = "50us"
DEFAULT_SIZES = (4 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20)
PLAN_KEY = "dlsched/plan"
READY_LINE = "dlsched net-peer listening on"


class NetworkError(DlschedError):
    """A network peer is unreachable, died, or the measurement is unusable."""


def parse_peer(peer: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → ``(host, port)``.

    Examples
    --------
    >>> parse_peer("127.0.0.1:29555"), parse_peer("[::1]:80")
    (('127.0.0.1', 29555), ('::1', 80))
    """
    host, _, port = peer.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DlschedError(f"--peer {peer!r}: expected HOST:PORT, e.g. 127.0.0.1:29555")
    return host.strip("[]"), int(port)


def transfer_time(nbytes: float, bandwidth: float, latency: float) -> float:
    """Time of one transfer: ``latency + bytes / bandwidth``.

    Parameters
    ----------
    nbytes : float
        Bytes moved.
    bandwidth : float
        Bytes per second (> 0).
    latency : float
        Seconds (≥ 0).

    Examples
    --------
    >>> transfer_time(1_250_000, 1.25e9, 50e-6)
    0.00105
    """
    return latency + nbytes / bandwidth


def transfer_rows(graph: Graph, bandwidth: float, latency: float, source: str = "network-model") -> pd.DataFrame:
    """One oracle row per recv/send op of ``graph`` under the network model.

    Returns
    -------
    DataFrame
        Columns ``op, time, runs, median, op_type, resource, source, bytes``;
        ``runs`` is 0 (the time is modelled, not measured per op).

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, _ = random_dag(4, 2)
    >>> transfer_rows(g, 1e9, 0.0)["source"].unique().tolist()
    ['network-model']
    """
    rows = []
    for op in graph.ops():
        if op.kind == "compute":
            continue
        t = transfer_time(op.bytes, bandwidth, latency)
        rows.append(oracle_row(op, t, runs=0, source=source, bytes=int(op.bytes)))
    return oracle_frame(rows, extra=["bytes"])


def fit_link(sizes, times) -> tuple[float, float]:
    """Weighted least-squares fit (relative errors) of ``t = a + bytes · b``; returns ``(bandwidth = 1/b, a)``.

    A negative intercept (noise) is clamped to 0 and the slope refitted
    through the origin.

    Raises
    ------
    NetworkError
        Fewer than two distinct sizes, or a non-positive slope (time does not
        grow with size, so no bandwidth can be derived).

    Examples
    --------
    >>> bw, a = fit_link([1e3, 1e6, 1e7], [1e-4 + 1e3 / 1e9, 1e-4 + 1e6 / 1e9, 1e-4 + 1e7 / 1e9])
    >>> round(bw / 1e9, 6), round(a * 1e6, 3)
    (1.0, 100.0)
    """
    xs, ys = [float(x) for x in sizes], [float(y) for y in times]
    if len(set(xs)) < 2:
        raise NetworkError("the network measurement needs at least two distinct transfer sizes")
    # Relative-error weights: sizes span four orders of magnitude, and a plain
    # fit would let the largest transfer decide the latency too.
    ws = [1.0 / (y * y) if y > 0 else 1.0 for y in ys]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    slope = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
    intercept = my - slope * mx
    if intercept < 0:
        intercept = 0.0
        slope = sum(w * x * y for w, x, y in zip(ws, xs, ys)) / sum(w * x * x for w, x in zip(ws, xs))
    if not (slope > 0 and math.isfinite(slope)):
        raise NetworkError(
            f"the network measurement is inconsistent: transfer time does not grow with size "
            f"(sizes {[int(x) for x in xs]}, minimum times {[f'{y:.3g}' for y in ys]}); "
            "retry on a quieter machine or pass --bandwidth/--latency")
    return 1.0 / slope, intercept


@dataclass
class LinkMeasurement:
    """A measured link: bandwidth (bytes/s), one-way latency (s) and the raw minima."""

    bandwidth: float
    latency: float
    peer: str
    sizes: list = field(default_factory=list)
    min_times: list = field(default_factory=list)
    repeats: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


# -- shared gloo plumbing ------------------------------------------------------
def _timedelta(seconds: float):
    import datetime

    return datetime.timedelta(seconds=seconds)


def _gloo_env(host: str) -> None:
    # gloo picks its interface from the host name; on loopback say so explicitly.
    if host in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def _init_group(store, rank: int, timeout: float):
    from torch.distributed import PrefixStore, ProcessGroupGloo

    # A private group, not the default one, so this never disturbs a user's process group.
    return ProcessGroupGloo(PrefixStore("dlsched/gloo", store), rank, 2, _timedelta(timeout))


# -- the peer -------------------------------------------------------------------
def _check_bindable(host: str, port: int) -> None:
    """Fail fast, in one line, on an address this machine cannot listen on.

    TCPStore would otherwise retry as a client until its timeout and print
    pages of C++ warnings and stack frames.
    """
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise NetworkError(f"net-peer cannot listen on {host}:{port}: the host name does not resolve ({e.strerror})"
                           ) from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise NetworkError(f"net-peer cannot listen on {host}:{port}: {e.strerror}; give --host an address of "
                               "this machine (127.0.0.1, or the interface the profiling host reaches)") from None


def serve_peer(host: str = "127.0.0.1", port: int = 0, sessions: int = 0, timeout: float = 60.0,
               announce=print) -> int:
    """Serve network measurements as rank 0 (``dlsched net-peer``).

    Parameters
    ----------
    host, port : str, int
        Where to listen; port 0 picks a free one (announced).
    sessions : int
        Serve this many measurements then return; 0 serves forever.
    timeout : float
        Seconds any wait of a session may take.
    announce : callable
        Receives the ``dlsched net-peer listening on HOST:PORT`` line.

    Returns
    -------
    int
        The number of sessions served.

    Raises
    ------
    NetworkError
        The port cannot be bound.
    """
    _check_bindable(host, port)
    import torch
    import torch.distributed as dist

    _gloo_env(host)
    served = 0
    while sessions <= 0 or served < sessions:
        try:
            store = dist.TCPStore(host, port, 2, True, timeout=_timedelta(timeout), wait_for_workers=False)
        except Exception as e:  # torch raises RuntimeError/DistNetworkError with OS details
            raise NetworkError(f"net-peer cannot listen on {host}:{port}: {e}") from None
        port = store.port
        announce(f"{READY_LINE} {host}:{port}")
        try:
            # Wait for a client without a deadline between sessions: poll the plan key.
            while True:
                try:
                    store.wait([PLAN_KEY], _timedelta(timeout))
                    break
                except Exception:
                    continue
            plan = json.loads(store.get(PLAN_KEY).decode())
            pg = _init_group(store, 0, timeout)
            ack = torch.zeros(1, dtype=torch.uint8)
            for size in plan["sizes"]:
                buf = torch.empty(int(size), dtype=torch.uint8)
                for _ in range(int(plan["repeats"]) + 1):  # +1: the client's warm-up transfer
                    pg.recv([buf], 1, 0).wait()
                    pg.send([ack], 1, 0).wait()
            pg.recv([ack], 1, 1).wait()  # the client's goodbye: it has stopped timing
            del pg
        except Exception as e:
            announce(f"dlsched net-peer: session aborted ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        finally:
            del store
        served += 1
    return served


# -- the client -----------------------------------------------------------------
def _check_reachable(host: str, port: int, timeout: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise NetworkError(
            f"cannot reach the network peer at {host}:{port} ({e.strerror or e}); start one there with "
            f"'dlsched net-peer --port {port}', or drop --peer to measure between two local processes") from None


def _client_transfers(host: str, port: int, sizes, repeats: int, timeout: float, connect_timeout: float,
                      say=print) -> list[float]:
    """The client's side of the protocol, in this process: the minimum round trip per size.

    ``say`` receives ``connected`` once the store handshake is done.
    """
    import torch
    import torch.distributed as dist

    _gloo_env(host)
    store = dist.TCPStore(host, port, 2, False, timeout=_timedelta(connect_timeout))
    say("connected")
    store.set(PLAN_KEY, json.dumps({"sizes": [int(s) for s in sizes], "repeats": int(repeats)}))
    pg = _init_group(store, 1, timeout)
    ack = torch.zeros(1, dtype=torch.uint8)
    minima = []
    for size in sizes:
        buf = torch.ones(int(size), dtype=torch.uint8)
        best = math.inf
        for r in range(repeats + 1):
            t0 = time.perf_counter()
            pg.send([buf], 0, 0).wait()
            pg.recv([ack], 0, 0).wait()
            dt = time.perf_counter() - t0
            if r:  # the first transfer of each size warms the pair up
                best = min(best, dt)
        minima.append(best)
    pg.send([ack], 0, 1).wait()
    del pg, store
    return minima


class _Lines:
    """Lines of a child's stdout, each read against a deadline (never blocks past it)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.buf = proc, b""

    def next(self, deadline: float) -> str | None:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(timeout=min(0.5, left)):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self.buf += chunk
        finally:
            sel.close()
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace").strip()


def _read_line(proc: subprocess.Popen, deadline: float) -> str | None:
    """Read one stdout line of ``proc`` before ``deadline`` (monotonic), else None."""
    return _Lines(proc).next(deadline)


def _reap(proc: subprocess.Popen) -> str:
    """Stop our own child if still running; return the last line of its stderr."""
    if proc.poll() is None:
        proc.kill()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        err = b""
    lines = (err or b"").decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def measure_peer(host: str, port: int, sizes=DEFAULT_SIZES, repeats: int = 5, timeout: float = 30.0,
                 connect_timeout: float = 5.0, start_timeout: float = 120.0) -> LinkMeasurement:
    """Measure bandwidth and latency to a running ``dlsched net-peer`` at ``host:port``.

    Sends ``uint8`` tensors of each size ``repeats`` times (after one warm-up)
    over gloo, keeps the minimum round trip per size and fits
    :func:`fit_link` (see the module docstring for the protocol). The gloo
    client runs in a child process supervised against deadlines, because a
    peer that accepts the connection but never answers would block the store
    handshake without limit; the child is killed when a deadline passes.

    Raises
    ------
    NetworkError
        Nothing listens at ``host:port`` (within ``connect_timeout``), the
        peer does not answer (within ``connect_timeout + timeout``), dies or
        stalls (gloo ``timeout`` per transfer), or the fit is unusable.

    Examples
    --------
    >>> m = measure_peer("127.0.0.1", 29555)   # doctest: +SKIP
    """
    if repeats < 1:
        raise NetworkError(f"network measurement repeats must be at least 1, got {repeats}")
    _check_reachable(host, port, connect_timeout)
    where = f"{host}:{port}"
    plan = json.dumps({"host": host, "port": port, "sizes": [int(s) for s in sizes], "repeats": repeats,
                       "timeout": timeout, "connect_timeout": connect_timeout})
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "dlsched.profiling.network", plan], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    lines = _Lines(proc)
    failure = None
    try:
        if lines.next(time.monotonic() + start_timeout) != "ready":
            failure = "the measuring process did not start"
        elif lines.next(time.monotonic() + connect_timeout + timeout) != "connected":
            failure = f"no answer from the peer within {connect_timeout + timeout:.0f} s"
        else:
            # Each transfer is bounded by gloo's timeout; allow every one of them that much.
            line = lines.next(time.monotonic() + timeout * (2 + len(sizes) * (repeats + 1)))
            if line and line.startswith("result "):
                minima = json.loads(line[len("result "):])
            else:
                failure = "the transfer stalled or the peer went away"
    finally:
        err = _reap(proc)
    if failure:
        detail = f" ({err})" if err else ""
        raise NetworkError(f"the network measurement with the peer at {where} failed: {failure}{detail}. "
                           "Is it a dlsched net-peer, and still running?")
    bandwidth, intercept = fit_link(sizes, minima)
    return LinkMeasurement(bandwidth=bandwidth, latency=intercept / 2, peer=where, sizes=[int(s) for s in sizes],
                           min_times=minima, repeats=repeats)


def _client_main(plan_json: str) -> int:
    """Entry point of the measuring child: prints ready, connected, then ``result [minima]``."""
    plan = json.loads(plan_json)
    print("ready", flush=True)
    try:
        minima = _client_transfers(plan["host"], int(plan["port"]), plan["sizes"], int(plan["repeats"]),
                                   float(plan["timeout"]), float(plan["connect_timeout"]),
                                   say=lambda s: print(s, flush=True))
    except Exception as e:  # reported on stderr; the parent names the failure
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(first, file=sys.stderr, flush=True)
        return 1
    print("result " + json.dumps(minima), flush=True)
    return 0


@contextlib.contextmanager
def peer_process(host: str = "127.0.0.1", timeout: float = 60.0, prefix: list[str] = (), env: dict | None = None,
                 start_timeout: float = 120.0, name: str = "local network peer process"):
    """Start a one-session ``dlsched net-peer`` on ``host`` with a free port; yield that port (the one way
    dlsched starts a peer).

    ``prefix`` is prepended to its command (``ip netns exec NS``: the peer
    runs in that namespace), ``env`` replaces its environment. The peer exits
    by itself after its session; it is given 10 s to, and killed at once when
    the block raised, so it is always reaped.

    Raises
    ------
    NetworkError
        The peer does not announce itself within ``start_timeout`` (``name``
        says which peer in the message).
    """
    cmd = [*prefix, sys.executable, "-m", "dlsched.cli.main", "net-peer", "--host", host, "--port", "0",
           "--sessions", "1", "--timeout", str(timeout)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ if env is None else env, PYTHONUNBUFFERED="1"))
    done = False
    try:
        line = _read_line(proc, time.monotonic() + start_timeout)
        if not line or READY_LINE not in line:
            err = _reap(proc)
            raise NetworkError(f"the {name} did not start" + (f": {err}" if err else f" within {start_timeout:.0f} s"))
        yield int(line.rsplit(":", 1)[1])
        done = True
    finally:
        if proc.poll() is None and done:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        for stream in (proc.stdout, proc.stderr):
            with contextlib.suppress(Exception):
                stream.close()


def measure_local(sizes=DEFAULT_SIZES, repeats: int = 5, timeout: float = 30.0,
                  start_timeout: float = 120.0) -> LinkMeasurement:
    """Measure a real transfer between this process and a peer process it starts on 127.0.0.1.

    The peer is :func:`peer_process` (``dlsched net-peer --host 127.0.0.1
    --port 0 --sessions 1``); its announced port is then measured with
    :func:`measure_peer`. The peer process is always reaped.

    Raises
    ------
    NetworkError
        The peer fails to start within ``start_timeout`` or the measurement fails.
    """
    env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    with peer_process("127.0.0.1", timeout, env=env, start_timeout=start_timeout) as port:
        m = measure_peer("127.0.0.1", port, sizes=sizes, repeats=repeats, timeout=timeout)
        m.peer = f"local process (127.0.0.1:{port})"
        return m


if __name__ == "__main__":
    sys.exit(_client_main(sys.argv[1]))
