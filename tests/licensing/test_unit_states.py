"""A unit's state, the same in the console and the portal (issue 41): active, in grace,
expired, revoked (with its reason) and seat released, computed once
(licensing.unit_states, the term by svccore.timeunits.term_state_at) and shown by one
component (templates/_unit_state.html): the same words and CSS class on every page that
lists units. Before, the portal showed a revoked, a released and an active camera alike."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from config import clock
from licensing.models import License
from licensing.services import batch_issue, license_issue, license_revoke, unit_activate
from licensing.services.seats import seat_release
from licensing.unit_states import UnitState, unit_state_of, unit_states
from tests.factories import CustomerFactory
from tests.portal.conftest import account_for

pytestmark = pytest.mark.django_db

BADGE = (
    r'<span class="svc-state svc-state-(\w+)">([^<]+)</span>'
    r'(?: <span class="svc-state-why">([^<]*)</span>)?'
)
STATE = re.compile(r'<td class="svc-device">([^<]+)</td>.*?' + BADGE, re.S)


@pytest.fixture
def fleet(server_clock):
    customer = CustomerFactory(name="Nordlicht Sicherheitstechnik und Videoanalyse GmbH")
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=6, term_days=30)
    ids = {}
    for name in ("active", "grace", "expired", "revoked", "released"):
        device = f"nl-ham-{name}-axis-p3265-lve-b8a44f3c2d"
        ids[name] = unit_activate(
            batch_token=batch.license.token, device_id=device, weak_binding=True,
            fingerprint_source="mac",
        ).license_id  # fmt: skip
    license_revoke(license_id=ids["revoked"], reason="MAC address cloned on a second camera")
    seat_release(license_id=ids["released"], reason="camera died: water in the housing")
    now = clock.now()
    grace_days = License.objects.get(pk=ids["grace"]).grace_days
    assert grace_days > 1
    License.objects.filter(pk=ids["grace"]).update(expires_at=now - dt.timedelta(days=1))
    License.objects.filter(pk=ids["expired"]).update(
        expires_at=now - dt.timedelta(days=grace_days + 1)
    )
    return customer, ids


def test_each_state_is_computed_once_for_a_page_and_a_row(fleet, django_assert_num_queries):
    _customer, ids = fleet
    with django_assert_num_queries(1):
        found = unit_states(ids.values())
    assert {name: found[pk].code for name, pk in ids.items()} == {name: name for name in ids}
    assert found[ids["revoked"]] == UnitState("revoked", "MAC address cloned on a second camera")
    assert found[ids["released"]] == UnitState("released", "camera died: water in the housing")
    assert [found[ids[n]].word for n in ("grace", "released")] == ["in grace", "seat released"]
    for pk in ids.values():
        assert unit_state_of(License.objects.get(pk=pk)) == found[pk]


def _states(html: str) -> dict[str, tuple[str, str, str]]:
    return {m[1].split("-")[2]: (m[2], m[3], m[4] or "") for m in STATE.finditer(html)}


def test_portal_and_console_show_the_same_words_and_colours(fleet, client, admin_client):
    customer, ids = fleet
    account = account_for(customer, "it@nordlicht.example")
    client.force_login(account.user)
    portal_fleet = _states(client.get("/portal/fleet/").content.decode())
    portal_weak = client.get("/portal/").content.decode()
    portal_weak = _states(portal_weak[portal_weak.index('id="weak"') :])
    portal_search = _states(client.get("/portal/fleet/?q=nl-ham").content.decode())
    console_list = admin_client.get("/admin/licensing/activation/").content.decode()
    console_list = _console_states(console_list)
    dashboard = admin_client.get("/admin/dashboard/").content.decode()
    console_weak = _states(dashboard[dashboard.index('id="weak-binding"') :])
    expected = {
        "active": ("active", "active", ""),
        "grace": ("grace", "in grace", ""),
        "expired": ("expired", "expired", ""),
        "revoked": ("revoked", "revoked", "MAC address cloned on a second camera"),
        "released": ("released", "seat released", "camera died: water in the housing"),
    }
    for shown in (portal_fleet, portal_weak, portal_search, console_list, console_weak):
        assert shown == expected


def _console_states(html: str) -> dict[str, tuple[str, str, str]]:
    found = {}
    for row in re.findall(r"<tr>.*?</tr>", html, re.S):
        device = re.search(r'class="field-device_id">(?:<a [^>]*>)?([^<]+)<', row)
        state = re.search(BADGE, row)
        if device and state:
            found[device[1].split("-")[2]] = (state[1], state[2], state[3] or "")
    return found


def _section_states(html: str, start: str, end: str, ids) -> dict[str, tuple[str, str]]:
    """{batch or licence id: (CSS code, words)} of the rows of one section of a page."""
    section = html.split(start, 1)[1].split(end, 1)[0]
    found = {}
    for row in re.findall(r"<tr>.*?</tr>", section, re.S):
        badge = re.search(BADGE, row)
        for ident in ids:
            if f">{ident}<" in row:
                found[ident] = (badge[1], badge[2]) if badge else None
    return found


def test_terms_ending_and_cameras_in_grace_show_the_one_component(
    client, admin_client, server_clock
):
    """The portal's "terms ending" and "cameras in grace" tables, the console dashboard's
    and the customer page's terms ending: each row's state in the shared component, the
    words and classes of the fleet (issue 41), not a table's own "in grace"."""
    customer = CustomerFactory(name="Nordlicht Sicherheitstechnik und Videoanalyse GmbH")
    ending = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=7, term_days=10)
    with server_clock.at(clock.now() - dt.timedelta(days=370)):  # 5 days past its end
        lapsed = license_issue(
            customer_id=customer.pk, sku="DETECT-STD", device_id="nl-ham-lapsed-axis-q1656"
        )
    assert lapsed.grace_days > 5
    expected = {ending.pk: ("active", "active"), lapsed.pk: ("grace", "in grace")}
    account = account_for(customer, "it@nordlicht.example")
    client.force_login(account.user)
    portal = client.get("/portal/").content.decode()
    assert _section_states(portal, 'id="expiring"', 'id="grace"', expected) == expected
    grace = portal.split('id="grace"', 1)[1].split('id="weak"', 1)[0]
    assert re.findall(BADGE, grace) == [("grace", "in grace", "")]
    assert lapsed.pk in grace
    dashboard = admin_client.get("/admin/dashboard/").content.decode()
    assert _section_states(dashboard, 'id="expiring"', "</table>", expected) == expected
    page = admin_client.get(f"/admin/customers/customer/{customer.pk}/change/").content.decode()
    assert _section_states(page, 'id="customer-expiring"', "</table>", expected) == expected
