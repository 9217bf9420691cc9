"""The customer portal (issue 29): operators invite people (API, console, svcctl); the
e-mailed one-time link sets a password; the pages show the customer's seats, fleet,
usage, invoices; renewal requests wait for an operator; customer API keys read the
admin API's shapes under their own rate limit; customer webhooks carry only the
customer's events."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

import pypdf
import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice
from rest_framework.test import APIClient

from audit.models import AuditEntry
from events.delivery import next_event
from events.models import Event
from licensing.models import Renewal
from licensing.services import batch_issue, license_issue, unit_activate
from portal import services
from portal.models import CustomerUser, Invitation, RenewalRequest
from tests.portal.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _link(message) -> str:
    return re.search(r"http://\S+/portal/invitation/\S+/", message.body).group(0)


def test_an_invitation_by_the_admin_api_mails_a_link_that_works_once(admin_api, customer):
    answer = admin_api.post(
        f"/v1/admin/customers/{customer.pk}/users",
        {"email": "Ana.Ruiz@Example.COM", "name": "Ana"},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert (body["email"], body["state"], body["customer_id"]) == (
        "Ana.Ruiz@example.com", "pending", customer.pk,
    )  # fmt: skip
    assert "secret" not in str(body) and "invitation/" not in str(body)
    (message,) = mail.outbox
    assert message.to == ["Ana.Ruiz@example.com"] and customer.name in message.body
    link = _link(message)
    path = link.split("testserver", 1)[1]

    client = Client()
    page = client.get(path)
    assert page.status_code == 200 and customer.name in page.content.decode()
    short = client.post(path, {"password": "short", "confirm": "short"})
    assert short.status_code == 200 and "too short" in short.content.decode()
    done = client.post(path, {"password": PASSWORD, "confirm": PASSWORD})
    assert done.status_code == 302 and done["Location"] == reverse("portal-dashboard")
    assert client.get(reverse("portal-dashboard")).status_code == 200

    account = CustomerUser.objects.get()
    assert account.customer == customer and not account.user.is_staff
    assert Invitation.objects.get().state == "accepted"
    # The link works once; a second use reads as any bad link.
    again = Client().post(path, {"password": PASSWORD, "confirm": PASSWORD})
    assert again.status_code == 404 and get_user_model().objects.count() == 1
    # The address now has an account: a second invitation is refused.
    answer = admin_api.post(
        f"/v1/admin/customers/{customer.pk}/users", {"email": "ana.ruiz@example.com"}, format="json"
    )
    assert answer.status_code == 409 and "already has an account" in answer.json()["detail"]
    listing = admin_api.get(f"/v1/admin/customers/{customer.pk}/users").json()
    assert [u["email"] for u in listing["users"]] == ["Ana.Ruiz@example.com"]
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"customer_user.invite", "customer_user.accept"} <= actions
    assert not AuditEntry.objects.filter(detail__icontains=PASSWORD).exists()


def test_invitation_refusals_name_the_problem(admin_api, customer, server_clock):
    unknown = admin_api.post(
        "/v1/admin/customers/CUST-NOPE/users", {"email": "a@b.example"}, format="json"
    )
    assert unknown.status_code == 404
    bad = admin_api.post(
        f"/v1/admin/customers/{customer.pk}/users", {"email": "nobody"}, format="json"
    )
    assert bad.status_code == 400 and "not an e-mail address" in bad.json()["detail"]
    extra = admin_api.post(
        f"/v1/admin/customers/{customer.pk}/users",
        {"email": "a@b.example", "role": "x"},
        format="json",
    )
    assert extra.status_code == 400 and "'role'" in str(extra.json())
    invitation, link = services.invitation_create(
        customer_id=customer.pk,
        email="late@b.example",
        link_base="http://testserver/portal/invitation/",
    )
    server_clock(8 * 86_400)  # a week and a day later
    page = Client().get(link.split("testserver", 1)[1])
    assert page.status_code == 404 and "expired" in page.content.decode()


def test_the_pages_show_seats_fleet_usage_terms_and_invoices(worlds, server_clock):
    alpha, _ = worlds
    ending = batch_issue(customer_id=alpha.customer.pk, sku="VISION-PRO", units=7, term_days=10)
    with server_clock.at(dt.datetime.now(dt.UTC) - dt.timedelta(days=370)):  # 5 days past
        lapsed = license_issue(customer_id=alpha.customer.pk, sku="DETECT-STD", device_id="old-cam")
    client = alpha.client()
    page = client.get(reverse("portal-dashboard")).content.decode()
    expiring = page.split('id="expiring"', 1)[1].split('id="grace"', 1)[0]
    assert ending.pk in expiring and "0 of 7" in expiring
    grace = page.split('id="grace"', 1)[1].split('id="weak"', 1)[0]
    assert lapsed.pk in grace and "old-cam" in grace
    dashboard = client.get(reverse("portal-dashboard")).content.decode()
    assert (
        alpha.batch.pk in dashboard
        and "2 / 5" in dashboard.replace("\u2009", " ")
        or "2/5" in dashboard
    )
    for section in ("seats", "chart-activations", "usage", "expiring", "grace", "weak"):
        assert f'id="{section}"' in dashboard
    batch = client.get(reverse("portal-batch", args=[alpha.batch.pk])).content.decode()
    assert "Alpha-cam-001" in batch
    fleet = client.get(reverse("portal-fleet")).content.decode()
    assert "Alpha-cam-001" in fleet
    # The export: every unit, and the device id that is a formula made inert.
    export = b"".join(client.get(reverse("portal-fleet-csv")).streaming_content).decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(export)))
    assert {r["license_id"] for r in rows} == set(alpha.units)
    formula = [r["device_id"] for r in rows if "HYPERLINK" in r["device_id"]]
    assert formula and not formula[0].startswith("=")
    # Invoices and their PDF.
    invoices = client.get(reverse("portal-invoices")).content.decode()
    assert alpha.invoice.number in invoices
    pdf = client.get(reverse("portal-document-pdf", args=[alpha.invoice.number]))
    text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text()
    assert alpha.invoice.number in text and alpha.customer.name[:20] in text
    page = client.get(reverse("portal-document", args=[alpha.invoice.number]))
    assert page.status_code == 200 and alpha.invoice.number in page.content.decode()


def test_a_renewal_request_renews_and_bills_nothing_until_an_operator_approves(
    worlds, admin_client
):
    alpha, _ = worlds
    client = alpha.client()
    answer = client.post(reverse("portal-renewals"), {"target": alpha.direct.pk, "term_days": "90"})
    assert answer.status_code == 302
    made = RenewalRequest.objects.get(license_id=alpha.direct.pk)
    assert made.state == "pending" and made.term_days == 90
    assert not Renewal.objects.exists()
    twice = client.post(reverse("portal-renewals"), {"target": alpha.direct.pk})
    assert "already waiting for approval" in twice.content.decode()

    # The operator sees the amount first, then approves.
    changelist = reverse("admin:portal_renewalrequest_changelist")
    confirm = admin_client.post(changelist, {"action": "approve", "_selected_action": [made.pk]})
    page = confirm.content.decode()
    assert confirm.status_code == 200 and alpha.direct.pk in page and "EUR" in page
    assert not Renewal.objects.exists()
    admin_client.post(
        changelist, {"action": "approve", "_selected_action": [made.pk], "apply": "1"}
    )
    made.refresh_from_db()
    renewal = Renewal.objects.get()
    assert made.state == "approved" and made.new_expires_at == renewal.expires_at
    assert renewal.license_id == alpha.direct.pk and renewal.term_days == 90
    shown = client.get(reverse("portal-renewals")).content.decode()
    assert "approved" in shown
    asked = AuditEntry.objects.get(action="renewal_request.create", target=made.pk)
    assert (asked.actor, asked.actor_kind) == (alpha.account.user.username, "customer")

    # A declined one renews nothing and says why.
    declined = alpha.renewal
    admin_client.post(
        changelist,
        {
            "action": "decline",
            "_selected_action": [declined.pk],
            "apply": "1",
            "reason": "talk to sales",
        },
    )
    declined.refresh_from_db()
    assert declined.state == "declined" and Renewal.objects.count() == 1
    assert "talk to sales" in client.get(reverse("portal-renewals")).content.decode()


def test_customer_api_keys_read_the_admin_shapes_under_their_own_limit(worlds, admin_api, settings):
    alpha, _ = worlds
    api = APIClient()
    assert api.get("/v1/customer/fleet").status_code == 401
    api.credentials(HTTP_AUTHORIZATION="Bearer svccu_000000000000_" + "x" * 43)
    assert api.get("/v1/customer/fleet").status_code == 403
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {alpha.key}")
    mine = api.get("/v1/customer/fleet").json()
    admins = admin_api.get("/v1/admin/fleet", {"customer_id": alpha.customer.pk}).json()
    assert mine["units"] == admins["units"] and set(mine) == set(admins)
    first = api.get("/v1/customer/fleet", {"limit": 1}).json()
    second = api.get("/v1/customer/fleet", {"limit": 1, "cursor": first["next_cursor"]}).json()
    assert [u["license_id"] for u in first["units"] + second["units"]] == [
        u["license_id"] for u in admins["units"]
    ]
    batch = api.get("/v1/customer/batches").json()["batches"][0]
    assert batch == admin_api.get(f"/v1/admin/batches/{alpha.batch.pk}").json()
    usage = api.get("/v1/customer/usage", {"license_id": alpha.direct.pk}).json()["licenses"]
    assert usage == [admin_api.get(f"/v1/admin/usage/{alpha.direct.pk}").json()]
    page = api.get("/v1/customer/usage", {"limit": 1}).json()
    assert len(page["licenses"]) == 1 and page["next_cursor"]
    assert api.get("/v1/customer/usage", {"cursor": "nope"}).status_code == 400
    invoice = api.get(f"/v1/customer/invoices/{alpha.invoice.number}").json()
    assert invoice == admin_api.get(f"/v1/admin/invoices/{alpha.invoice.number}").json()
    assert api.post("/v1/customer/fleet", {}, format="json").status_code == 405  # reads only
    assert api.get("/v1/admin/fleet").status_code in (401, 403)  # not an operator key

    settings.SVC_CUSTOMER_API_RATE = 2
    statuses = [api.get("/v1/customer/batches").status_code for _ in range(4)]
    assert 429 in statuses
    limited = api.get("/v1/customer/batches")
    assert limited.status_code == 429 and "SVC_CUSTOMER_API_RATE" in limited.json()["detail"]
    assert int(limited["Retry-After"]) >= 1

    # Revoked in the portal: it opens nothing from then on.
    alpha.client().post(reverse("portal-api-key-revoke", args=[alpha.key_prefix]))
    settings.SVC_CUSTOMER_API_RATE = 1000
    assert api.get("/v1/customer/fleet").status_code == 403


def test_a_key_made_in_the_portal_is_shown_once_and_works(worlds):
    alpha, _ = worlds
    page = alpha.client().post(reverse("portal-api-keys"), {"name": "erp-export"}).content.decode()
    key = re.search(r"svccu_[0-9a-f]{12}_[A-Za-z0-9_-]+", page).group(0)
    assert key not in alpha.client().get(reverse("portal-api-keys")).content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/v1/customer/batches").status_code == 200


def test_customer_webhooks_get_only_their_customers_events(worlds):
    alpha, beta = worlds
    client = alpha.client()
    refused = client.post(
        reverse("portal-webhooks"),
        {"url": "https://127.0.0.1:9/x", "events": ["signing_key.revoked"]},
    )
    assert "signing_key.revoked is not one of the available choices" in refused.content.decode()
    made = client.post(
        reverse("portal-webhooks"),
        {"url": "https://127.0.0.1:9/all", "events": ["license.activated", "invoice.issued"]},
    )
    assert "whsec_" in made.content.decode() or "Signing secret" in made.content.decode()
    hooks = alpha.customer.webhooks.all()
    assert hooks.count() == 2 and all(h.customer_id == alpha.customer.pk for h in hooks)
    for world in (alpha, beta):  # an activation of each customer after the hook was made
        unit_activate(batch_token=world.batch.license.token, device_id=f"new-{world.batch.pk}")
    hook = hooks.get(url="https://127.0.0.1:9/all")
    seen = []
    event = next_event(hook)
    while event is not None:
        seen.append(event.customer_id)
        hook.position = event.id
        event = next_event(hook)
    assert seen and set(seen) == {alpha.customer.pk}
    assert Event.objects.filter(customer_id=beta.customer.pk, id__gt=hook.position).exists()


def test_portal_logins_take_the_second_factor_when_required(worlds, settings):
    alpha, _ = worlds
    settings.SVC_REQUIRE_2FA = True
    client = Client()
    login = client.post(
        reverse("portal-login"), {"username": alpha.account.user.username, "password": PASSWORD}
    )
    assert login.status_code == 302
    answer = client.get(reverse("portal-dashboard"))
    assert answer.status_code == 302 and answer["Location"].startswith(
        reverse("portal-second-factor")
    )
    enrol = client.get(answer["Location"])
    assert "enrol-qr" in enrol.content.decode()
    device = TOTPDevice.objects.get(user=alpha.account.user)
    code = f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits):06d}"
    confirmed = client.post(reverse("portal-second-factor"), {"code": code, "next": "/portal/"})
    assert "recovery-codes" in confirmed.content.decode()
    assert client.get(reverse("portal-dashboard")).status_code == 200


def test_the_login_refuses_staff_and_locks_out_after_wrong_passwords(
    worlds, settings, django_user_model
):
    alpha, _ = worlds
    django_user_model.objects.create_user("operator", "o@example.com", PASSWORD, is_staff=True)
    client = Client()
    staff = client.post(reverse("portal-login"), {"username": "operator", "password": PASSWORD})
    assert "not a customer account" in staff.content.decode()
    settings.AXES_FAILURE_LIMIT = 3
    username = alpha.account.user.username
    for _ in range(3):
        client.post(reverse("portal-login"), {"username": username, "password": "wrong"})
    locked = client.post(reverse("portal-login"), {"username": username, "password": PASSWORD})
    assert locked.status_code in (403, 429)
    assert client.get(reverse("portal-dashboard")).status_code == 302
