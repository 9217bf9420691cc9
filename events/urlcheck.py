"""Where a webhook may point (SSRF): ``https://`` to a public address, unless
SVC_WEBHOOK_ALLOW_HTTP / SVC_WEBHOOK_ALLOW_PRIVATE say otherwise. Checked when an
endpoint is registered and again before every delivery (a name may resolve elsewhere
by then); the delivery connects to an address this check passed."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from config.errors import InvalidInput

URL_MAX = 2000


def _refused_address(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.is_global and not ip.is_multicast:
        return ""
    for label, test in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("multicast", ip.is_multicast),
    ):
        if test:
            return label
    return "non-public"


def check(url: str) -> tuple[str, int, str]:
    """(host, port, address) the endpoint may be reached at, or :class:`InvalidInput`
    naming what is refused and the setting that would allow it."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX:
        raise InvalidInput(f"url must be a URL of at most {URL_MAX} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InvalidInput(f"url must be https://host/..., not {url[:80]!r}")
    if parts.scheme == "http" and not settings.SVC_WEBHOOK_ALLOW_HTTP:
        raise InvalidInput("url must be https:// (set SVC_WEBHOOK_ALLOW_HTTP=1 to allow http://)")
    if parts.username or parts.password:
        raise InvalidInput("url must not carry a user name or password")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidInput(f"url has a bad port: {url[:80]!r}") from None
    try:
        found = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise InvalidInput(f"the host {parts.hostname[:80]!r} does not resolve") from None
    addresses = [info[4][0] for info in found]
    if not settings.SVC_WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            refused = _refused_address(address)
            if refused:
                raise InvalidInput(
                    f"the host {parts.hostname[:80]!r} resolves to a {refused} address "
                    f"({address}); set SVC_WEBHOOK_ALLOW_PRIVATE=1 to allow it"
                )
    return parts.hostname, port, addresses[0]
