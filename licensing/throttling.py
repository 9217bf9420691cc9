"""Per-IP activation throttle (``SVC_ACTIVATION_RATE``, default 20 per 10 s).

The edge (nginx) enforces the same limit in production; this one keeps a bare app node
safe too, and holds an address to the limit however many nginx and nodes it reaches.
Provisioning lines in ``SVC_ACTIVATION_ALLOWLIST`` are exempt. The limit is exact: no
span of the rate's seconds, wherever it starts, holds more than its count of admitted
activations from one address (a sliding log of admitted instants, ``ratelimits.counters``).
Refused requests are not logged, and the 429's ``Retry-After`` is the whole seconds until
the oldest counted activation leaves the span. The log is shared by every worker and
node: in Redis when ``CACHE_URL`` names one (one round trip, cheaper than the lookup it
protects), else, and while Redis fails, in the database.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from config.clientip import client_ip, ip_in
from ratelimits import counters

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|m|min|h|hour)?\s*$")
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, None: 1}


@lru_cache(maxsize=8)
def parse_rate(rate: str) -> tuple[int, int]:
    """``"20/10s"`` -> (20 requests, 10 seconds)."""
    match = _RATE.match(rate)
    if not match:
        raise ValueError(f"SVC_ACTIVATION_RATE {rate!r} is not of the form N/<seconds>s")
    count, span, unit = match.groups()
    limit, seconds = int(count), int(span or 1) * _UNIT_SECONDS[unit]
    if limit < 1 or seconds < 1:
        raise ValueError(f"SVC_ACTIVATION_RATE {rate!r}: N and the seconds must be at least 1")
    return limit, seconds


class ActivationRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        ip = client_ip(request)
        if ip_in(ip, settings.SVC_ACTIVATION_ALLOWLIST):
            return True
        self.limit, self.span = parse_rate(settings.SVC_ACTIVATION_RATE)
        decision = counters.hit("activate", ip, limit=self.limit, span=self.span)
        self.retry_after = decision.retry_after
        return decision.allowed

    def wait(self) -> float | None:
        return self.retry_after
