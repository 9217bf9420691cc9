"""Trials in the customer portal (issue 42 item 3): a trial batch says so on the batches
list and its page, with what buying costs now; its cameras show "on trial" with their
trial's end; the customer buys it there (any portal user of the customer: a purchase at
the price the batch was offered at, confirmed on a page naming the amount), which
converts it at once, audited with that user as the actor, billed once; an amount that
changed meanwhile (a camera activated) is shown again, nothing bought; another
customer's batch is 404. The customer API stays read-only."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEntry
from licensing.models import License, TrialConversion
from licensing.services import batch_issue, license_revoke, unit_activate
from svccore import dates
from tests.factories import CustomerFactory
from tests.portal.conftest import account_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop():
    customer = CustomerFactory(name="Lagerhaus Nordost Videoanalyse GmbH")
    account = account_for(customer, "einkauf@lagerhaus-nordost.example")
    client = Client()
    client.force_login(account.user)
    batch = batch_issue(customer_id=customer.pk, sku="DETECT-STD", units=25, trial_days=21)
    for n in range(3):
        unit_activate(batch_token=batch.license.token, device_id=f"lhn-halle-{n}-8f3a2c91")
    return customer, client, batch


def test_a_trial_batch_shows_its_trial_and_what_buying_costs(shop):
    customer, client, batch = shop
    listing = client.get(reverse("portal-batches")).content.decode()
    assert reverse("portal-batch-buy", args=[batch.pk]) in listing
    page = " ".join(client.get(reverse("portal-batch", args=[batch.pk])).content.decode().split())
    assert 'id="batch-trial"' in page and "21 days from its own activation" in page
    assert "3 cameras on trial now: buying costs 270.00 EUR (90.00 EUR each)" in page
    assert "Request renewal" not in page
    unit = License.objects.filter(batch=batch).first()
    assert '<span class="svc-state svc-state-trial">on trial</span>' in page
    assert f"trial to {dates.moment(unit.expires_at)}" in page


def test_buying_converts_at_once_and_bills_what_was_confirmed(shop):
    customer, client, batch = shop
    url = reverse("portal-batch-buy", args=[batch.pk])
    page = client.get(url).content.decode()
    assert 'id="buy-amount">270.00 EUR' in page and 'value="Buy for 270.00 EUR"' in page
    assert not TrialConversion.objects.exists()
    # A camera activated after the page was shown: the new amount, nothing bought.
    unit_activate(batch_token=batch.license.token, device_id="lhn-halle-9-1b2c3d4e")
    again = client.post(url, {"units": "3"})
    assert again.status_code == 200 and not TrialConversion.objects.exists()
    assert "has 4 cameras on trial now, not the 3 you confirmed" in again.content.decode()
    assert 'value="Buy for 360.00 EUR"' in again.content.decode()

    bought = " ".join(client.post(url, {"units": "4"}, follow=True).content.decode().split())

    assert "Bought: batch" in bought and "360.00 EUR is billed on your next invoice" in bought
    conversion = TrialConversion.objects.get()
    assert (conversion.batch_id, conversion.units) == (batch.pk, 4)
    entry = AuditEntry.objects.get(action="batch.convert_trial")
    assert (entry.actor, entry.actor_kind, entry.target) == (
        "einkauf@lagerhaus-nordost.example", "customer", batch.pk,
    )  # fmt: skip
    assert "Bought" in bought and 'id="batch-buy"' not in bought
    # Bought already: the page says so; posting again buys nothing more.
    assert client.post(url, {"units": "4"}).status_code == 302
    assert TrialConversion.objects.count() == 1


def test_another_customers_trial_cannot_be_bought(shop):
    _, client, _ = shop
    other = batch_issue(customer_id=CustomerFactory().pk, sku="DETECT-STD", units=5, trial_days=7)
    url = reverse("portal-batch-buy", args=[other.pk])
    assert client.get(url).status_code == 404
    assert client.post(url, {"units": "0"}).status_code == 404
    assert not TrialConversion.objects.exists()


def test_a_trial_is_not_asked_for_renewal(shop):
    _, client, batch = shop
    answer = client.post(reverse("portal-renewals"), {"target": batch.pk})
    assert answer.status_code == 200
    assert "is a trial: it is not renewed but bought" in answer.content.decode()


def test_a_trial_whose_key_is_revoked_is_shown_but_not_for_sale(shop):
    _, client, batch = shop
    license_revoke(license_id=batch.license_id, reason="order cancelled")
    page = client.get(reverse("portal-batch", args=[batch.pk]))
    assert page.status_code == 200
    assert "It cannot be bought" in page.content.decode() and 'id="batch-buy"' not in (
        page.content.decode()
    )
    refused = client.get(reverse("portal-batch-buy", args=[batch.pk]), follow=True)
    assert refused.status_code == 200 and "was revoked" in refused.content.decode()
    assert (
        client.post(reverse("portal-batch-buy", args=[batch.pk]), {"units": "3"}).status_code == 302
    )
    assert not TrialConversion.objects.exists()
