"""GET /v1/admin/invoice/{customer_id} (spec §4.3, contract §4 and §6)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_unknown_customer_is_404(admin_api):
    response = admin_api.get("/v1/admin/invoice/CUST-NOBODY")
    assert response.status_code == 404
    assert response.json() == {"detail": "customer CUST-NOBODY does not exist"}


@pytest.mark.parametrize("value", ["0", "3661", "-1", "abc", "30.0", "3e1", "", " 30"])
def test_period_days_must_be_an_integer_1_to_3660(admin_api, customer, value):
    response = admin_api.get(f"/v1/admin/invoice/{customer.id}", {"period_days": value})
    assert response.status_code == 400
    assert "period_days" in response.json()["detail"]


@pytest.mark.parametrize(("query", "days"), [({}, 30), ({"period_days": "1"}, 1),
                                             ({"period_days": "3660"}, 3660)])  # fmt: skip
def test_period_days_default_and_bounds(admin_api, customer, query, days):
    body = admin_api.get(f"/v1/admin/invoice/{customer.id}", query).json()
    assert body["period_end"] - body["period_start"] == days * 86400
    assert body["customer_id"] == customer.id
    assert body["lines"] == [] and body["total"] == 0 and body["currency"] == "EUR"


def test_invoice_of_new_activation_renders_json_numbers(admin_api, customer, make_batch, activate):
    batch = make_batch(units=3, sku="DETECT-STD")
    activate(batch, "cam-1")
    body = admin_api.get(f"/v1/admin/invoice/{customer.id}").json()
    assert body["lines"] == [
        {
            "kind": "unit_activation",
            "sku": "DETECT-STD",
            "description": f"DETECT-STD units activated from batch {batch.id}",
            "quantity": 1,
            "unit": "unit",
            "unit_price": 90.0,
            "amount": 90.0,
            "batch_id": batch.id,
        }
    ]
    assert body["total"] == 90.0


def test_invoice_needs_admin_key(device_api, customer):
    assert device_api.get(f"/v1/admin/invoice/{customer.id}").status_code == 401
