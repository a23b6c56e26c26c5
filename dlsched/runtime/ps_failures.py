"""How a parameter-server rank fails: :class:`PSTrainingError`, raised from bounded waits.

Every wait on a transfer is bounded, and whatever gloo raises (a timeout, a
connection closed by a dead peer) becomes one :class:`PSTrainingError` line
that names the rank, the transfer and the iteration: at the wait, and at the
post too, since gloo's ``isend`` raises at once on a connection a dead peer
closed (:func:`post_transfer`).
"""
from __future__ import annotations

from datetime import timedelta

from dlsched.errors import DlschedError


class PSTrainingError(DlschedError):
    """A transfer failed or timed out, or a rank of the parameter-server job died."""


def seconds(value: float) -> timedelta:
    """``value`` seconds as the ``timedelta`` that ``torch.distributed`` takes."""
    return timedelta(seconds=value)


def transfer_failure(msg: str, exc: BaseException | None = None) -> PSTrainingError:
    """A :class:`PSTrainingError` for ``msg``, quoting the first line of ``exc``.

    A connection closed or reset by the peer is named as a probably dead peer,
    since that is what it almost always means here.
    """
    detail = f" ({str(exc).splitlines()[0][:300]})" if exc is not None else ""
    if exc is not None and ("closed by peer" in str(exc) or "Connection reset" in str(exc)):
        detail += "; a peer process probably died"
    return PSTrainingError(msg + detail)


def post_transfer(post, what: str):
    """Post the transfer ``what``: ``post()`` (a ``dist.isend`` or ``dist.irecv``), returning its work.

    Raises
    ------
    PSTrainingError
        The post failed (gloo raises there when the peer closed the connection).
    """
    try:
        return post()
    except Exception as e:  # noqa: BLE001 - gloo's RuntimeError for a closed pair
        raise transfer_failure(f"{what} failed at its post", e) from None


def post_and_wait(post, what: str, timeout: float) -> None:
    """:func:`post_transfer`, then :func:`wait_transfer` on its work."""
    wait_transfer(post_transfer(post, what), what, timeout)


def wait_transfer(work, what: str, timeout: float) -> None:
    """Wait for the ``torch.distributed`` work ``work`` at most ``timeout`` seconds.

    Raises
    ------
    PSTrainingError
        The transfer ``what`` failed or timed out.
    """
    try:
        work.wait(seconds(timeout))
    except Exception as e:  # gloo raises RuntimeError for dead peers and timeouts
        raise transfer_failure(f"{what} failed or timed out after {timeout:g} s", e) from None
