"""A customer's world for the portal's tests: a batch with activated units (one device
id a spreadsheet would run as a formula), a direct licence, an issued invoice, an API
key, a webhook and a renewal request; and a portal user of that customer."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest
from django.test import Client

from billing.models import Invoice
from billing.services import invoice_issue
from customers.models import Customer
from events.models import Webhook
from licensing.models import Batch, License
from licensing.services import batch_issue, license_issue, unit_activate
from portal import services
from portal.models import CustomerUser, RenewalRequest
from tests.factories import CustomerFactory

PASSWORD = "correct horse battery staple 42"
LINK_BASE = "http://testserver/portal/invitation/"


@dataclass
class World:
    customer: Customer
    account: CustomerUser
    batch: Batch
    units: list[str]  # licence ids of the activated units
    direct: License
    invoice: Invoice
    key: str
    key_prefix: str
    webhook: Webhook
    renewal: RenewalRequest

    def client(self) -> Client:
        client = Client()
        client.force_login(self.account.user)
        return client


def account_for(customer: Customer, email: str) -> CustomerUser:
    invitation, link = services.invitation_create(
        customer_id=customer.pk, email=email, invited_by="ops", link_base=LINK_BASE
    )
    secret = link.rstrip("/").rsplit("/", 1)[1]
    return services.invitation_accept(secret=secret, password=PASSWORD)


def make_world(server_clock, tag: str) -> World:
    customer = CustomerFactory(name=f"{tag} Videoanalyse und Sicherheitstechnik GmbH")
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(today - dt.timedelta(days=3)):
        direct = license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id=f"{tag}-lobby")
    invoice = invoice_issue(customer_id=customer.pk, period_days=30)
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=5)
    units = [
        unit_activate(batch_token=batch.license.token, device_id=device).license_id
        for device in (f"{tag}-cam-001", f'=HYPERLINK("http://x","{tag}")')
    ]
    batch.refresh_from_db()
    row, key = services.customer_key_create(customer_id=customer.pk, name="sync", created_by="t")
    webhook = services.customer_webhook_create(
        customer_id=customer.pk, url="https://127.0.0.1:9/licences", events=["license.activated"]
    )
    renewal = services.renewal_request_create(
        customer_id=customer.pk, target=batch.pk, term_days=None, note="", requested_by="t"
    )
    account = account_for(customer, f"ops@{tag.lower()}.example.com")
    return World(
        customer, account, batch, units, direct, invoice, key, row.prefix, webhook, renewal
    )


@pytest.fixture
def worlds(db, server_clock, settings):
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    return make_world(server_clock, "Alpha"), make_world(server_clock, "Beta")
