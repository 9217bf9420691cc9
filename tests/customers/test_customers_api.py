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


def test_a_customer_is_edited_and_the_audit_entry_holds_before_and_after(admin_api):
    from audit.models import AuditEntry

    created = create(admin_api, name="Acme", id="ACME88", contact="old@acme.example").json()
    url = f"/v1/admin/customers/{created['customer_id']}"
    response = admin_api.patch(
        url,
        {
            "name": "Acme Cameras GmbH",
            "billing_address": "  Hafenstraße 1 \r\n\r\n20457 Hamburg\nGermany ",
            "tax_id": "DE123456789",
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "customer_id": "CUST-ACME88",
        "name": "Acme Cameras GmbH",
        "kind": "oem",
        "contact": "old@acme.example",  # left out: kept
        "billing_address": "Hafenstraße 1\n20457 Hamburg\nGermany",
        "tax_id": "DE123456789",
        "country": "",  # VAT (issue 43): the seller's country
        "vat_id": "",
        "tax_exemption": "",
    }
    entry = AuditEntry.objects.filter(action="customer.update").get()
    assert entry.target == "CUST-ACME88" and entry.result == "ok"
    assert entry.detail["changes"] == {
        "name": {"before": "Acme", "after": "Acme Cameras GmbH"},
        "billing_address": {"before": "", "after": "Hafenstraße 1\n20457 Hamburg\nGermany"},
        "tax_id": {"before": "", "after": "DE123456789"},
    }
    assert "contact" not in entry.detail["changes"]


def test_an_edit_to_another_customers_name_is_409_naming_it(admin_api):
    create(admin_api, name="Nordlicht", id="NORD")
    create(admin_api, name="Harbour", id="HARB")
    response = admin_api.patch("/v1/admin/customers/CUST-HARB", {"name": " nordlicht "},
                               format="json")  # fmt: skip
    assert response.status_code == 409
    assert "CUST-NORD" in response.json()["detail"]
    assert Customer.objects.get(pk="CUST-HARB").name == "Harbour"


@pytest.mark.parametrize(
    ("body", "named"),
    [({"kind": "end_user"}, "'kind'"), ({"id": "X"}, "'id'"), ({"nmae": "x"}, "'nmae'")],
)
def test_an_edit_of_a_field_that_cannot_change_is_400_naming_it(admin_api, body, named):
    create(admin_api, name="Acme", id="ACME99")
    response = admin_api.patch("/v1/admin/customers/CUST-ACME99", body, format="json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert named in detail and "name, contact, billing_address, tax_id" in detail


def test_an_edit_of_an_unknown_customer_is_404(admin_api):
    response = admin_api.patch("/v1/admin/customers/CUST-NOPE", {"name": "x"}, format="json")
    assert response.status_code == 404


def test_an_unknown_field_on_create_is_400_not_a_random_id(admin_api):
    response = create(admin_api, customer_id="CUST-ACME")
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "unknown field 'customer_id': this endpoint takes name, kind, contact, "
        "billing_address, tax_id, country, vat_id, tax_exemption, id"
    )
    assert not Customer.objects.exists()
