"""Check-in leases and holds on the service (issue 42): which lease a unit has (its
licence's, else its batch's, else its SKU's), what its signed status says, when the
service saw it last, the events the scan writes once each and the alerts that carry
them, and suspend/reinstate at the service level."""

from __future__ import annotations

import pytest
from django.core import mail
from django.db import connection

from devices import documents
from events.alerts import alerts_send
from events.models import Event
from events.scan import events_scan
from licensing import leases, revocations, services
from licensing.models import Batch, License, Sku, Suspension
from licensing.selectors import past_lease_count
from licensing.services.activation import LOOKUP_SQL
from svccore.timeunits import DAY

pytestmark = pytest.mark.django_db


def _activate(device_api, batch, device: str = "cam-1") -> dict:
    answer = device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": device}, format="json"
    )
    assert answer.status_code == 200
    return answer.json()


def test_lease_is_the_license_s_else_the_batch_s_else_the_sku_s(make_batch, customer):
    Sku.objects.filter(code="VISION-PRO").update(max_offline_days=30)
    batch = make_batch(units=2)
    key = batch.license_id
    assert leases.lease_and_hold(license_id=key).days == 30
    Batch.objects.filter(pk=batch.id).update(max_offline_days=14)
    assert leases.lease_and_hold(license_id="LIC-NOT-YET", batch_id=batch.id).days == 14
    License.objects.filter(pk=key).update(max_offline_days=3)
    assert leases.lease_and_hold(license_id=key).days == 3
    Sku.objects.filter(code="VISION-PRO").update(max_offline_days=None)
    other = make_batch(units=1)
    assert leases.lease_and_hold(license_id=other.license_id) == leases.LeaseAndHold(None, False)


def test_the_activation_lookup_agrees_with_lease_and_hold(device_api, make_batch, customer):
    """LOOKUP_SQL carries the same rule as SQL (licensing.leases.LEASE_DAYS_SQL, HELD_SQL)."""
    batch = make_batch(units=3)
    unit = _activate(device_api, batch)
    cases = [
        lambda: None,
        lambda: Sku.objects.filter(code="VISION-PRO").update(max_offline_days=30),
        lambda: Batch.objects.filter(pk=batch.id).update(max_offline_days=9),
        lambda: License.objects.filter(pk=unit["license_id"]).update(max_offline_days=2),
        lambda: services.license_suspend(customer_id=customer.id, reason="dispute"),
    ]
    for change in cases:
        change()
        with connection.cursor() as cursor:
            cursor.execute(LOOKUP_SQL, [batch.id, "cam-1", batch.license_id])
            row = cursor.fetchone()
        expected = leases.lease_and_hold(license_id=unit["license_id"])
        assert leases.from_values(row[7], None, None, row[8]) == expected


def test_status_carries_lease_end_and_records_the_check_in(
    device_api, make_batch, server_clock, signing_key
):
    batch = make_batch(units=2)
    Batch.objects.filter(pk=batch.id).update(max_offline_days=7)
    unit = _activate(device_api, batch)
    lic = License.objects.get(pk=unit["license_id"])
    assert lic.checked_in_at is not None
    first = documents.parse_status(unit["status"], signing_key.public_key())
    assert first.lease_end == first.issued_at + 7 * DAY and not first.suspended
    server_clock(3 * DAY)
    answer = device_api.get(
        "/v1/revocations/status", {"license_id": lic.id, "device_id": "cam-1"}
    ).json()
    later = documents.parse_status(answer["status"], signing_key.public_key())
    assert answer["lease_end"] == later.lease_end == later.issued_at + 7 * DAY
    lic.refresh_from_db()
    assert int(lic.checked_in_at.timestamp()) == later.issued_at
    # A status asked for another device is signed but is not this unit's check-in.
    server_clock(4 * DAY)
    device_api.get("/v1/revocations/status", {"license_id": lic.id, "device_id": "cam-x"})
    lic.refresh_from_db()
    assert int(lic.checked_in_at.timestamp()) == later.issued_at


def test_a_status_without_lease_or_hold_is_signed_as_before(device_api, make_batch, signing_key):
    unit = _activate(device_api, make_batch(units=1))
    payload = documents.verify_document("SVCS1", unit["status"], signing_key.public_key())
    assert "lease_end" not in payload and "suspended" not in payload
    assert License.objects.get(pk=unit["license_id"]).checked_in_at is None


def test_lease_events_once_each_and_in_alerts(device_api, make_batch, server_clock, settings):
    settings.SVC_ALERT_EMAILS = ["ops@example.com"]
    alerts_send()  # the mailbox starts at the log's end
    batch = make_batch(units=2)
    Batch.objects.filter(pk=batch.id).update(max_offline_days=7)
    unit = _activate(device_api, batch)
    events_scan()
    assert not Event.objects.filter(type__startswith="license.lease").exists()
    server_clock(6 * DAY + 3600)
    events_scan()
    events_scan()
    expiring = Event.objects.filter(type=Event.Type.LICENSE_LEASE_EXPIRING)
    assert expiring.count() == 1 and expiring.get().data["license_id"] == unit["license_id"]
    server_clock(8 * DAY)
    events_scan()
    events_scan()
    expired = Event.objects.get(type=Event.Type.LICENSE_LEASE_EXPIRED)
    assert expired.data["device_id"] == "cam-1" and expired.data["max_offline_days"] == 7
    assert alerts_send() == 1
    body = mail.outbox[0].body
    assert "check-in lease of camera cam-1" in body and "refuses analytics" in body
    # A sync moves the check-in: the next lapse is announced again.
    device_api.get(
        "/v1/revocations/status", {"license_id": unit["license_id"], "device_id": "cam-1"}
    )
    server_clock(16 * DAY)
    events_scan()
    assert Event.objects.filter(type=Event.Type.LICENSE_LEASE_EXPIRED).count() == 2


def test_suspend_and_reinstate_by_license_batch_and_customer(
    device_api, make_batch, customer, signing_key
):
    batch = make_batch(units=2)
    unit = _activate(device_api, batch)

    def suspended() -> bool:
        return revocations.license_status(license_id=unit["license_id"], device_id="cam-1")[
            "suspended"
        ]

    scopes = [
        {"license_id": unit["license_id"]},
        {"batch_id": batch.id},
        {"customer_id": customer.id},
    ]
    for scope in scopes:
        hold = services.license_suspend(reason="invoice 2026-0042 unpaid", **scope)
        assert hold.suspended and hold.changed and suspended()
        assert not services.license_suspend(reason="again", **scope).changed
        assert Suspension.objects.get().reason == "invoice 2026-0042 unpaid"
        back = services.license_reinstate(**scope)
        assert back.changed and not back.suspended and not suspended()
        assert not services.license_reinstate(**scope).changed
    held = Event.objects.filter(type__in=["license.suspended", "license.reinstated"])
    types = list(held.order_by("id").values_list("type", flat=True))
    assert types == ["license.suspended", "license.reinstated"] * 3
    assert Batch.objects.get(pk=batch.id).units_activated == 1  # the seat stays taken


def test_suspend_refuses_what_it_cannot_name(admin_api, customer):
    for body, status in (
        ({"reason": "x"}, 400),
        ({"license_id": "LIC-1", "batch_id": "B-1", "reason": "x"}, 400),
        ({"license_id": "LIC-NOPE", "reason": "x"}, 404),
        ({"customer_id": customer.id, "reason": "  "}, 400),
        ({"customer_id": customer.id}, 400),
    ):
        answer = admin_api.post("/v1/admin/suspend", body, format="json")
        assert answer.status_code == status and "detail" in answer.json()


def test_a_suspended_batch_keeps_its_seats_and_its_invoice(device_api, make_batch, customer):
    """Suspension changes no charge: per-unit lines stand (the seat stays taken), and the
    usage counted before the hold is billed as uploaded; none can be counted during it."""
    from billing.rating import invoice_rate

    batch = make_batch(units=5)
    for device in ("cam-1", "cam-2"):
        _activate(device_api, batch, device)
    before = invoice_rate(customer_id=customer.id, period_days=30)
    services.license_suspend(batch_id=batch.id, reason="invoice unpaid")
    during = invoice_rate(customer_id=customer.id, period_days=30)
    services.license_reinstate(batch_id=batch.id)
    assert during["lines"] == before["lines"] and during["total"] == before["total"]
    assert [line["quantity"] for line in during["lines"] if line["kind"] == "unit_activation"] == [
        2
    ]


@pytest.mark.parametrize("scope", ["batch", "customer"])
def test_a_held_batch_takes_no_new_seat_and_its_units_reactivate(
    device_api, make_batch, customer, signing_key, scope
):
    """While a batch (or its customer) is held, a new camera is refused before any seat
    is taken (nothing billed during the hold); a camera on file re-activates and learns
    the hold from its status; after reinstating, new cameras activate again."""
    batch = make_batch(units=5)
    unit = _activate(device_api, batch, "cam-ON-FILE")
    target = {"batch_id": batch.id} if scope == "batch" else {"customer_id": customer.id}
    services.license_suspend(reason="invoice 2026-0042 unpaid", **target)
    refused = device_api.post(
        "/v1/activate", {"batch_token": batch.license.token, "device_id": "cam-NEW"}, format="json"
    )
    assert refused.status_code == 403
    detail = refused.json()["detail"]
    named = f"batch {batch.id}" if scope == "batch" else f"customer {customer.id}"
    assert detail.startswith(f"{named} is suspended (invoice 2026-0042 unpaid)"), detail
    assert "cam-NEW" in detail and "reinstates" in detail
    assert Batch.objects.get(pk=batch.id).units_activated == 1
    again = _activate(device_api, batch, "cam-ON-FILE")
    assert again["license_id"] == unit["license_id"]
    assert documents.parse_status(again["status"], signing_key.public_key()).suspended
    services.license_reinstate(**target)
    assert _activate(device_api, batch, "cam-NEW")["license_id"] != unit["license_id"]
    assert Batch.objects.get(pk=batch.id).units_activated == 2


def test_units_silent_beyond_their_lease_on_the_dashboard_and_fleet_filter(
    device_api, make_batch, server_clock, admin_user
):
    """The dashboard counts the units whose lease ended (not revoked); its link lists them;
    one sync takes a unit off the count."""
    from django.test import Client
    from django.urls import reverse

    weekly = make_batch(units=3)
    Batch.objects.filter(pk=weekly.id).update(max_offline_days=7)
    monthly = make_batch(units=2)
    Sku.objects.filter(code=monthly.sku).update(max_offline_days=30)
    Batch.objects.filter(pk=monthly.id).update(max_offline_days=None)
    silent = _activate(device_api, weekly, "cam-SILENT-7")
    syncing = _activate(device_api, weekly, "cam-SYNCS-7")
    scrapped = _activate(device_api, weekly, "cam-SCRAPPED-7")
    _activate(device_api, monthly, "cam-MONTHLY-30")
    short = _activate(device_api, monthly, "cam-SHORT-2")
    License.objects.filter(pk=short["license_id"]).update(max_offline_days=2)
    services.license_revoke(license_id=scrapped["license_id"], reason="camera scrapped")
    assert past_lease_count() == 0
    server_clock(3 * DAY)
    assert past_lease_count() == 1  # the two-day lease
    server_clock(6 * DAY)
    device_api.get(
        "/v1/revocations/status", {"license_id": syncing["license_id"], "device_id": "cam-SYNCS-7"}
    )
    server_clock(8 * DAY)
    assert past_lease_count() == 2  # cam-SILENT-7 and cam-SHORT-2; the revoked unit is not

    client = Client()
    client.force_login(admin_user)
    body = client.get(reverse("console-dashboard")).content.decode()
    tile = body[body.index('id="past-lease"') :][:900]
    assert "Units silent beyond their lease" in tile and ">2</a>" in tile
    fleet = reverse("admin:licensing_activation_changelist")
    listed = client.get(f"{fleet}?past_lease=1&license__revoked_at__isnull=True").content.decode()
    assert "cam-SILENT-7" in listed and "cam-SHORT-2" in listed
    for absent in ("cam-SYNCS-7", "cam-MONTHLY-30", "cam-SCRAPPED-7"):
        assert absent not in listed
    assert silent["license_id"]  # activated at day 0, silent since
    response = client.get(f"{fleet}?past_lease=yes")
    assert response.status_code == 302 and "e=1" in response["Location"]
