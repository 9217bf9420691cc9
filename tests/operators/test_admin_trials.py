"""Trials in the operator console (issue 42 item 3): a batch is issued as a trial from
its form, the batches list says which are trials (a filter too), a batch's page says its
trial or its conversion, the fleet shows each unit on trial with its trial's end, and the
convert action quotes each batch before converting it once, audited as the console
user; a role without issue_licences is not offered it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from licensing.models import Batch, License, TrialConversion
from licensing.services import batch_issue, trial_convert, unit_activate
from svccore import dates
from tests.operators.test_admin import _confirmed

pytestmark = pytest.mark.django_db

DAY = 86400


def trial(customer, units=10, cameras=2):
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=units, trial_days=14)
    for n in range(cameras):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{batch.pk[-4:]}-{n}")
    return batch


def test_a_trial_batch_is_issued_from_its_form_with_what_it_costs_when_converted(
    admin_client, customer
):
    url = reverse("admin:licensing_batch_add")
    order = {"customer": customer.pk, "sku": "VISION-PRO", "units": 20, "trial_days": 30}
    confirm, response = _confirmed(admin_client, url, order)
    assert "Issue a <strong>trial</strong>" in confirm and "30 days" in confirm
    assert "nothing is billed until the batch is converted" in confirm
    assert 'value="Yes, issue the trial batch (240.00 EUR a unit)"' in confirm
    assert response.status_code == 302
    assert Batch.objects.get().trial_days == 30


def test_the_batches_list_page_and_fleet_show_the_trial(admin_client, customer, make_batch):
    on_trial = trial(customer, cameras=1)
    paid = make_batch(units=3)
    converted = trial(customer, cameras=1)
    trial_convert(batch_id=converted.pk)

    listing = admin_client.get(reverse("admin:licensing_batch_changelist")).content.decode()
    assert re.search(
        rf"{on_trial.pk}<br><span class=\"svc-state svc-state-trial\">trial, 14 days", listing
    )
    only = admin_client.get(
        reverse("admin:licensing_batch_changelist"), {"trial": "on"}
    ).content.decode()
    assert on_trial.pk in only and paid.pk not in only and converted.pk not in only
    was = admin_client.get(
        reverse("admin:licensing_batch_changelist"), {"trial": "converted"}
    ).content.decode()
    assert converted.pk in was and on_trial.pk not in was

    page = admin_client.get(
        reverse("admin:licensing_batch_change", args=[on_trial.pk])
    ).content.decode()
    assert "on trial: each camera runs 14 days from its own activation" in page
    page = admin_client.get(
        reverse("admin:licensing_batch_change", args=[converted.pk])
    ).content.decode()
    assert "converted to paid" in page and "1 unit billed, 240.00 EUR" in page

    fleet = admin_client.get(reverse("admin:licensing_activation_changelist")).content.decode()
    unit = License.objects.get(batch=on_trial)
    assert '<span class="svc-state svc-state-trial">on trial</span>' in fleet
    assert f"trial to {dates.moment(unit.expires_at)}" in fleet
    lic_page = admin_client.get(
        reverse("admin:licensing_license_change", args=[unit.pk])
    ).content.decode()
    assert "svc-state-trial" in lic_page


def test_an_ended_trial_shows_expired_not_bought(admin_client, admin_user, customer, server_clock):
    batch = trial(customer, cameras=1)
    server_clock(15 * DAY)
    admin_client.force_login(admin_user)  # the console session ended meanwhile
    fleet = admin_client.get(reverse("admin:licensing_activation_changelist")).content.decode()
    assert '<span class="svc-state svc-state-expired">expired</span>' in fleet
    assert "trial ended" in fleet and "not bought" in fleet
    assert batch.pk in fleet


def test_the_convert_action_quotes_then_converts_once(admin_client, customer, make_batch):
    batch = trial(customer, cameras=3)
    paid = make_batch(units=2)
    url = reverse("admin:licensing_batch_changelist")
    selection = {"action": "convert_trial_batches", "_selected_action": [batch.pk, paid.pk]}

    confirm = admin_client.post(url, selection).content.decode()

    assert "Convert trial batches to paid" in confirm and 'id="convert-quotes"' in confirm
    assert f"Refused: batch {paid.pk} is not a trial batch" in confirm
    assert 'value="Convert to paid for 720.00 EUR"' in confirm  # 3 cameras x 240.00
    assert not TrialConversion.objects.exists()
    changed = {**selection, "apply": "1", "term_days": 90}
    quoted = admin_client.post(url, changed).content.decode()
    assert "The term changed" in quoted and "90 days from now" in quoted
    assert not TrialConversion.objects.exists()
    done = admin_client.post(url, {**changed, "quoted_term": "90"}, follow=True).content.decode()
    assert f"Converted 1 trial batch to paid: {batch.pk} (3 units); billed once, 720.00 EUR" in done
    assert f"{paid.pk} is not a trial batch" in done
    again = admin_client.post(url, {**changed, "quoted_term": "90"}, follow=True).content.decode()
    assert f"Batch {batch.pk} was already converted" in again
    conversion = TrialConversion.objects.get()
    assert (conversion.units, conversion.term_days) == (3, 90)
    entry = AuditEntry.objects.get(action="batch.convert_trial", detail__replayed=False)
    assert (entry.target, entry.actor_kind) == (batch.pk, "superuser")
    listed = admin_client.get(reverse("admin:licensing_trialconversion_changelist"))
    assert batch.pk in listed.content.decode() and "720.00 EUR" in listed.content.decode()
