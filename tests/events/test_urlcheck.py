"""Where a webhook may point (events.urlcheck), issue 37 item 6: an IPv6 address that
carries an IPv4 address (NAT64, 6to4, Teredo, IPv4-mapped, -compatible, -translated) is
judged by that IPv4 address too, and a URL with a control character is refused, not
stored."""

from __future__ import annotations

import ipaddress

import pytest

from config.errors import InvalidInput
from events import urlcheck
from events.models import Webhook

pytestmark = pytest.mark.django_db

REFUSED_IPV4 = {
    "127.0.0.1": "loopback",
    "169.254.169.254": "link-local",
    "10.0.0.1": "private",
    "192.168.1.1": "private",
}
PUBLIC_IPV4 = "8.8.8.8"
TEREDO_SERVER = "65.54.227.120"  # a public Teredo server


def _v4(address: str) -> int:
    return int(ipaddress.IPv4Address(address))


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


# Each form: how it carries an IPv4 address, and whether the form itself is globally
# reachable (so that it carrying a public address is accepted).
FORMS = {
    "NAT64": (lambda v: _v6(0x0064FF9B << 96 | _v4(v)), True),
    "NAT64 local-use": (lambda v: _v6(0x0064FF9B0001 << 80 | _v4(v)), False),
    "6to4": (lambda v: _v6(0x2002 << 112 | _v4(v) << 80 | 1), True),
    "Teredo client": (
        lambda v: _v6(0x20010000 << 96 | _v4(TEREDO_SERVER) << 64 | (~_v4(v) & 0xFFFFFFFF)),
        False,
    ),
    "Teredo server": (
        lambda v: _v6(0x20010000 << 96 | _v4(v) << 64 | (~_v4(PUBLIC_IPV4) & 0xFFFFFFFF)),
        False,
    ),
    "IPv4-mapped": (lambda v: f"::ffff:{v}", True),
    "IPv4-compatible": (lambda v: f"::{v}", True),
    "IPv4-translated": (lambda v: f"::ffff:0:{v}", True),
}


def _register(admin_api, url: str):
    return admin_api.post("/v1/admin/webhooks", {"url": url, "events": ["*"]}, format="json")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("ipv4", [*REFUSED_IPV4, PUBLIC_IPV4])
def test_the_ipv4_address_an_ipv6_form_carries_is_extracted(form, ipv4):
    carried = urlcheck.embedded_ipv4(ipaddress.IPv6Address(FORMS[form][0](ipv4)))
    expected = {
        "Teredo client": [("Teredo server", TEREDO_SERVER), ("Teredo client", ipv4)],
        "Teredo server": [("Teredo server", ipv4), ("Teredo client", PUBLIC_IPV4)],
    }.get(form, [(form.removesuffix(" local-use"), ipv4)])
    assert [(name, str(address)) for name, address in carried] == expected


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("ipv4", REFUSED_IPV4)
def test_an_ipv6_form_carrying_a_non_public_ipv4_address_is_refused(admin_api, form, ipv4):
    address = FORMS[form][0](ipv4)
    response = _register(admin_api, f"https://[{address}]:8443/hook")
    assert response.status_code == 400, (address, response.content)
    detail = response.json()["detail"]
    assert f"a {REFUSED_IPV4[ipv4]} address" in detail, detail
    assert f"carrying {ipv4} as {form.removesuffix(' local-use')}" in detail, detail
    assert "SVC_WEBHOOK_ALLOW_PRIVATE" in detail
    assert not Webhook.objects.exists()


@pytest.mark.parametrize("form", FORMS)
def test_an_ipv6_form_carrying_a_public_ipv4_address_is_judged_by_the_form(admin_api, form):
    make, global_form = FORMS[form]
    response = _register(admin_api, f"https://[{make(PUBLIC_IPV4)}]/hook")
    if global_form:
        assert response.status_code == 201, response.content
    else:  # Teredo and the local-use NAT64 prefix are not reachable from the Internet
        assert response.status_code == 400, response.content
        assert (
            "private address" in response.json()["detail"]
            or "non-public" in (response.json()["detail"])
        )


@pytest.mark.parametrize("address", ["::1", "::", "fe80::1", "fc00::1", "ff02::1"])
def test_plain_ipv6_addresses_carry_no_ipv4_and_stay_refused(admin_api, address):
    assert urlcheck.embedded_ipv4(ipaddress.IPv6Address(address)) == []
    assert _register(admin_api, f"https://[{address}]/hook").status_code == 400


def test_the_issue_payloads_are_refused(admin_api):
    for url, named in {
        "https://[64:ff9b::a9fe:a9fe]/latest/meta-data": "link-local",
        "https://[2002:7f00:1::]/hook": "loopback",
        "https://[::ffff:127.0.0.1]/hook": "loopback",
        "https://[::127.0.0.1]/hook": "loopback",
    }.items():
        response = _register(admin_api, url)
        assert response.status_code == 400 and named in response.json()["detail"], url


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/a\r\nX-Injected: 1",
        "https://8.8.8.8/a\nb",
        "https://8.8.8.8/a\rb",
        "https://8.8.8.8/a\tb",
        "https://8.8.8.8/a\x00b",
        "https://8.8.8.8/a\x1b[2Jb",
        "https://8.8.8.8/a\x7fb",
        "https://8.8.8.8/a\u0085b",
        "https://8.8.8.8/a\u202eb",
        "https://8.8.\r\n8.8/hook",
    ],
)
def test_a_url_with_a_control_character_is_refused_not_stored(admin_api, url):
    response = _register(admin_api, url)
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith("url"), response.json()  # NUL: DRF's words
    assert not Webhook.objects.exists()
    # Checked again before every delivery: an endpoint stored before this rule is never
    # sent a request line or header split by one.
    with pytest.raises(InvalidInput, match="control or format characters"):
        urlcheck.check(url)


def test_a_public_url_without_control_characters_is_accepted(admin_api):
    response = _register(admin_api, "https://8.8.8.8/hooks/licensing?x=1")
    assert response.status_code == 201, response.content
    assert Webhook.objects.get().url == "https://8.8.8.8/hooks/licensing?x=1"
