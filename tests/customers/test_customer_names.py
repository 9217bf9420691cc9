"""One customer per name (issue 13): a second customer whose name matches an existing
one, ignoring case and surrounding spaces, is refused 409 naming the existing customer's
id, whether it comes through the API (and so svcctl), the admin or the service; the
database's unique index backs the rule."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from audit.models import AuditEntry
from config.errors import Conflict, InvalidInput
from customers import services
from customers.models import Customer
from customers.services import customer_create

pytestmark = pytest.mark.django_db


def create(client, name: str, **body):
    return client.post("/v1/admin/customers", {"name": name, "kind": "oem", **body}, format="json")


@pytest.mark.parametrize("again", ["Acme Cameras", "acme cameras", "  ACME Cameras  "])
def test_a_second_customer_of_the_same_name_is_409_naming_the_first(admin_api, again):
    first = create(admin_api, "Acme Cameras").json()["customer_id"]
    response = create(admin_api, again, kind="end_user")
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert first in detail and "'Acme Cameras'" in detail
    assert Customer.objects.count() == 1
    refused = AuditEntry.objects.filter(action="customer.create").order_by("-id").first()
    assert refused.result == "failed"


def test_a_different_name_and_a_chosen_id_are_still_accepted(admin_api):
    assert create(admin_api, "Acme Cameras").status_code == 201
    assert create(admin_api, "Acme Cameras Asia", id="ACME-ASIA").status_code == 201
    assert create(admin_api, "Acme Camera").status_code == 201


def test_the_name_is_stored_trimmed(admin_api):
    created = customer_create(name="  Nordlicht Security \t", kind="end_user")
    assert created.name == "Nordlicht Security"
    assert admin_api.get(f"/v1/admin/customers/{created.id}").json()["name"] == created.name


def test_a_blank_name_is_refused_by_the_service():
    with pytest.raises(InvalidInput, match="name must not be empty"):
        customer_create(name="   ", kind="oem")


def test_a_taken_id_is_reported_before_a_taken_name(admin_api):
    create(admin_api, "Acme Cameras", id="ACME")
    response = create(admin_api, "Acme Cameras", id="ACME")
    assert response.status_code == 409
    assert response.json()["detail"] == "customer id CUST-ACME is already taken"


def test_the_admin_refuses_the_same_name_with_the_services_message(admin_client):
    first = customer_create(name="Acme Cameras", kind="oem")
    response = admin_client.post(
        reverse("admin:customers_customer_add"), {"name": "ACME cameras", "kind": "oem"}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert f"customer {first.id} is already named" in body
    assert Customer.objects.count() == 1


def test_the_database_refuses_a_duplicate_name_the_service_never_saw():
    customer_create(name="Acme Cameras", kind="oem")
    with pytest.raises(IntegrityError), transaction.atomic():
        Customer.objects.create(id="CUST-RAW", name=" ACME CAMERAS ", kind="oem")


def test_a_concurrent_create_that_loses_at_the_index_names_the_winner(monkeypatch):
    """The service's look-up ran before the winner committed: the unique index refuses
    the insert, and the refusal still names the customer that has the name."""
    winner = customer_create(name="Acme Cameras", kind="oem")
    lookups = iter([None])
    real = services._customer_named
    monkeypatch.setattr(services, "_customer_named", lambda name: next(lookups, real(name)))
    with pytest.raises(Conflict, match=winner.id):
        customer_create(name="acme cameras", kind="oem")
