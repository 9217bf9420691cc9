"""The operator console: every page renders, writes go through the services (and so into
the audit log), key material never shows, tokens do."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from customers.models import Customer
from customers.services import customer_create
from licensing.models import Activation, Batch, License, Suspension
from licensing.services import license_issue, license_revoke
from licensing.services.activation import unit_activate
from operators.models import OperatorKey
from operators.services import operator_key_create
from svccore import money

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(customer, make_batch, server_clock):
    """A batch with one strongly and one weakly bound unit, a direct licence, made an
    hour ago (on the server clock), so invoices rated "now" certainly include them."""
    server_clock(-3600)
    batch = make_batch(units=10)
    unit_activate(batch_token=batch.license.token, device_id="cam-strong")
    unit_activate(
        batch_token=batch.license.token,
        device_id="aa:bb:cc:dd:ee:ff",
        fingerprint_source="mac",
        weak_binding=True,
    )
    direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-direct")
    server_clock(0)
    return batch, direct


def _changelists():
    return [
        "admin:customers_customer_changelist",
        "admin:licensing_sku_changelist",
        "admin:licensing_batch_changelist",
        "admin:licensing_license_changelist",
        "admin:licensing_activation_changelist",
        "admin:audit_auditentry_changelist",
        "admin:operators_operatorkey_changelist",
    ]


@pytest.mark.parametrize("name", _changelists())
def test_changelists_render_with_data(admin_client, fleet, name):
    operator_key_create(name="ops", roles=["operator"])
    response = admin_client.get(reverse(name))
    assert response.status_code == 200
    body = response.content.decode()
    assert "PRIVATE KEY" not in body


@pytest.mark.parametrize(
    ("name", "query", "shown", "hidden"),
    [
        # Device ids by any part, any case (trigram indexes at fleet scale, issue 41).
        ("admin:licensing_activation_changelist", "?q=cam-str", "cam-strong", "aa:bb:cc"),
        ("admin:licensing_activation_changelist", "?q=STRONG", "cam-strong", "aa:bb:cc"),
        ("admin:licensing_activation_changelist", "?q=nowhere", "0 activations", "cam-strong"),
        ("admin:licensing_activation_changelist", "?weak_binding__exact=1", "aa:bb:cc", "cam-str"),
        ("admin:licensing_license_changelist", "?kind__exact=direct", "cam-direct", "cam-strong"),
        ("admin:licensing_license_changelist", "?revoked=no&q=cam", "cam-direct", "*</td>"),
    ],
)
def test_search_and_filters_narrow_the_list(admin_client, fleet, name, query, shown, hidden):
    response = admin_client.get(reverse(name) + query)
    assert response.status_code == 200
    body = response.content.decode()
    assert shown in body and hidden not in body


def test_the_fleet_says_the_binding_in_words_and_filters_every_reported_source(admin_client, fleet):
    """A hardware-bound device is "hardware-bound", a weak one "weak: <source>" in red:
    not Django's boolean icons, where weak showed a green tick and bound a red cross
    (issue 45). The source filter offers every source a device reports, "explicit" (an
    id its caller gave, devices.client) among them."""
    batch, _direct = fleet
    unit_activate(
        batch_token=batch.license.token, device_id="cam-given", fingerprint_source="explicit"
    )
    url = reverse("admin:licensing_activation_changelist")
    body = admin_client.get(url).content.decode()
    cells = {}
    for row in re.findall(r"<tr>.*?</tr>", body, re.S):
        device = re.search(r'class="field-device_id">(?:<a [^>]*>)?([^<]+)<', row)
        binding = re.search(r'<td class="field-binding">(.*?)</td>', row, re.S)
        if device and binding:
            cells[device[1]] = " ".join(re.sub(r"<[^>]+>", " ", binding[1]).split())
    assert cells == {
        "cam-strong": "✓ hardware-bound",
        "aa:bb:cc:dd:ee:ff": "✗ weak: mac",
        "cam-given": "✓ hardware-bound",
    }
    assert "icon-yes.svg" not in body and "icon-no.svg" not in body
    for source in ("env", "devicetree", "dmi", "machine-id", "macos", "mac", "explicit"):
        assert f"?fingerprint_source={source}" in body, source
    only = admin_client.get(url, {"fingerprint_source": "explicit"}).content.decode()
    assert "cam-given" in only and "cam-strong" not in only
    weak = Activation.objects.get(device_id="aa:bb:cc:dd:ee:ff")
    page = admin_client.get(reverse("admin:licensing_activation_change", args=[weak.pk]))
    assert "weak: mac" in page.content.decode() and "icon-yes.svg" not in page.content.decode()


def test_detail_pages_render(admin_client, fleet, customer):
    batch, direct = fleet
    unit = Activation.objects.first()
    for url in (
        reverse("admin:customers_customer_change", args=[customer.pk]),
        reverse("admin:licensing_batch_change", args=[batch.pk]),
        reverse("admin:licensing_license_change", args=[direct.pk]),
        reverse("admin:licensing_activation_change", args=[unit.pk]),
        reverse("admin:licensing_sku_change", args=["VISION-PRO"]),
        reverse("admin:audit_auditentry_change", args=[AuditEntry.objects.first().pk]),
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert "PRIVATE KEY" not in response.content.decode()


def test_ids_the_admin_would_read_as_escapes_open_their_pages(admin_client, make_batch):
    """The admin reads ``_3A`` in a path as ``:``; an operator-chosen customer id with
    ``_3A`` in it opened no page (a redirect to the index) before links were quoted."""
    owner = customer_create(name="Quoted Ids GmbH", kind="oem", id="ACME_3A_2F")
    assert owner.id == "CUST-ACME_3A_2F"
    batch = make_batch(units=3, owner=owner)
    batch_page = admin_client.get(reverse("admin:licensing_batch_change", args=[quote(batch.pk)]))
    assert batch_page.status_code == 200
    link = re.search(r'href="([^"]+)"[^>]*>Quoted Ids GmbH<', batch_page.content.decode())
    assert link, "the batch page links its customer"
    customer_page = admin_client.get(link.group(1))
    assert customer_page.status_code == 200 and b"CUST-ACME_3A_2F" in customer_page.content
    assert b"<h2>Details" in customer_page.content, "the customer page, not the bare form"
    for href in re.findall(
        r'href="(/admin/licensing/batch/[^"]+/change/)"', customer_page.content.decode()
    ):
        assert admin_client.get(href).status_code == 200, href
    listed = admin_client.get(reverse("admin:customers_customer_changelist"), {"q": "Quoted"})
    from_list = re.search(
        r'href="(/admin/customers/customer/[^"]+/change/)', listed.content.decode()
    )
    assert b"<h2>Details" in admin_client.get(from_list.group(1)).content
    dashboard = admin_client.get(reverse("console-dashboard")).content.decode()
    for href in re.findall(r'href="(/admin/customers/customer/[^"]+/change/)"', dashboard):
        assert admin_client.get(href).status_code == 200, href


def test_batch_page_offers_the_batch_key_to_copy(admin_client, fleet):
    batch, _ = fleet
    body = admin_client.get(reverse("admin:licensing_batch_change", args=[batch.pk])).content
    assert batch.license.token.encode() in body
    assert b'id="batch-key"' in body and b">Copy</button>" in body


def test_operator_key_pages_never_show_the_digest(admin_client):
    row, key = operator_key_create(name="ops", roles=["operator"])
    for url in (
        reverse("admin:operators_operatorkey_changelist"),
        reverse("admin:operators_operatorkey_change", args=[row.pk]),
    ):
        body = admin_client.get(url).content.decode()
        assert row.digest not in body and key not in body
        assert row.prefix in body


def test_create_customer_through_the_admin_uses_the_service(admin_client):
    response = admin_client.post(
        reverse("admin:customers_customer_add"),
        {"name": "Acme", "kind": "oem", "contact": "ops@acme.example", "id": "acme"},
    )
    assert response.status_code == 302
    assert Customer.objects.get(pk="CUST-ACME").name == "Acme"
    entry = AuditEntry.objects.get(action="customer.create")
    assert (entry.actor, entry.actor_kind, entry.ip, entry.result) == (
        "admin",
        "superuser",
        "127.0.0.1",
        "ok",
    )


def test_service_error_in_the_admin_shows_the_services_message(admin_client, customer):
    response = admin_client.post(
        reverse("admin:customers_customer_add"),
        {"name": "Again", "kind": "oem", "id": customer.pk},
    )
    assert response.status_code == 200
    assert f"customer id {customer.pk} is already taken" in response.content.decode()
    assert AuditEntry.objects.get(action="customer.create").result == "failed"


def _confirmed(admin_client, url: str, data: dict):
    """Post a service form, check its confirmation page, then confirm it."""
    asked = admin_client.post(url, data)
    assert asked.status_code == 200, asked.content.decode()[-2000:]
    page = asked.content.decode()
    assert 'id="confirmation"' in page
    digest = re.search(r'name="_confirmed" value="([0-9a-f]+)"', page)[1]
    return page, admin_client.post(url, {**data, "_confirmed": digest})


def test_issue_batch_through_the_admin(admin_client, customer):
    form = {"customer": customer.pk, "sku": "VISION-PRO", "units": 120, "term_days": ""}
    confirmation, response = _confirmed(admin_client, reverse("admin:licensing_batch_add"), form)
    # What it costs, before anything is issued: 120 x 210.00 (the 100+ tier).
    assert "order value <strong id='confirm-amount'>25,200.00 EUR</strong>" in confirmation
    assert 'value="Yes, issue the batch (25,200.00 EUR)"' in confirmation
    batch = Batch.objects.get(customer=customer)
    assert response.status_code == 302
    assert response.url == reverse("admin:licensing_batch_change", args=[batch.pk])
    # Recorded exactly as quoted (four decimals stored: 210.0000).
    assert batch.units_purchased == 120
    assert str(money.amount(batch.unit_price, "EUR")) == "210.00"
    entry = AuditEntry.objects.get(action="batch.issue")
    assert (entry.target, entry.actor_kind) == (batch.pk, "superuser")
    page = admin_client.get(response.url).content.decode()
    assert batch.license.token in page
    assert f"Batch {batch.pk} issued" in page


def test_a_changed_order_is_confirmed_again_and_nothing_is_issued_unconfirmed(
    admin_client, customer
):
    url = reverse("admin:licensing_batch_add")
    form = {"customer": customer.pk, "sku": "VISION-PRO", "units": 3, "term_days": ""}
    page = admin_client.post(url, form).content.decode()
    digest = re.search(r'name="_confirmed" value="([0-9a-f]+)"', page)[1]
    # 250 units on the confirmation of 3: asked again, with the new amount.
    again = admin_client.post(url, {**form, "units": 250, "_confirmed": digest})
    assert again.status_code == 200 and "250 units" in again.content.decode()
    assert not Batch.objects.exists()


def test_the_sku_is_chosen_never_preselected(admin_client):
    for name in ("admin:licensing_batch_add", "admin:licensing_license_add"):
        page = admin_client.get(reverse(name)).content.decode()
        sku = page[page.index('name="sku"') :]
        sku = sku[: sku.index("</select>")]
        assert '<option value="" selected>Choose…</option>' in sku, name
        assert sku.count("selected") == 1, name


def test_issue_batch_form_prefills_the_customer(admin_client, customer):
    body = admin_client.get(
        reverse("admin:licensing_batch_add") + f"?customer={customer.pk}"
    ).content.decode()
    assert re.search(rf'<option value="{customer.pk}" selected>', body)


def test_issue_license_through_the_admin(admin_client, customer):
    form = {
        "customer": customer.pk,
        "sku": "DETECT-STD",
        "device_id": "cam-7",
        "term_days": "30",
        "api_quota": "",
        "max_streams": "2",
        "activation": "optional",
    }
    url = reverse("admin:licensing_license_add")
    confirmation, response = _confirmed(admin_client, url, form)
    assert "90.00 EUR" in confirmation
    assert response.status_code == 302
    lic = License.objects.get(device_id="cam-7")
    assert lic.claims["lim"]["max_streams"] == 2
    assert AuditEntry.objects.get(action="license.issue").target == lic.pk


def test_unbound_optional_license_is_refused_with_the_services_rule(admin_client, customer):
    response = admin_client.post(
        reverse("admin:licensing_license_add"),
        {"customer": customer.pk, "sku": "DETECT-STD", "device_id": "*", "activation": "optional"},
    )
    assert response.status_code == 200
    assert "must use activation" in response.content.decode()
    assert not License.objects.filter(device_id="*", kind="direct").exists()


def test_revoke_action_asks_for_a_reason_then_revokes(admin_client, fleet):
    _, direct = fleet
    url = reverse("admin:licensing_license_changelist")
    selection = {"action": "revoke_licenses", "_selected_action": [direct.pk]}
    confirm = admin_client.post(url, selection)
    assert confirm.status_code == 200
    assert b'name="reason"' in confirm.content
    direct.refresh_from_db()
    assert direct.revoked_at is None

    missing = admin_client.post(url, {**selection, "apply": "1", "reason": ""})
    assert missing.status_code == 200 and b"This field is required" in missing.content
    direct.refresh_from_db()
    assert direct.revoked_at is None

    done = admin_client.post(url, {**selection, "apply": "1", "reason": "camera stolen"})
    assert done.status_code == 302
    direct.refresh_from_db()
    assert (direct.revoked, direct.revoke_reason) == (True, "camera stolen")
    entry = AuditEntry.objects.get(action="license.revoke")
    assert (entry.target, entry.detail["reason"], entry.actor_kind) == (
        direct.pk,
        "camera stolen",
        "superuser",
    )


def test_suspend_and_reinstate_actions_ask_for_a_reason_and_say_what_they_did(admin_client, fleet):
    batch, direct = fleet
    cases = [
        ("licensing_license", "licenses", direct.pk, "licence"),
        ("licensing_batch", "batches", batch.pk, "batch"),
        ("customers_customer", "customers", batch.customer_id, "customer"),
    ]
    for model, noun, pk, word in cases:
        url = reverse(f"admin:{model}_changelist")
        selection = {"action": f"suspend_{noun}", "_selected_action": [pk]}
        confirm = admin_client.post(url, selection)
        assert confirm.status_code == 200 and b'name="reason"' in confirm.content
        assert b"refuses analytics" in confirm.content or b"refuse analytics" in confirm.content
        missing = admin_client.post(url, {**selection, "apply": "1", "reason": ""})
        assert missing.status_code == 200 and b"This field is required" in missing.content
        assert not Suspension.objects.exists()
        done = admin_client.post(
            url, {**selection, "apply": "1", "reason": "invoice unpaid"}, follow=True
        )
        assert f"Suspended 1 {word}; their cameras refuse analytics".encode() in done.content
        assert Suspension.objects.get().target == pk
        if noun == "batches":  # the batch's page says so, with the reason
            page = admin_client.get(reverse("admin:licensing_batch_change", args=[pk]))
            assert b"the batch since" in page.content and b"invoice unpaid" in page.content
        again = admin_client.post(url, {**selection, "apply": "1", "reason": "x"}, follow=True)
        assert b"already suspended: nothing changed" in again.content
        back = {"action": f"reinstate_{noun}", "_selected_action": [pk], "apply": "1"}
        reinstated = admin_client.post(url, back, follow=True)
        assert f"Reinstated 1 {word}".encode() in reinstated.content
        assert not Suspension.objects.exists()
    audited = AuditEntry.objects.filter(action__in=["license.suspend", "license.reinstate"])
    actions = list(audited.values_list("action", flat=True))
    assert actions.count("license.suspend") == 6 and actions.count("license.reinstate") == 3


def test_revoke_unit_from_the_fleet_and_batch_key_from_batches(admin_client, fleet):
    batch, _ = fleet
    unit = Activation.objects.get(device_id="cam-strong")
    admin_client.post(
        reverse("admin:licensing_activation_changelist"),
        {"action": "revoke_units", "_selected_action": [unit.pk], "apply": "1", "reason": "rma"},
    )
    admin_client.post(
        reverse("admin:licensing_batch_changelist"),
        {
            "action": "revoke_batch_keys",
            "_selected_action": [batch.pk],
            "apply": "1",
            "reason": "leaked",
        },
    )
    assert License.objects.get(pk=unit.license_id).revoked
    assert License.objects.get(pk=batch.license_id).revoke_reason == "leaked"


def test_release_seats_from_the_fleet_asks_for_a_reason_and_marks_the_transfer(admin_client, fleet):
    batch, _ = fleet
    unit = Activation.objects.get(device_id="cam-strong")
    url = reverse("admin:licensing_activation_changelist")
    selection = {"action": "release_seats", "_selected_action": [unit.pk]}
    confirm = admin_client.post(url, selection).content.decode()
    assert "Release seats" in confirm and 'class="svc-danger" value="Release 1 seat"' in confirm
    assert "units, at least one, per 30 days" in confirm

    done = admin_client.post(url, {**selection, "apply": "1", "reason": "camera replaced"})

    assert done.status_code == 302
    assert License.objects.get(pk=unit.license_id).revoke_reason == "camera replaced"
    batch.refresh_from_db()
    assert (batch.units_activated, batch.released_seats) == (1, 1)
    assert AuditEntry.objects.get(action="seat.release").actor_kind == "superuser"
    unit_activate(batch_token=batch.license.token, device_id="cam-replacement")
    fleet_page = admin_client.get(url).content.decode()
    assert "seat released" in fleet_page and "(transfer)" in fleet_page
    releases = admin_client.get(reverse("admin:licensing_seatrelease_changelist"))
    assert "cam-replacement" in releases.content.decode()
    # Past the policy (one per 30 days for a 10-unit batch), the refusal is shown.
    other = Activation.objects.get(device_id="aa:bb:cc:dd:ee:ff")
    refused = admin_client.post(
        url,
        {"action": "release_seats", "_selected_action": [other.pk], "apply": "1", "reason": "x"},
        follow=True,
    )
    assert "next release is possible at" in refused.content.decode()


def test_batches_show_progress_and_turn_red_near_exhaustion(admin_client, make_batch):
    calm = make_batch(units=10)
    busy = make_batch(units=10)
    Batch.objects.filter(pk=calm.pk).update(units_activated=3)
    Batch.objects.filter(pk=busy.pk).update(units_activated=9)
    body = admin_client.get(reverse("admin:licensing_batch_changelist")).content.decode()
    assert 'title="3 of 10 units activated"' in body
    assert 'class="svc-progress near-exhaustion" title="9 of 10 units activated"' in body
    assert 'class="svc-progress" title="3 of 10 units activated"' in body
    near = admin_client.get(reverse("admin:licensing_batch_changelist") + "?units_left=near")
    assert busy.pk in near.content.decode() and calm.pk not in near.content.decode()


def test_audit_log_is_read_only(admin_client, fleet):
    entry = AuditEntry.objects.first()
    assert admin_client.get(reverse("admin:audit_auditentry_add")).status_code == 403
    response = admin_client.post(
        reverse("admin:audit_auditentry_change", args=[entry.pk]), {"actor": "someone else"}
    )
    assert response.status_code == 403
    assert (
        admin_client.post(
            reverse("admin:audit_auditentry_delete", args=[entry.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    filtered = admin_client.get(
        reverse("admin:audit_auditentry_changelist") + "?action=license.issue&result=ok"
    )
    assert filtered.status_code == 200


def test_batches_and_licenses_cannot_be_edited_or_deleted_directly(admin_client, fleet):
    batch, direct = fleet
    response = admin_client.post(
        reverse("admin:licensing_license_change", args=[direct.pk]), {"device_id": "other"}
    )
    assert response.status_code == 403
    assert (
        admin_client.post(
            reverse("admin:licensing_batch_delete", args=[batch.pk]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_operator_key_revoke_action(admin_client):
    row, _ = operator_key_create(name="ops", roles=["operator"])
    admin_client.post(
        reverse("admin:operators_operatorkey_changelist"),
        {"action": "revoke_keys", "_selected_action": [row.pk]},
    )
    assert OperatorKey.objects.get(pk=row.pk).revoked_at is not None
    assert AuditEntry.objects.get(action="operator_key.revoke").actor_kind == "superuser"


def test_admin_index_links_the_dashboard_and_invoice_preview(admin_client):
    body = admin_client.get(reverse("admin:index")).content.decode()
    assert reverse("console-dashboard") in body
    assert reverse("console-invoice-preview") in body


def test_dashboard_renders_inline_svg_charts_and_lists(admin_client, fleet, make_batch):
    busy = make_batch(units=10)
    Batch.objects.filter(pk=busy.pk).update(units_activated=10)
    response = admin_client.get(reverse("console-dashboard"))
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('<svg class="svc-chart"') == 3
    assert "New activations per day" in body and "Inferences per day" in body
    assert busy.pk in body  # near exhaustion
    assert "aa:bb:cc:dd:ee:ff" in body  # weak binding
    assert "cam-strong" not in body
    # Nothing is fetched from elsewhere: no external scripts, styles or images.
    assert not re.search(r'(src|href)="(https?:)?//', body)


def test_dashboard_shows_seat_releases_against_the_policy(admin_client, fleet):
    from licensing.services.seats import seat_release

    batch, _ = fleet
    empty = admin_client.get(reverse("console-dashboard")).content.decode()
    assert "No seat released in the last 30 days." in empty
    seat_release(license_id=batch.activations.get(device_id="cam-strong").license_id, reason="x")
    unit_activate(batch_token=batch.license.token, device_id="cam-replacement")

    body = admin_client.get(reverse("console-dashboard")).content.decode()

    section = body.split('id="seat-releases"', 1)[1].split("</table>", 1)[0]
    assert batch.pk in section and batch.customer.name in section
    cells = re.findall(r"<td[^>]*>(.*?)</td>", section, re.S)
    assert cells[2:4] == ["1 of 1 allowed", "1"], cells
    assert 'svc-red" title="the release policy allows 1 per 30 days"' in section
    assert re.search(r"Seat releases \(30 days\)</div><div class=\"svc-stat\">1<", body)


def test_dashboard_and_preview_need_staff(client):
    for name in ("console-dashboard", "console-invoice-preview"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert reverse("admin:login") in response.url


def test_invoice_preview_rates_and_exports_csv(admin_client, fleet, customer):
    url = reverse("console-invoice-preview")
    assert admin_client.get(url).status_code == 200
    page = admin_client.get(url, {"customer": customer.pk, "period_days": 30})
    assert page.status_code == 200
    body = page.content.decode()
    assert "unit_activation" in body and "direct_license" in body
    estimate = body[body.index('id="estimate"') :]
    assert 'svc-total">570.00 EUR' in estimate  # 2 units x 240 + 1 licence x 90
    csv_response = admin_client.get(
        url, {"customer": customer.pk, "period_days": 30, "format": "csv"}
    )
    assert csv_response["Content-Type"].startswith("text/csv")
    assert "attachment" in csv_response["Content-Disposition"]
    assert "unit_activation" in csv_response.content.decode()


def test_invoice_preview_reports_a_bad_period(admin_client, customer):
    page = admin_client.get(
        reverse("console-invoice-preview"), {"customer": customer.pk, "period_days": 0}
    )
    assert page.status_code == 200
    assert "greater than or equal to 1" in page.content.decode()


def test_invoice_issue_from_the_preview(admin_client, customer, make_batch, server_clock):
    from billing import models as billing_models

    server_clock(-86400)  # sold and activated yesterday
    batch = make_batch(units=5)
    unit_activate(batch_token=batch.license.token, device_id="cam-1")
    server_clock(0)
    url = reverse("console-invoice-preview")
    # Posting to the preview issues nothing: issuing is its own, confirmed, step.
    assert admin_client.post(url, {"customer": customer.pk, "period_days": 30}).status_code == 405
    preview = admin_client.get(url, {"customer": customer.pk, "period_days": 30}).content.decode()
    form = dict(re.findall(r'name="(period_end|expected_total)" value="([^"]*)"', preview))
    response = admin_client.post(
        reverse("console-invoice-issue"),
        {"customer": customer.pk, "period_days": 30, "confirmed": "yes", **form},
    )
    assert response.status_code == 302
    invoice = billing_models.Invoice.objects.get(customer=customer)
    page = admin_client.get(response.url).content.decode()
    assert invoice.number in page
    again = admin_client.get(url, {"customer": customer.pk, "period_days": 30})
    assert "already invoiced" in again.content.decode()


def test_license_list_shows_each_license_state(admin_client, admin_user, customer, server_clock):
    """The state column is the portal's component (licensing.unit_states, issue 41: one
    vocabulary, the same words and CSS class) at the spec §3 boundaries: active up to exp,
    in grace up to exp + grace_days, then expired; a perpetual term is "(no end)" beside
    its state, a revocation its reason."""
    term = license_issue(
        customer_id=customer.id, sku="API-METERED", device_id="cam-term", term_days=1
    )  # grace 7 days
    perpetual = license_issue(
        customer_id=customer.id, sku="ANPR-PERPETUAL", device_id="cam-perpetual"
    )
    revoked = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-stolen")
    license_revoke(license_id=revoked.id, reason="stolen")
    exp = dt.datetime.fromtimestamp(term.claims["exp"], dt.UTC)

    def states_at(moment: dt.datetime) -> dict[str, str]:
        server_clock((moment - timezone.now()).total_seconds())
        # Days apart, each a session of its own (config.sessions ends an idle one).
        admin_client.force_login(admin_user)
        body = admin_client.get(reverse("admin:licensing_license_changelist")).content.decode()
        found = {}
        for lic in (term, perpetual, revoked):
            row = next(row for row in body.split("<tr") if f">{lic.id}</a>" in row)
            cell = re.search(r'<td class="field-state">(.*?)</td>', row, re.S)[1]
            code = re.search(r'class="svc-state svc-state-(\w+)"', cell)[1]
            found[lic.id] = (code, " ".join(re.sub(r"<[^>]+>", " ", cell).split()))
        return found

    always = {
        perpetual.id: ("active", "active (no end)"),
        revoked.id: ("revoked", "revoked stolen"),
    }
    # The server clock runs on while a page renders: each moment is aimed half a second
    # inside the state it tests (the boundary seconds themselves: tests/test_one_home.py).
    half = dt.timedelta(seconds=0.5)
    for moment, state in [
        (exp - half, ("active", "active")),
        (exp + dt.timedelta(seconds=1), ("grace", "in grace")),
        (exp + dt.timedelta(days=7) - half, ("grace", "in grace")),
        (exp + dt.timedelta(days=7, seconds=1), ("expired", "expired")),
    ]:
        assert states_at(moment) == {term.id: state, **always}, moment
