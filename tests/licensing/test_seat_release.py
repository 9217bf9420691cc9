"""Seat release (issue 13): an operator gives the seat of a dead or replaced camera back
to its batch; the replacement's activation is a transfer, never billed again; a policy
bounds releases per batch per window."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from billing.issuing import invoice_issue
from billing.reconciliation import ledger_reconcile
from licensing.models import Activation, Batch, License, Revocation

pytestmark = pytest.mark.django_db


def activate(client, token, device_id):
    return client.post(
        "/v1/activate", {"batch_token": token, "device_id": device_id}, format="json"
    )


def release(client, **body):
    return client.post("/v1/admin/seats/release", body, format="json")


@pytest.fixture
def full_batch(make_batch, device_api):
    """A 20-unit batch (the default policy allows one release per 30 days) with every
    seat taken by cam-0 .. cam-19."""
    batch = make_batch(units=20)
    for n in range(20):
        assert activate(device_api, batch.license.token, f"cam-{n}").status_code == 200
    batch.refresh_from_db()
    assert batch.units_remaining == 0
    return batch


def _license_of(batch, device_id) -> str:
    return Activation.objects.get(batch=batch, device_id=device_id).license_id


def test_release_revokes_the_unit_and_returns_its_seat(admin_api, device_api, full_batch):
    dead = _license_of(full_batch, "cam-3")
    assert activate(device_api, full_batch.license.token, "cam-new").status_code == 402

    response = release(admin_api, license_id=dead, reason="camera burnt out")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["license_id"] == dead and body["batch_id"] == full_batch.id
    assert body["device_id"] == "cam-3" and body["reason"] == "camera burnt out"
    assert body["already_released"] is False
    assert body["batch_units_remaining"] == 1
    assert (body["releases_in_window"], body["release_limit"], body["window_days"]) == (1, 1, 30)
    lic = License.objects.get(pk=dead)
    assert lic.revoked_at is not None and lic.revoke_reason == "camera burnt out"
    assert Revocation.objects.filter(license_id=dead).exists()  # on the signed list
    full_batch.refresh_from_db()
    assert (full_batch.units_activated, full_batch.released_seats) == (19, 1)
    status = admin_api.get(f"/v1/admin/batches/{full_batch.id}").json()
    assert status["units_remaining"] == 1
    entry = AuditEntry.objects.get(action="seat.release")
    assert entry.result == AuditEntry.Result.OK and entry.target == dead
    # The dead camera cannot come back with its revoked licence.
    assert activate(device_api, full_batch.license.token, "cam-3").status_code == 403


def test_the_replacement_takes_the_seat_as_a_transfer_not_billed_again(
    admin_api, device_api, full_batch
):
    dead = _license_of(full_batch, "cam-3")
    release(admin_api, license_id=dead, reason="replaced")

    response = activate(device_api, full_batch.license.token, "cam-replacement")

    assert response.status_code == 200
    assert response.json()["batch_units_remaining"] == 0
    record = Activation.objects.get(batch=full_batch, device_id="cam-replacement")
    assert record.transfer_of.license_id == dead
    full_batch.refresh_from_db()
    assert (full_batch.units_activated, full_batch.released_seats) == (20, 0)
    fleet = admin_api.get(f"/v1/admin/fleet?batch_id={full_batch.id}").json()["units"]
    by_device = {unit["device_id"]: unit for unit in fleet}
    assert by_device["cam-replacement"]["transfer_of"] == dead
    assert by_device["cam-3"]["seat_released"] == 1 and by_device["cam-3"]["revoked"] == 1
    assert by_device["cam-4"]["seat_released"] == 0 and by_device["cam-4"]["transfer_of"] is None
    # The seat was taken once; a next camera finds the batch exhausted again.
    assert activate(device_api, full_batch.license.token, "cam-more").status_code == 402
    # Billing: 20 seats sold and paid once, 21 activations on file.
    preview = admin_api.get(f"/v1/admin/invoice/{full_batch.customer_id}?period_days=30").json()
    lines = [line for line in preview["lines"] if line["kind"] == "unit_activation"]
    assert [line["quantity"] for line in lines] == [20]
    assert Activation.objects.filter(batch=full_batch).count() == 21


def test_an_issued_invoice_bills_the_seat_once_and_reconcile_counts_the_transfer(
    admin_api, device_api, full_batch, server_clock
):
    release(admin_api, license_id=_license_of(full_batch, "cam-0"), reason="replaced")
    activate(device_api, full_batch.license.token, "cam-replacement")
    now = timezone.now()
    tomorrow = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    server_clock((tomorrow + dt.timedelta(hours=1) - now).total_seconds())

    invoice = invoice_issue(customer_id=full_batch.customer_id, period_days=30, end=tomorrow)

    lines = [line for line in invoice.lines.all() if line.kind == "unit_activation"]
    assert [line.quantity for line in lines] == [Decimal(20)]
    report = ledger_reconcile(customer_id=full_batch.customer_id)
    assert report.ok, report.problems
    (row,) = report.rows
    assert (row.activations, row.activations_billed, row.transfers) == (20, 20, 1)


def test_releasing_again_answers_the_first_release_and_frees_nothing_more(admin_api, full_batch):
    dead = _license_of(full_batch, "cam-3")
    first = release(admin_api, license_id=dead, reason="dead").json()

    again = release(admin_api, license_id=dead, reason="dead, really")

    assert again.status_code == 200
    assert again.json()["already_released"] is True
    assert again.json()["released_at"] == first["released_at"]
    assert again.json()["reason"] == "dead"
    full_batch.refresh_from_db()
    assert (full_batch.units_activated, full_batch.released_seats) == (19, 1)


def test_the_policy_bounds_releases_per_batch_and_window(
    admin_api, device_api, full_batch, server_clock
):
    release(admin_api, license_id=_license_of(full_batch, "cam-1"), reason="dead")

    refused = release(admin_api, license_id=_license_of(full_batch, "cam-2"), reason="dead")

    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert f"batch {full_batch.id} has released 1 seats in the last 30 days" in detail
    assert "1 per 30 days (5% of 20 units, at least 1)" in detail
    assert "next release is possible at" in detail
    assert License.objects.get(pk=_license_of(full_batch, "cam-2")).revoked_at is None
    refusal = AuditEntry.objects.filter(action="seat.release", result="failed").get()
    assert "release policy" in refusal.message
    # The window rolls on: 30 days later the batch may release again.
    server_clock(30 * 86400 + 1)
    assert (
        release(admin_api, license_id=_license_of(full_batch, "cam-2"), reason="dead").json()[
            "releases_in_window"
        ]
        == 1
    )


def test_the_policy_scales_with_the_batch(admin_api, device_api, make_batch, settings):
    settings.SVC_SEAT_RELEASE_POLICY = (10.0, 30)
    batch = make_batch(units=30)
    for n in range(4):
        activate(device_api, batch.license.token, f"cam-{n}")
    answers = [
        release(admin_api, license_id=_license_of(batch, f"cam-{n}"), reason="dead")
        for n in range(4)
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 409]
    assert answers[2].json()["release_limit"] == 3


def test_a_seat_can_be_named_by_batch_and_device(admin_api, full_batch):
    response = release(admin_api, batch_id=full_batch.id, device_id="cam-7", reason="replaced")
    assert response.status_code == 200
    assert response.json()["license_id"] == _license_of(full_batch, "cam-7")


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"license_id": "LIC-NOPE", "reason": "x"}, 404, "licence LIC-NOPE does not exist"),
        ({"batch_id": "B-2026-NOPE", "device_id": "cam-1", "reason": "x"}, 404, "batch"),
        ({"reason": "x"}, 400, "name the seat"),
        ({"license_id": "LIC-X", "device_id": "cam-1", "reason": "x"}, 400, "not both"),
        ({"license_id": "LIC-X"}, 400, "reason"),
        ({"license_id": "LIC-X", "reason": "   "}, 400, "reason"),
    ],
)
def test_bad_release_requests_are_4xx_with_detail(admin_api, body, status, words):
    response = release(admin_api, **body)
    assert response.status_code == status, response.json()
    assert words in response.json()["detail"]


def test_an_unknown_device_on_a_real_batch_is_404(admin_api, full_batch):
    response = release(admin_api, batch_id=full_batch.id, device_id="cam-x", reason="dead")
    assert response.status_code == 404
    assert f"device cam-x has no activation on batch {full_batch.id}" in response.json()["detail"]


def test_only_a_unit_license_holds_a_seat(admin_api, full_batch, customer):
    for license_id in (full_batch.license_id, _direct(admin_api, customer)):
        response = release(admin_api, license_id=license_id, reason="dead")
        assert response.status_code == 400
        assert (
            "only a unit licence activated from a batch holds a seat" in (response.json()["detail"])
        )


def _direct(admin_api, customer) -> str:
    body = {"customer_id": customer.id, "sku": "DETECT-STD", "device_id": "cam-d"}
    return admin_api.post("/v1/admin/licenses", body, format="json").json()["license_id"]


def test_releasing_an_already_revoked_unit_keeps_its_revocation(admin_api, full_batch):
    stolen = _license_of(full_batch, "cam-4")
    admin_api.post("/v1/admin/revoke", {"license_id": stolen, "reason": "stolen"}, format="json")
    before = License.objects.get(pk=stolen).revoked_at

    assert release(admin_api, license_id=stolen, reason="written off").status_code == 200

    lic = License.objects.get(pk=stolen)
    assert (lic.revoked_at, lic.revoke_reason) == (before, "stolen")
    assert Batch.objects.get(pk=full_batch.pk).units_remaining == 1


def test_release_needs_the_admin_key(device_api, full_batch):
    response = release(device_api, license_id=_license_of(full_batch, "cam-1"), reason="x")
    assert response.status_code == 401
