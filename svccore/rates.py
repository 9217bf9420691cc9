"""Rates written as ``N/<span>`` (``SVC_ACTIVATION_RATE``, default ``20/10s``): the one
parser, run by the settings at start-up (a bad value stops the server there, not at the
first camera) and by the throttle, which reads it from a cache."""

from __future__ import annotations

import re
from functools import lru_cache

RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|m|min|h|hour)?\s*$")
UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, None: 1}


@lru_cache(maxsize=8)
def parse_rate(rate: str) -> tuple[int, int]:
    """``"20/10s"`` -> (20 requests, 10 seconds); ValueError naming the form otherwise."""
    match = RATE.match(rate)
    if not match:
        raise ValueError(f"SVC_ACTIVATION_RATE {rate!r} is not of the form N/<seconds>s")
    count, span, unit = match.groups()
    limit, seconds = int(count), int(span or 1) * UNIT_SECONDS[unit]
    if limit < 1 or seconds < 1:
        raise ValueError(f"SVC_ACTIVATION_RATE {rate!r}: N and the seconds must be at least 1")
    return limit, seconds
