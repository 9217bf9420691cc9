"""Billing fixtures: activate cameras, issue direct licences and revoke them at the times a
hand-computed invoice needs (the server clock stopped at that moment), and upload usage
over HTTP."""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest

from licensing.models import Activation, License
from licensing.services import license_issue, license_revoke
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


def _at(server_clock, at: dt.datetime | None):
    return server_clock.at(at) if at is not None else contextlib.nullcontext()


@pytest.fixture
def activate():
    """Activate ``device_id`` from ``batch``; ``at`` moves the activation to that time.
    (Rewritten after the fact, not on a stopped clock: these batches are issued today,
    and the service refuses an activation before its batch's key is valid.)"""

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
def direct(customer, server_clock):
    """Issue a direct licence, at time ``at`` if given."""

    def go(sku: str, device_id: str, at: dt.datetime | None = None, owner=None, **kwargs):
        with _at(server_clock, at):
            return license_issue(
                customer_id=(owner or customer).id, sku=sku, device_id=device_id, **kwargs
            )

    return go


@pytest.fixture
def revoke_at(server_clock):
    """Revoke a licence at time ``at``."""

    def go(lic: License, at: dt.datetime) -> None:
        with server_clock.at(at):
            license_revoke(license_id=lic.id, reason="test")

    return go


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
