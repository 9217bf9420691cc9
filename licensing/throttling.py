"""Per-IP activation throttle (``SVC_ACTIVATION_RATE``, default 20 per 10 s).

The edge (nginx) enforces the same limit in production; this one keeps a bare app node
safe too. Counters live in the Django cache, so ``CACHE_URL=redis://...`` shares them
across app nodes. Provisioning lines in ``SVC_ACTIVATION_ALLOWLIST`` are exempt.

The window slides: a request counts the requests of the current fixed window plus the
previous window's, weighted by the share of it still inside the last ``span`` seconds,
so no burst gets twice the limit across a window boundary. On Redis the check is one
round trip (a pipeline: count this request, keep the counter for two windows, read the
previous one), cheaper than the lookup it protects.
"""

from __future__ import annotations

import ipaddress
import re
import time
from functools import lru_cache

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
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
    X-Forwarded-For when REMOTE_ADDR is a trusted proxy. Worked out once per request."""
    http_request = getattr(request, "_request", request)  # a DRF request wraps Django's
    known = getattr(http_request, "_svc_client_ip", None)
    if known is None:
        known = http_request._svc_client_ip = _client_ip(http_request.META)
    return known


def _client_ip(meta) -> str:
    remote = meta.get("REMOTE_ADDR", "")
    trusted = settings.SVC_TRUSTED_PROXIES
    if not trusted or not _in(remote, trusted):
        return remote
    hops = [h.strip() for h in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed([h for h in hops if h]):
        if not _in(hop, trusted):
            return hop
    return remote


def _counted(key: str, window: int, span: int) -> tuple[int, int]:
    """Count one request in ``window`` under ``key``: (requests in this window, counting
    this one; requests in the window before)."""
    current, previous = f"{key}:{window}", f"{key}:{window - 1}"
    cache = caches["default"]
    if isinstance(cache, RedisCache):
        # Django's cache API would take three round trips (get, then incr = exists +
        # incr); its Redis client takes one.
        current = cache.make_and_validate_key(current)
        previous = cache.make_and_validate_key(previous)
        client = cache._cache.get_client(current, write=True)
        pipe = client.pipeline(transaction=False)
        pipe.incr(current)
        pipe.expire(current, 2 * span + 1)
        pipe.get(previous)
        count, _, before = pipe.execute()
        return int(count), int(before or 0)
    before = cache.get(previous, 0)  # other backends: local memory, in-process
    try:
        return cache.incr(current), before
    except ValueError:  # the window's first request (or its counter expired)
        if cache.add(current, 1, timeout=2 * span + 1):
            return 1, before
        return cache.incr(current), before


class ActivationRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        ip = client_ip(request)
        if _in(ip, settings.SVC_ACTIVATION_ALLOWLIST):
            return True
        self.limit, self.span = parse_rate(settings.SVC_ACTIVATION_RATE)
        window, into = divmod(time.time(), self.span)
        count, before = _counted(f"svc:activate:{ip}", int(window), self.span)
        weight = 1 - into / self.span  # the share of the previous window still in view
        self.retry_after = int(self.span - into) + 1
        return before * weight + count <= self.limit

    def wait(self) -> float | None:
        return self.retry_after
