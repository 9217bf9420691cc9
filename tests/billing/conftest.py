"""Billing fixtures: activate cameras, issue direct licences, upload usage over HTTP, and
move the recorded times of those events where a hand-computed invoice needs them."""

from __future__ import annotations

import datetime as dt

import pytest

from licensing.models import Activation, License
from licensing.services import license_issue
from licensing.services.activation import unit_activate
from tests.history import rewritten


def hour(moment: dt.datetime) -> int:
    return int(moment.timestamp())


def record(start: int, *, inferences: int = 0, length: int = 3600, **counts: int) -> dict:
    return {
        "period_start": start,
        "period_end": start + length,
        "inferences": inferences,
        "frames": counts.get("frames", 0),
        "stream_seconds": counts.get("stream_seconds", 0),
        "events": counts.get("events", 0),
    }


@pytest.fixture
def activate():
    """Activate ``device_id`` from ``batch``; ``at`` moves the activation to that time."""

    def go(batch, device_id: str, at: dt.datetime | None = None) -> License:
        unit = License.objects.get(
            pk=unit_activate(batch_token=batch.license.token, device_id=device_id).license_id
        )
        if at is not None:
            with rewritten():
                Activation.objects.filter(license=unit).update(activated_at=at)
                License.objects.filter(pk=unit.pk).update(issued_at=at)
            unit.refresh_from_db()
        return unit

    return go


@pytest.fixture
def direct(customer):
    """Issue a direct licence; ``at`` moves its issue to that time."""

    def go(sku: str, device_id: str, at: dt.datetime | None = None, owner=None, **kwargs):
        lic = license_issue(
            customer_id=(owner or customer).id, sku=sku, device_id=device_id, **kwargs
        )
        if at is not None:
            with rewritten():
                License.objects.filter(pk=lic.pk).update(issued_at=at)
            lic.refresh_from_db()
        return lic

    return go


def revoke_at(lic: License, at: dt.datetime) -> None:
    with rewritten():
        License.objects.filter(pk=lic.pk).update(revoked_at=at, revoke_reason="test")


@pytest.fixture
def upload(device_api):
    """POST /v1/usage as the device holding ``lic``; returns the response."""

    def go(lic: License, records: list[dict], *, device_id: str | None = None, token=None, **body):
        return device_api.post(
            "/v1/usage",
            {"device_id": device_id or lic.device_id, "license_id": lic.id, "records": records}
            | body,
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {token or lic.token}",
        )

    return go
