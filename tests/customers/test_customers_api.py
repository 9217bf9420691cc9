from __future__ import annotations

import re

import pytest

from customers.models import Customer

pytestmark = pytest.mark.django_db


def create(client, **body):
    return client.post(
        "/v1/admin/customers", {"name": "Acme", "kind": "oem", **body}, format="json"
    )


def test_create_generates_unguessable_crockford_id(admin_api):
    response = create(admin_api, contact="ops@acme.example")
    assert response.status_code == 201
    customer_id = response.json()["customer_id"]
    assert re.fullmatch(r"CUST-[0-9A-HJKMNP-TV-Z]{10,}", customer_id)
    assert Customer.objects.get(pk=customer_id).contact == "ops@acme.example"


@pytest.mark.parametrize("chosen", ["ACME01", "CUST-ACME01", "acme01"])
def test_operator_chosen_id_is_stored_with_prefix(admin_api, chosen):
    response = create(admin_api, id=chosen)
    assert response.status_code == 201
    assert response.json()["customer_id"] == "CUST-ACME01"


def test_taken_id_is_409(admin_api):
    create(admin_api, id="ACME01")
    response = create(admin_api, id="CUST-ACME01")
    assert response.status_code == 409
    assert "CUST-ACME01" in response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [{"kind": "reseller"}, {"name": 7}, {"name": ""}, {"id": "bad id!"}, {"id": "stra\u00dfe"}],
)
def test_invalid_customer_is_400_with_detail(admin_api, body):
    response = create(admin_api, **body)
    assert response.status_code == 400
    assert set(response.json()) == {"detail"}


def test_a_customer_is_read_by_id_and_an_unknown_one_is_404(admin_api):
    created = create(admin_api, name="Acme Cameras", kind="oem", id="ACME77").json()
    got = admin_api.get(f"/v1/admin/customers/{created['customer_id']}")
    assert got.status_code == 200 and got.json() == created
    missing = admin_api.get("/v1/admin/customers/CUST-NOBODY")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "customer CUST-NOBODY does not exist"}
