"""The address a request came from, as every part of the service reads it (the activation
limit, the admin-key throttle, the audit log, the console's login lockout)."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings


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
