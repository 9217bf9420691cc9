"""Per-IP activation throttle (``SVC_ACTIVATION_RATE``, default 20 per 10 s).

The edge (nginx) enforces the same limit in production; this one keeps a bare app node
safe too. Provisioning lines in ``SVC_ACTIVATION_ALLOWLIST`` are exempt. The window
slides, and the counters are shared by every worker and node: Redis when ``CACHE_URL``
names one (one round trip, cheaper than the lookup it protects), else the database
(``ratelimits.counters``).
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache

from django.conf import settings
from rest_framework.throttling import BaseThrottle

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
    return int(count), int(span or 1) * _UNIT_SECONDS[unit]


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip())


def ip_in(ip: str, cidrs: list[str]) -> bool:
    """Whether ``ip`` lies in one of ``cidrs`` (False for what is not an address)."""
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


def _is_address(value: str) -> bool:
    if "%" in value:  # a scoped IPv6 address: no database column takes it
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _client_ip(meta) -> str:
    remote = meta.get("REMOTE_ADDR", "")
    trusted = settings.SVC_TRUSTED_PROXIES
    if not trusted or not ip_in(remote, trusted):
        return remote
    nearest = remote
    hops = [h.strip() for h in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed([h for h in hops if h]):
        if not _is_address(hop):
            return nearest  # nothing beyond a hop that is not an address is believed
        if not ip_in(hop, trusted):
            return hop
        nearest = hop
    return remote


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
