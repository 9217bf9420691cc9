"""Renewals in the operator console (issue 16): the admin actions ask for the term, renew
through the audited service once per form, and the dashboard lists what ends soon."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from config.admin.display import utc_time
from licensing.models import Batch, License, Renewal
from licensing.services import license_issue
from licensing.services.activation import unit_activate
from licensing.services.renewals import license_renew

pytestmark = pytest.mark.django_db

DAY = 86400


def test_renew_batches_asks_for_the_term_then_renews_once_per_form(admin_client, make_batch):
    batch = make_batch(units=5, sku="DETECT-STD")
    unit_activate(batch_token=batch.license.token, device_id="cam-1")
    old_end = batch.expires_at
    url = reverse("admin:licensing_batch_changelist")
    selection = {"action": "renew_batches", "_selected_action": [batch.pk]}

    confirm = admin_client.post(url, selection).content.decode()

    assert "Renew batches" in confirm and 'name="term_days"' in confirm
    key = re.search(r'name="request_key" value="([0-9a-f]+)"', confirm)[1]
    assert not Renewal.objects.exists()
    bad = admin_client.post(url, {**selection, "apply": "1", "request_key": key, "term_days": 0})
    assert bad.status_code == 200 and not Renewal.objects.exists()
    assert 'id="renew-quotes"' in confirm and utc_time(old_end) in confirm
    # A term other than the one the amounts were shown for is quoted first, not renewed.
    changed = {**selection, "apply": "1", "request_key": key, "term_days": 30}
    quoted = admin_client.post(url, changed).content.decode()
    assert "The term changed" in quoted and not Renewal.objects.exists()
    assert utc_time(old_end + dt.timedelta(days=30)) in quoted and "30 days" in quoted
    price = batch.unit_price
    assert f'value="Renew for {price:,.2f} EUR"' in quoted  # 1 unit in service
    assert 'name="quoted_term" value="30"' in quoted
    done = {**changed, "quoted_term": "30"}
    assert admin_client.post(url, done).status_code == 302
    assert admin_client.post(url, done).status_code == 302  # posted twice: renewed once
    batch.refresh_from_db()
    assert (batch.expires_at - old_end).days == 30
    renewal = Renewal.objects.get()
    assert (renewal.batch_id, renewal.units, renewal.term_days) == (batch.pk, 1, 30)
    entry = AuditEntry.objects.filter(action="license.renew").first()
    assert (entry.target, entry.actor_kind) == (batch.pk, "superuser")


def test_renew_licenses_renews_a_direct_one_and_says_why_a_unit_is_refused(
    admin_client, customer, make_batch
):
    direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-d")
    batch = make_batch(units=2, sku="DETECT-STD")
    unit = License.objects.get(
        pk=unit_activate(batch_token=batch.license.token, device_id="c").license_id
    )
    url = reverse("admin:licensing_license_changelist")
    answer = admin_client.post(
        url,
        {
            "action": "renew_licenses",
            "_selected_action": [direct.pk, unit.pk],
            "apply": "1",
            "request_key": "abc",
            "term_days": "",
            "quoted_term": "",
        },
        follow=True,
    ).content.decode()
    assert f"Renewed 1 licence ({direct.pk} now ends " in answer
    assert f"renew the batch (batch_id {batch.pk})" in answer
    direct.refresh_from_db()
    assert Renewal.objects.get().license_id == direct.pk
    assert direct.claims["exp"] == int(direct.expires_at.timestamp())


def test_dashboard_lists_what_ends_soon_with_customer_and_units(
    admin_client, admin_user, customer, make_batch, server_clock
):
    soon = make_batch(units=4, sku="API-METERED")  # 30 days
    unit_activate(batch_token=soon.license.token, device_id="cam-1")
    later = make_batch(units=4, sku="DETECT-STD")  # 365 days

    body = admin_client.get(reverse("console-dashboard")).content.decode()

    panel = body.split('id="expiring"', 1)[1].split("</table>", 1)[0]
    assert soon.pk in panel and later.pk not in panel
    assert customer.name in panel and "1 / 4" in panel
    server_clock(33 * DAY)
    # 33 days on, the console session has ended (config.sessions): sign in again.
    admin_client.force_login(admin_user)
    panel = admin_client.get(reverse("console-dashboard")).content.decode()
    panel = panel.split('id="expiring"', 1)[1].split("</table>", 1)[0]
    # The state in the one component (licensing.unit_states), the grace's end beside it.
    assert '<span class="svc-state svc-state-grace">in grace</span>' in panel
    assert "grace until" in panel
    assert Batch.objects.count() == 2


def test_renewals_are_listed_in_the_admin(admin_client, customer, make_batch):
    batch = make_batch(units=5, sku="DETECT-STD")
    license_renew(idempotency_key="listed", batch_id=batch.id)
    body = admin_client.get(reverse("admin:licensing_renewal_changelist")).content.decode()
    assert batch.pk in body and customer.name in body and "before expiry" in body
    renewal = Renewal.objects.get()
    page = admin_client.get(reverse("admin:licensing_renewal_change", args=[renewal.pk]))
    assert page.status_code == 200
