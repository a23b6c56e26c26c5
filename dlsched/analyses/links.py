"""How the workers share a parameter server's link (DESIGN §4.6).

In parameter-server training every server's downlink and uplink carry the
transfers of all ``W`` workers. How the link divides its capacity among them
is a model choice (DESIGN §4.7 lets measurement decide), so each model is a
:class:`LinkPolicy`: the multi-worker simulator
(:func:`dlsched.analyses.multiworker.simulate_workers`) hands a policy the
transfers it starts and ends on one link and asks it when the transfers in
flight will end; it never looks at which model it runs. A new link model is a
new subclass, registered in :data:`LINK_POLICIES`.

The contract, for one link:

* Transfers wait in *streams*: :attr:`LinkPolicy.streams` queues, worker ``w``
  queueing in stream :meth:`LinkPolicy.stream` ``(w)``. Each stream carries
  one transfer at a time, and the simulator starts the next one whenever a
  stream is free (parameters by priority rank, gradient sends first-ready-
  first; then by worker turn).
* :meth:`LinkPolicy.admit` starts a transfer with ``work`` seconds of
  transfer time (its time alone on the link); :meth:`LinkPolicy.finish` ends
  one at the time the policy predicted.
* :meth:`LinkPolicy.ends`, asked after each round of starts and ends at one
  instant (the ops that end together, then the starts they allow), gives the
  predicted end of every transfer whose prediction changed; the simulator
  forgets the superseded predictions.

Transfer ids are opaque integers, unique within one simulated iteration.

Policies:

:class:`SerialLink` (``"serial"``)
    One transfer at a time on the whole link, whichever worker it is for.
:class:`FairShareLink` (``"fair"``)
    One stream per worker (TicTac §5.1: a gRPC channel per worker–server
    pair); the transfers in flight split the capacity evenly, as TCP flows do
    (processor sharing).
"""
from __future__ import annotations


class LinkPolicy:
    """How one shared link serves the transfers of ``workers`` workers.

    Subclasses set :attr:`streams` and :meth:`stream`, and implement
    :meth:`admit`, :meth:`finish` and :meth:`ends` (see the module docstring).

    Parameters
    ----------
    workers : int
        Number of workers sharing the link.

    Attributes
    ----------
    name : str
        The policy's name in :data:`LINK_POLICIES` (``sharing=`` of the simulator).
    streams : int
        Number of queues on the link, each carrying one transfer at a time.

    Examples
    --------
    >>> sorted(LINK_POLICIES)
    ['fair', 'serial']
    >>> link = LINK_POLICIES["fair"](workers=4)
    >>> link.streams, [link.stream(w) for w in range(4)]
    (4, [0, 1, 2, 3])
    """

    name = ""

    def __init__(self, workers: int):
        self.workers = workers
        self.streams = 1

    def stream(self, worker: int) -> int:
        """The stream (``0 ≤ s < streams``) in which ``worker``'s transfers queue."""
        return 0

    def admit(self, t: float, transfer: int, work: float) -> None:
        """Start ``transfer`` at time ``t``; alone on the link it takes ``work`` seconds."""
        raise NotImplementedError

    def finish(self, t: float, transfer: int) -> None:
        """``transfer`` ended at time ``t`` (the end last predicted by :meth:`ends`)."""
        raise NotImplementedError

    def ends(self, t: float) -> list[tuple[float, int]]:
        """``(end, transfer)`` for each transfer whose predicted end changed at time ``t``.

        Called after each round of :meth:`admit` and :meth:`finish` calls at
        ``t``; the latest prediction of a transfer replaces the earlier ones.
        """
        raise NotImplementedError


class SerialLink(LinkPolicy):
    """One transfer at a time on the link, at full capacity.

    All workers queue in one stream, so the simulator's pick (priority rank
    or ready time, then worker turn) decides whose transfer goes next. A transfer's end is known when
    it starts and never changes.

    Examples
    --------
    >>> link = SerialLink(workers=2)
    >>> link.streams, link.stream(1)
    (1, 0)
    >>> link.admit(0.0, transfer=7, work=1.5)
    >>> link.ends(0.0)
    [(1.5, 7)]
    >>> link.finish(1.5, 7); link.ends(1.5)
    []
    """

    name = "serial"

    def __init__(self, workers: int):
        super().__init__(workers)
        self._started: list[tuple[float, int]] = []

    def admit(self, t: float, transfer: int, work: float) -> None:
        self._started.append((t + work, transfer))

    def finish(self, t: float, transfer: int) -> None:
        pass  # the next transfer's end does not depend on this one

    def ends(self, t: float) -> list[tuple[float, int]]:
        started, self._started = self._started, []
        return started


class FairShareLink(LinkPolicy):
    """Processor sharing: the transfers in flight split the capacity evenly.

    Each worker has its own stream; with ``m`` transfers in flight each
    progresses at rate ``1/m`` (seconds of transfer time per second). Every
    start or end changes ``m``, so the remaining work of each transfer is
    brought up to date (:meth:`advance`) and all ends are predicted anew.

    Examples
    --------
    Worker 0 sends 1 s of work, worker 1 sends 3 s: half rate each until
    worker 0's ends at 2 s, then full rate, so worker 1's ends at 4 s.

    >>> link = FairShareLink(workers=2)
    >>> link.streams, link.stream(1)
    (2, 1)
    >>> link.admit(0.0, transfer=0, work=1.0); link.admit(0.0, transfer=1, work=3.0)
    >>> sorted(link.ends(0.0))
    [(2.0, 0), (6.0, 1)]
    >>> link.finish(2.0, 0); link.ends(2.0)
    [(4.0, 1)]
    """

    name = "fair"

    def __init__(self, workers: int):
        super().__init__(workers)
        self.streams = workers
        self.left: dict[int, float] = {}  # transfer -> remaining work (seconds at full capacity)
        self._last = 0.0  # time up to which `left` is settled

    def stream(self, worker: int) -> int:
        return worker

    def rate(self) -> float:
        """Progress of each transfer in flight, in seconds of work per second.

        Even shares of the capacity. A subclass that changes only this (say, a
        link that loses capacity as flows pile up) is a new link model.

        Examples
        --------
        >>> link = FairShareLink(workers=4)
        >>> for g in range(4): link.admit(0.0, g, 1.0)
        >>> link.rate()
        0.25
        """
        return 1.0 / len(self.left)

    def advance(self, t: float) -> None:
        """Take the work done since the last change off every transfer in flight.

        Only called when the set of transfers changes: the remaining work is
        then settled at exactly the instants the predictions are made, which
        keeps results reproducible to the last bit.
        """
        left = self.left
        if left:
            step = (t - self._last) * self.rate()
            for g in left:
                left[g] -= step
        self._last = t

    def admit(self, t: float, transfer: int, work: float) -> None:
        self.advance(t)
        self.left[transfer] = work

    def finish(self, t: float, transfer: int) -> None:
        self.advance(t)
        del self.left[transfer]

    def ends(self, t: float) -> list[tuple[float, int]]:
        if not self.left:
            return []
        rate = self.rate()
        # max(…, 0): rounding can leave a hair below zero; such a transfer ends now
        return [(t + max(w, 0.0) / rate, g) for g, w in self.left.items()]


#: The link model the simulator uses unless told otherwise (DESIGN §4.7: the one that predicts real runs best).
DEFAULT_SHARING = "fair"

#: Link models by name (the simulator's ``sharing`` values), in documentation order.
LINK_POLICIES: dict[str, type[LinkPolicy]] = {p.name: p for p in (SerialLink, FairShareLink)}
