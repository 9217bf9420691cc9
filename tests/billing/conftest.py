"""Billing fixtures: activate cameras, issue direct licences and revoke them at the times a
hand-computed invoice needs (the server clock stopped at that moment), and upload usage
over HTTP."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools

import pytest

from billing.services import invoice_issue
from customers.services import customer_create
from licensing.models import Activation, License, Sku
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


# --- VAT and e-invoices (issue 43) ----------------------------------------------------

VAT_JAN, VAT_FEB = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (1, 2))
# A customer per VAT category, as billing.vat decides it for the test run's seller (DE).
VAT_CUSTOMERS = {
    "S": {"country": "DE", "vat_id": "DE136695976"},
    "AE": {"country": "FR", "vat_id": "FR40303265045"},
    "S-consumer": {"country": "NL"},
    "O": {"country": "US"},
    "E": {"country": "DE", "tax_exemption": "Exempt under a test arrangement (not real)"},
}
# Per price list: its currency, the unit price of the licence and the price per 1000
# inferences over the allowance. KWD's amounts are in fils; KWD-10's whole tens of fils
# (what EN 16931's two decimals can hold).
VAT_PRICES = {
    "EUR": ("EUR", "1234.5", "1.2345"),
    "JPY": ("JPY", "99999", "12"),
    "KWD": ("KWD", "4.125", "0.0125"),
    "KWD-10": ("KWD", "4.12", "10"),
}


@pytest.fixture
def vat_documents(direct, upload):
    """``make(case, prices)``: a customer of a VAT case (VAT_CUSTOMERS) sold a direct
    licence of a metered SKU priced by ``prices`` (VAT_PRICES) in January, 123,456
    inferences over its allowance, invoiced for January; returns the invoice."""
    made: set[str] = set()
    serial = itertools.count(1)

    def make(case: str, prices: str = "EUR"):
        code = f"METER-{prices}"
        currency, unit_price, per_1000 = VAT_PRICES[prices]
        if code not in made:
            entry = Sku.objects.get(pk="API-METERED")
            entry.pk, entry.currency = code, currency
            entry.unit_price_tiers = [{"from_units": 1, "unit_price": unit_price}]
            entry.overage_tiers = [{"from_inferences": 0, "price_per_1000": per_1000}]
            entry.save()
            made.add(code)
        owner = customer_create(
            name=f"Käufer {case} {prices} {next(serial)} Überseehandel GmbH & Co. KG",
            kind="oem",
            billing_address="Überseeallee 12\n20457 Hamburg",
            **VAT_CUSTOMERS[case],
        )
        lic = direct(code, f"cam-{case}-{prices}", at=VAT_JAN + dt.timedelta(days=2), owner=owner)
        answer = upload(lic, [record(hour(VAT_JAN) + 5 * 86400, inferences=10_000 + 123_456)])
        assert answer.status_code == 200, answer.content
        return invoice_issue(customer_id=owner.id, period_days=31, end=VAT_FEB, currency=currency)

    return make
