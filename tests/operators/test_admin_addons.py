"""Add-ons in the console (issue 42 item 4): the catalogue's add-ons on their SKU's page,
edited by finance; the batch and licence actions that add or remove one on a page naming
the rows, what each carries and what a camera receiving it today is billed; the batch
and licence pages listing their add-ons. Writes go through the services (audited)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from licensing.models import AddOn, AddOnGrant
from licensing.services import addon_add, license_issue
from licensing.services.activation import unit_activate

pytestmark = pytest.mark.django_db


def test_add_and_remove_an_add_on_on_selected_batches(admin_client, make_batch):
    batch = make_batch(units=4)
    unit_activate(batch_token=batch.license.token, device_id="cam-1")
    url = reverse("admin:licensing_batch_changelist")
    selection = {"action": "add_addon_batches", "_selected_action": [batch.pk]}

    confirm = admin_client.post(url, selection)

    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert 'name="addon"' in page and '<option value="anpr">anpr (Number-plate recognition)' in page
    assert f"{batch.pk}" in page and "no add-on" in page
    assert "per unit receiving it today" in page and "60.00 EUR x 365/365 days = 60.00 EUR" in page
    assert "Add the add-on to 1 batch" in page

    done = admin_client.post(url, {**selection, "apply": "1", "addon": "anpr"}, follow=True)

    assert b"Added anpr to 1 batch; each camera receives it at its next sync" in done.content
    grant = AddOnGrant.objects.get()
    assert (grant.batch_id, grant.code, grant.unit_price) == (batch.pk, "anpr", Decimal("60"))
    assert AuditEntry.objects.filter(action="license.addon_add", target=batch.pk).exists()
    again = admin_client.post(url, {**selection, "apply": "1", "addon": "anpr"}, follow=True)
    assert b"already carrying anpr: nothing changed" in again.content

    shown = admin_client.get(reverse("admin:licensing_batch_change", args=[batch.pk]))
    text = shown.content.decode()
    assert (
        "<strong>anpr</strong> (Number-plate recognition): 60.00 EUR per unit per 365-day" in text
    )
    assert "0 of 1 activated unit carry them now" in text

    removal = {"action": "remove_addon_batches", "_selected_action": [batch.pk]}
    asked = admin_client.post(url, removal).content.decode()
    assert '<option value="anpr">anpr</option>' in asked and "Nothing is billed back" in asked
    removed = admin_client.post(
        url, {**removal, "apply": "1", "addon": "anpr", "reason": "no longer needed"}, follow=True
    )
    assert b"Removed anpr from 1 batch; each camera loses it at its next sync" in removed.content
    grant.refresh_from_db()
    assert grant.removed_at is not None and grant.remove_reason == "no longer needed"


def test_a_direct_license_page_lists_its_add_ons_and_a_unit_refusal_is_shown(
    admin_client, customer, make_batch
):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-d")
    url = reverse("admin:licensing_license_changelist")
    admin_client.post(
        url,
        {"action": "add_addon_licenses", "_selected_action": [lic.pk], "apply": "1",
         "addon": "streams-4"},
    )  # fmt: skip
    page = admin_client.get(reverse("admin:licensing_license_change", args=[lic.pk]))
    assert b"<strong>streams-4</strong> (Four more streams)" in page.content
    assert b"&quot;max_streams&quot;: 8" in page.content  # the claims re-signed

    batch = make_batch(units=2)
    unit = unit_activate(batch_token=batch.license.token, device_id="cam-u").license_id
    addon_add(addon="anpr", batch_id=batch.id)
    refused = admin_client.post(
        url,
        {"action": "add_addon_licenses", "_selected_action": [unit], "apply": "1",
         "addon": "anpr"},
        follow=True,
    )  # fmt: skip
    assert b"add the add-on to the batch" in refused.content
    unit_page = admin_client.get(reverse("admin:licensing_license_change", args=[unit]))
    assert b"its batch's, which it receives at its next sync" in unit_page.content


def test_finance_edits_the_catalogues_add_ons_on_the_skus_page(admin_client):
    url = reverse("admin:licensing_sku_change", args=["VISION-PRO"])
    page = admin_client.get(url)
    assert page.status_code == 200 and b'value="anpr"' in page.content
    assert AddOn.objects.filter(sku_id="VISION-PRO").count() == 1
