"""Where a webhook may point (SSRF): ``https://`` to a public address, unless
SVC_WEBHOOK_ALLOW_HTTP / SVC_WEBHOOK_ALLOW_PRIVATE say otherwise. Checked when an
endpoint is registered and again before every delivery (a name may resolve elsewhere
by then); the delivery connects to an address this check passed.

An IPv6 address that carries an IPv4 address (NAT64, 6to4, Teredo, IPv4-mapped,
-compatible and -translated) reaches that IPv4 address through a translator, a relay
or the host's own dual stack, so it is judged by the IPv4 address too: the form is
accepted only when every IPv4 address it carries is public.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from config.errors import InvalidInput
from svccore.claims import control_character_problem

URL_MAX = 2000
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_V6 = ipaddress.IPv6Network
# The IPv6 forms whose last 32 bits are an IPv4 address. ``::/96`` (IPv4-compatible,
# RFC 4291, deprecated) leaves out ``::`` and ``::1``, which are IPv6's own.
LAST_32_BITS = (
    ("NAT64", _V6("64:ff9b::/96")),  # RFC 6052 well-known prefix
    ("NAT64", _V6("64:ff9b:1::/48")),  # RFC 8215 local use, as a /96 within it
    ("IPv4-translated", _V6("::ffff:0:0:0/96")),  # RFC 2765
    ("IPv4-compatible", _V6("::/96")),
)
# Prefixes not reachable from the Internet whatever they carry (IANA special-purpose
# registry), which ipaddress does not yet call non-global on every Python we run on.
NOT_GLOBAL = (_V6("64:ff9b:1::/48"),)


def embedded_ipv4(ip: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of its form;
    [] for an IPv4 address or a plain IPv6 one. Teredo (RFC 4380) carries two: its
    server, and its client as the bitwise NOT of the last 32 bits."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    if ip.ipv4_mapped is not None:
        return [("IPv4-mapped", ip.ipv4_mapped)]
    if ip.sixtofour is not None:
        return [("6to4", ip.sixtofour)]
    if ip.teredo is not None:
        server, client = ip.teredo
        return [("Teredo server", server), ("Teredo client", client)]
    for form, network in LAST_32_BITS:
        if ip in network and not (form == "IPv4-compatible" and int(ip) <= 1):
            return [(form, ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))]
    return []


def _refused_ip(ip: IPAddress) -> str:
    """ "" for a public address, else what it is (loopback, link-local, ...)."""
    if ip.is_global and not ip.is_multicast and not any(ip in net for net in NOT_GLOBAL):
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


def _refused_address(address: str) -> str:
    """ "" when ``address`` is public and so is every IPv4 address it carries, else what
    is refused ("a loopback address (...)"); a carried address is named, as it is where
    a request would land."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    for form, inner in embedded_ipv4(ip):
        refused = _refused_ip(inner)
        if refused:
            return f"a {refused} address ({address}, carrying {inner} as {form})"
    refused = _refused_ip(ip)
    return f"a {refused} address ({address})" if refused else ""


def check(url: str) -> tuple[str, int, str]:
    """(host, port, address) the endpoint may be reached at, or :class:`InvalidInput`
    naming what is refused and the setting that would allow it."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX:
        raise InvalidInput(f"url must be a URL of at most {URL_MAX} characters")
    # Before urlsplit, which drops tab, CR and LF without a word: a stored URL is sent
    # as it is, and a header or request line must never be split by one.
    problem = control_character_problem(url)
    if problem:
        raise InvalidInput(f"url {problem}")
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
                    f"the host {parts.hostname[:80]!r} resolves to {refused}; "
                    "set SVC_WEBHOOK_ALLOW_PRIVATE=1 to allow it"
                )
    return parts.hostname, port, addresses[0]
