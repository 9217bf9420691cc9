"""Per-IP activation throttle (``SVC_ACTIVATION_RATE``, default 20 per 10 s).

The edge (nginx) enforces the same limit in production; this one keeps a bare app node
safe too. Counters live in the Django cache, so ``CACHE_URL=redis://...`` shares them
across app nodes. Provisioning lines in ``SVC_ACTIVATION_ALLOWLIST`` are exempt.
"""

from __future__ import annotations

import ipaddress
import re
import time
from functools import lru_cache

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|m|min|h|hour)?\s*$")
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, None: 1}


@lru_cache(maxsize=8)
def parse_rate(rate: str) -> tuple[int, int]:
    """``"20/10s"`` -> (20 requests, 10 seconds)."""
    match = _RATE.match(rate)
    if not match:
        raise ValueError(f"SVC_ACTIVATION_RATE {rate!r} is not of the form N/<seconds>s")
    count, span, unit = match.groups()
    return int(count), int(span or 1) * _UNIT_SECONDS[unit]


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip())


def _in(ip: str, cidrs: list[str]) -> bool:
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(address in net for net in _networks(tuple(cidrs)))


def client_ip(request) -> str:
    """The caller's address: REMOTE_ADDR, or the nearest untrusted hop of
    X-Forwarded-For when REMOTE_ADDR is a trusted proxy."""
    remote = request.META.get("REMOTE_ADDR", "")
    trusted = settings.SVC_TRUSTED_PROXIES
    if not trusted or not _in(remote, trusted):
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed([h for h in hops if h]):
        if not _in(hop, trusted):
            return hop
    return remote


class ActivationRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        ip = client_ip(request)
        if _in(ip, settings.SVC_ACTIVATION_ALLOWLIST):
            return True
        self.limit, self.span = parse_rate(settings.SVC_ACTIVATION_RATE)
        now = time.time()
        window = int(now // self.span)
        self.retry_after = int((window + 1) * self.span - now) + 1
        key = f"svc:activate:{ip}:{window}"
        cache.add(key, 0, timeout=self.span + 1)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=self.span + 1)
            count = 1
        return count <= self.limit

    def wait(self) -> float | None:
        return self.retry_after
