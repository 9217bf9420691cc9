"""The OpenAPI schema states the rules of a request the service checks (issue 37, item 6):
for each rule the schema gained, the service refuses exactly what the schema refuses,
asked with the schema's own words (the served document, checked by ``jsonschema``).
``tests/test_fuzz_api.py`` checks the same in bulk with generated requests."""

from __future__ import annotations

import functools
import re

import pytest
from drf_spectacular.generators import SchemaGenerator
from jsonschema import Draft4Validator

from customers.models import Customer
from events.models import Webhook

pytestmark = pytest.mark.django_db


@functools.cache
def _components() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def _admits(component: str, body: dict) -> bool:
    """Whether the request body schema ``component`` admits ``body`` (its properties
    with their references resolved, and its ``oneOf``)."""
    schemas = _components()
    schema = {**schemas[component], "components": {"schemas": schemas}}
    return Draft4Validator(schema, format_checker=None).is_valid(body)


@pytest.mark.parametrize("name", [0, 1.5, True, ["x"], {"x": 1}])
def test_a_json_number_where_a_string_is_declared_is_refused(admin_api, customer, name):
    response = admin_api.post(
        f"/v1/admin/customers/{customer.id}/users",
        {"email": "ops@example.com", "name": name},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["detail"].startswith("name: must be a string"), response.json()
    assert not _admits("InvitationIn", {"email": "ops@example.com", "name": name})


@pytest.mark.parametrize(
    "chosen",
    ["acme", "Acme_2", "cust-acme", "CUST-X", "cust-", "CUST-", "a" * 59, "a" * 60,
     "cust-" + "b" * 59, "cust-" + "b" * 60, " acme ", "ac.me", "ß", "custo", "Cust9"],
)  # fmt: skip
def test_a_chosen_customer_id_is_taken_exactly_when_the_schema_admits_it(admin_api, chosen):
    body = {"name": f"Chosen {chosen!r}", "kind": "oem", "id": chosen}
    response = admin_api.post("/v1/admin/customers", body, format="json")
    assert response.status_code == (201 if _admits("CustomerIn", body) else 400), (
        chosen,
        response.content,
    )
    assert Customer.objects.exists() == (response.status_code == 201)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "HTTP://127.0.0.1/",
        "http://127.0.0.1:0065535/x?y#z",
        "http://127.0.0.1:/x",
        "http://[::1]:9/hook",
        "http://[::ffff:127.0.0.1]/hook",
        " http://127.0.0.1:9/hook",  # white space around a URL is refused, not trimmed
        "http://127.0.0.1:9/hook\u3000",
        "http://[1:2]/hook",  # a bracketed host that is no address (was a 500)
        "http://a[::1]/hook",
        "http://@127.0.0.1/hook",  # an empty user info
        "http://127.0.0.1:65536/hook",
        "http://127.0.0.1:+1/hook",
        "http:/127.0.0.1/hook",
        "ftp://127.0.0.1/hook",
    ],
)
def test_a_webhook_url_is_taken_exactly_when_the_schema_admits_it(admin_api, settings, url):
    settings.SVC_WEBHOOK_ALLOW_HTTP = settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    body = {"url": url, "events": ["*"]}
    response = admin_api.post("/v1/admin/webhooks", body, format="json")
    admitted = _admits("WebhookIn", body)
    assert response.status_code == (201 if admitted else 400), (url, response.content)
    if not admitted:
        assert response.json()["detail"].startswith("url: must be https://host")
    assert Webhook.objects.exists() == admitted


@pytest.mark.parametrize(
    "named",
    [{}, {"license_id": "L"}, {"batch_id": "B", "device_id": "d"},
     {"license_id": "L", "batch_id": "B"}, {"license_id": "L", "device_id": "d"},
     {"batch_id": "B"}, {"device_id": "d"}, {"license_id": "L", "batch_id": "B", "device_id": "d"}],
)  # fmt: skip
def test_a_seat_is_named_one_way_as_the_schema_says(admin_api, named):
    body = {**named, "reason": "camera replaced"}
    response = admin_api.post("/v1/admin/seats/release", body, format="json")
    # A seat named one way is looked up (404: none of these exist); else 400.
    assert response.status_code == (404 if _admits("SeatReleaseIn", body) else 400), (
        named,
        response.content,
    )


@pytest.mark.parametrize(
    "named",
    [{}, {"batch_id": "B-1"}, {"license_id": "L-1"}, {"batch_id": "B-1", "license_id": "L-1"}],
)
def test_one_of_batch_and_license_is_renewed_as_the_schema_says(admin_api, named):
    body = {**named, "idempotency_key": "k-1"}
    response = admin_api.post("/v1/admin/renew", body, format="json")
    assert response.status_code == (404 if _admits("RenewIn", body) else 400), (
        named,
        response.content,
    )


@pytest.mark.parametrize(
    "key", ["k", " k ", "k" * 200, "k" * 201, "k\u2028k", "k\u00a0k", "\u3000"]
)
def test_an_idempotency_key_is_taken_exactly_when_the_schema_admits_it(admin_api, key):
    body = {"batch_id": "B-NOBODY", "idempotency_key": key}
    printable = key.strip().isprintable()  # the schema's format "printable", in words
    admitted = _admits("RenewIn", body) and printable
    response = admin_api.post("/v1/admin/renew", body, format="json")
    assert response.status_code == (404 if admitted else 400), (key, response.content)


@pytest.mark.parametrize("days", [0, 1, 20_000])
@pytest.mark.parametrize("offset", [0, 1, 3600, 86399])
def test_an_invoice_period_ends_at_midnight_as_the_schema_says(admin_api, customer, days, offset):
    body = {"customer_id": customer.id, "period_end": days * 86400 + offset}
    response = admin_api.post("/v1/admin/invoices", body, format="json")
    midnight = re.escape("an invoice period ends at 00:00 UTC of a day")
    refused_for_shape = response.status_code == 400 and re.match(
        midnight, response.json()["detail"]
    )
    assert bool(refused_for_shape) == (not _admits("InvoiceIssueIn", body)), response.content
