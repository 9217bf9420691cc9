"""The issue's "done when", through the public surface: activate a camera, upload the
same usage twice and see it counted once, rate the invoice, issue it and export CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from tests.billing.conftest import record

pytestmark = pytest.mark.django_db


def test_new_user_walkthrough(admin_api, device_api, tmp_path, monkeypatch, server_clock):
    # The camera is activated two days ago (the server's clock set back), and uploads
    # yesterday's usage today: a record lies within its licence's life (contract §7).
    server_clock(-2 * 86400)
    customer = admin_api.post(
        "/v1/admin/customers", {"name": "Acme", "kind": "oem", "contact": "ops@acme.example"},
        format="json",
    ).json()["customer_id"]  # fmt: skip
    batch = admin_api.post(
        "/v1/admin/batches", {"customer_id": customer, "sku": "API-METERED", "units": 3},
        format="json",
    ).json()  # fmt: skip
    unit = device_api.post(
        "/v1/activate", {"batch_token": batch["batch_token"], "device_id": "cam-001"},
        format="json",
    ).json()  # fmt: skip
    server_clock(0)
    hour = int(timezone.now().timestamp()) // 3600 * 3600 - 86400
    records = [record(hour + i * 3600, inferences=6000) for i in range(5)]  # 30 000
    body = {"device_id": "cam-001", "license_id": unit["license_id"], "records": records}
    auth = {"HTTP_AUTHORIZATION": f"Bearer {unit['unit_token']}"}
    for accepted, duplicates in [(5, 0), (0, 5)]:
        answer = device_api.post("/v1/usage", body, format="json", **auth).json()
        assert answer.pop("receipt").startswith("SVCU1.")
        answer.pop("certificates", None)  # of the receipt's key (key rotation)
        assert answer == {
            "accepted": accepted, "duplicates": duplicates, "conflicts": [], "refused": []
        }  # fmt: skip
    usage = admin_api.get(f"/v1/admin/usage/{unit['license_id']}").json()
    assert (usage["inferences"], usage["records"]) == (30_000, 5)
    # 1 unit x 15.00; allowance 1 x 10 000 for 30 days, overage 20 000 x 1.20 / 1000 = 24.00
    invoice = admin_api.get(f"/v1/admin/invoice/{customer}?period_days=30").json()
    assert [(li["kind"], li["quantity"], li["unit_price"], li["amount"])
            for li in invoice["lines"]] == [("unit_activation", 1, 15.0, 15.0),
                                            ("metered_overage", 20.0, 1.2, 24.0)]  # fmt: skip
    assert invoice["total"] == 39.0
    # The scheduled job of tomorrow issues the period that ends at tomorrow's 00:00 UTC,
    # the first one that contains the activation of two days ago.
    tomorrow = timezone.now() + dt.timedelta(days=1)
    monkeypatch.setattr("billing.limits.now", lambda: tomorrow)
    call_command("issue_invoices", "--period-days", "30", stdout=io.StringIO())
    out = tmp_path / "invoices.csv"
    call_command("export_invoices", "--format", "csv", "--out", str(out), stderr=io.StringIO())
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8-sig"))))
    assert [(r["kind"], r["amount"]) for r in rows] == [
        ("unit_activation", "15.00"),
        ("metered_overage", "24.00"),
    ]
