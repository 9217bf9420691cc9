"""What the portal's pages and the customer API cost the database does not grow with the
fleet: a customer with 10 units and one with 200 are read in the same number of queries
(the dashboard sums daily rollups and reads a page of each list, never every unit)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from licensing.services import batch_issue, unit_activate
from portal import services
from tests.factories import CustomerFactory
from tests.portal.conftest import account_for

pytestmark = pytest.mark.django_db

PAGES = ["portal-dashboard", "portal-batches", "portal-fleet", "portal-invoices",
         "portal-renewals", "portal-api-keys", "portal-webhooks"]  # fmt: skip
API = ["/v1/customer/fleet", "/v1/customer/batches", "/v1/customer/usage?limit=50",
       "/v1/customer/invoices"]  # fmt: skip


def _customer_with(units: int, tag: str):
    customer = CustomerFactory(name=f"{tag} GmbH")
    for n in range(2):
        batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=units)
        for k in range(units // 2):
            unit_activate(batch_token=batch.license.token, device_id=f"{tag}-{n}-{k:04d}")
    account = account_for(customer, f"ops@{tag.lower()}.example.com")
    _row, key = services.customer_key_create(customer_id=customer.pk, name="k", created_by="t")
    return account, key


def _queries(call) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert call().status_code == 200
    return len(captured)


def test_pages_and_api_read_the_same_number_of_queries_whatever_the_fleet(client, settings):
    settings.SVC_CUSTOMER_API_RATE = 10_000
    counts = {}
    for size, tag in ((10, "Small"), (200, "Large")):
        account, key = _customer_with(size, tag)
        client.force_login(account.user)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        pages = {name: _queries(lambda n=name: client.get(reverse(n))) for name in PAGES}
        calls = {path: _queries(lambda p=path, a=api: a.get(p)) for path in API}
        counts[size] = pages | calls
    assert counts[10] == counts[200], counts
    print(f"\nqueries per page and call (10 and 200 units alike): {counts[200]}")
