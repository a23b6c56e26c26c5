"""What an op's time is: seconds, finite, in ``[0, MAX_OP_SECONDS]`` (DESIGN §3).

Every reader of times (oracle files, traces, the analyses' entry checks)
asks :func:`is_valid_time`, so the rule is written once, below them all.

Examples
--------
>>> is_valid_time(1e-3), is_valid_time(-1.0), is_valid_time(float("nan")), is_valid_time(1e307), is_valid_time(True)
(True, False, False, False, False)
"""
from __future__ import annotations

import math
import numbers
from typing import Any

# A day per op is already absurd; far larger times overflow the sums that bounds and simulation take.
MAX_OP_SECONDS = 86_400.0


def is_valid_time(t: Any) -> bool:
    """Seconds an op can take: a finite number in ``[0, MAX_OP_SECONDS]``, not a bool."""
    # numbers.Real also admits numpy scalars (a CSV's integer column reads as int64).
    return isinstance(t, numbers.Real) and not isinstance(t, bool) and math.isfinite(t) and 0 <= t <= MAX_OP_SECONDS
