"""Unknown filters 404 everywhere, one rule (issue 37, item 6): every admin and customer
list endpoint whose query names a customer, batch or licence answers 404 naming an id
that names nothing (``licensing.selectors.filters_check`` for the admin lists; the
customer's own rows for a customer's key), never 200 with an empty list, which would
read as "nothing there" when the id is simply wrong. The endpoints are found in the
OpenAPI document, so a new list with such a filter is held to the rule too."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from portal.services import customer_key_create

pytestmark = pytest.mark.django_db

FILTERS = ("customer_id", "batch_id", "license_id")
UNKNOWN = {
    "customer_id": "CUST-NOBODY0000",
    "batch_id": "B-2026-NOBODY0000",
    "license_id": "LIC-NOBODY0000",
}
# Every list endpoint with such a filter: the table says which, the schema must agree.
FILTERED_LISTS = {
    "/v1/admin/clones": {"customer_id"},
    "/v1/admin/customer-keys": {"customer_id"},
    "/v1/admin/events": {"customer_id"},
    "/v1/admin/fleet": {"customer_id", "batch_id"},
    "/v1/admin/fleet.csv": {"customer_id", "batch_id"},
    "/v1/admin/invoices": {"customer_id"},
    "/v1/admin/usage/conflicts": {"customer_id", "license_id"},
    "/v1/customer/fleet": {"batch_id"},
    "/v1/customer/usage": {"license_id"},
}
CASES = [(path, name) for path, names in FILTERED_LISTS.items() for name in sorted(names)]


def _filtered_lists() -> dict[str, tuple[set[str], dict]]:
    document = SchemaGenerator().get_schema(request=None, public=True)
    found = {}
    for path, item in document["paths"].items():
        operation = item.get("get")
        if operation is None or not path.startswith(("/v1/admin/", "/v1/customer/")):
            continue
        query = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        if query & set(FILTERS):
            found[path] = (query & set(FILTERS), operation["responses"])
    return found


def test_every_list_with_an_id_filter_is_in_the_table_and_documents_the_404():
    found = _filtered_lists()
    assert {path: names for path, (names, _) in found.items()} == FILTERED_LISTS
    for path, (names, responses) in found.items():
        assert "404" in responses, path
        described = responses["404"]["description"]
        nouns = {"customer_id": "customer", "batch_id": "batch", "license_id": "licence"}
        assert all(nouns[name] in described for name in names), (path, described)


@pytest.fixture
def clients(admin_api, customer):
    _, key = customer_key_create(customer_id=customer.pk, name="sync", created_by="t")
    customer_api = APIClient()
    customer_api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return {"/v1/admin/": admin_api, "/v1/customer/": customer_api}


def _client(clients, path):
    return next(client for prefix, client in clients.items() if path.startswith(prefix))


@pytest.mark.parametrize(("path", "name"), CASES)
def test_a_filter_naming_nothing_is_404_naming_it(clients, path, name):
    response = _client(clients, path).get(path, {name: UNKNOWN[name]}, HTTP_ACCEPT="*/*")
    assert response.status_code == 404, (path, name, response.content)
    assert UNKNOWN[name] in response.json()["detail"]


@pytest.mark.parametrize(("path", "name"), CASES)
def test_a_filter_naming_a_row_lists_it(clients, make_batch, customer, path, name):
    batch = make_batch(units=2)
    real = {"customer_id": customer.pk, "batch_id": batch.pk, "license_id": batch.license.pk}
    response = _client(clients, path).get(path, {name: real[name]}, HTTP_ACCEPT="*/*")
    assert response.status_code == 200, (path, name, response.content)


def test_the_admin_rule_names_the_unknown_customer_as_the_fleet_does(admin_api):
    details = {
        admin_api.get(path, {"customer_id": UNKNOWN["customer_id"]}).json()["detail"]
        for path, names in FILTERED_LISTS.items()
        if path.startswith("/v1/admin/") and "customer_id" in names
    }
    assert details == {f"customer {UNKNOWN['customer_id']} does not exist"}
