"""The link of a real cluster, measured over that very link (``dlsched validate``, DESIGN §4.7).

A :func:`~dlsched.profiling.network.peer_process` runs behind the server's
command prefix (``ip netns exec NS``: in its network namespace) and the
client behind a worker's, so the figures are those of the tc-shaped link,
gloo's per-transfer overhead included. Without a cluster the two ends are
local processes on loopback (:func:`~dlsched.profiling.network.measure_local`).
The bandwidth comes from transfers well past tc's burst and the latency from
a small round trip (:func:`link_from_minima`).
"""
from __future__ import annotations

import json
import subprocess
import sys

from .network import LinkMeasurement, NetworkError, fit_link, measure_local, peer_process

_CLIENT = ("import json, sys\nfrom dlsched.profiling.network import measure_peer\n"
           "m = measure_peer(sys.argv[1], int(sys.argv[2]), sizes=json.loads(sys.argv[3]), repeats=3)\n"
           "print('LINK ' + json.dumps(m.to_dict()), flush=True)\n")
#: The small transfer whose round trip gives the per-transfer latency (gloo's overhead included).
SMALL = 4096


def link_sizes(rate_bytes: float | None) -> list[int]:
    """Transfer sizes of the link measurement: three sizes well past tc's 128 KB burst, the largest
    taking about 0.4 s on the link (1 MB to 16 MB), with three :data:`SMALL` round trips before, between
    and after them, whose minimum is the latency.

    A busy CPU delays a round trip of a few microseconds in spells, not one
    at a time: beside a busy loop on a 2-core machine, 2 of 12 measurements
    with their 9 small round trips back to back had all 9 delayed (3.2–4 ms
    each in one, a co-runner's time slice, against 0.1 ms), giving a latency
    of 0.8 and 1.6 ms that the simulator charged to every one of a
    transformer's 108 transfers per worker. Spread over the whole measurement
    (about a second), 12 small round trips of 3 repeats each meet such a
    spell far less often.

    Examples
    --------
    >>> link_sizes(12.5e6)
    [4096, 4096, 4096, 1250000, 4096, 4096, 4096, 2500000, 4096, 4096, 4096, 5000000, 4096, 4096, 4096]
    >>> link_sizes(None)[-4]
    16777216
    """
    big = int(min(16 << 20, max(1 << 20, 0.4 * rate_bytes))) if rate_bytes else 16 << 20
    small = [SMALL] * 3
    return [*small, big // 4, *small, big // 2, *small, big, *small]


def link_from_minima(m: LinkMeasurement) -> LinkMeasurement:
    """Bandwidth from the large transfers' slope, one-way latency from the small round trip / 2.

    A tc token bucket sends its burst (128 KB) at line rate, so a fit over all
    sizes bends towards it; a model's transfers go back to back and keep the
    bucket empty, so only the sizes past the burst say what the link carries.
    """
    big = [(s, t) for s, t in zip(m.sizes, m.min_times) if s > SMALL]
    bandwidth, _ = fit_link([s for s, _ in big], [t for _, t in big])
    m.bandwidth, m.latency = bandwidth, min(t for s, t in zip(m.sizes, m.min_times) if s == SMALL) / 2
    return m


def measure_link(rate_bytes: float | None = None, address: str | None = None, prefixes: list[list[str]] = (),
                 envs: list[dict] = (), timeout: float = 60.0) -> LinkMeasurement:
    """Measure a cluster's link at ``rate_bytes`` (bytes/s, ``None``: unshaped; it sizes the transfers).

    With ``address`` (the server's), the peer listens there behind
    ``prefixes[0]`` with environment ``envs[0]``, and the client runs behind
    ``prefixes[1]`` with ``envs[1]`` (a worker's); without, both ends are
    local processes.

    Raises
    ------
    NetworkError
        The peer does not start or the measurement fails.
    """
    sizes = link_sizes(rate_bytes)
    if address is None:
        return link_from_minima(measure_local(sizes=sizes, repeats=3, timeout=timeout))
    with peer_process(address, timeout, prefix=prefixes[0], env=envs[0],
                      name="network peer in the server's namespace") as port:
        try:
            out = subprocess.run(prefixes[1] + [sys.executable, "-c", _CLIENT, address, str(port), json.dumps(sizes)],
                                 env=envs[1], capture_output=True, text=True, timeout=timeout * 10)
        except subprocess.TimeoutExpired:
            raise NetworkError(f"measuring the shaped link took over {timeout * 10:.0f} s") from None
        got = [ln for ln in out.stdout.splitlines() if ln.startswith("LINK ")]
        if out.returncode or not got:
            tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise NetworkError(f"measuring the shaped link failed: {tail}")
        return link_from_minima(LinkMeasurement(**json.loads(got[-1][5:])))
