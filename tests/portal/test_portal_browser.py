"""The customer portal in a real browser (issue 29): Debian's Chromium through
Playwright against a live gunicorn. An operator invites a person from the customer's
console page; the invitation e-mail (the server's console e-mail backend, read from its
log) carries the one-time link; the person sets a password, lands on the dashboard,
exports the fleet as CSV and downloads an invoice's PDF. And svcctl invites through the
API."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import time

import pypdf
import pytest
from django.contrib.auth import get_user_model

from billing.services import invoice_issue
from config.admin.display import money
from customers.services import customer_create
from licensing.models import Activation, Batch
from licensing.services import batch_issue, license_issue
from portal.models import CustomerUser, Invitation
from svccore import dates
from tests.browser import is_favicon
from tests.operators.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    _browser_or_skip,
    _camera,
    _post,
)
from tests.operators.test_console_layout import LAYOUT_PROBLEMS_JS, _screenshot_dir
from tests.operators.test_svcctl import svcctl
from tests.portal.conftest import PASSWORD as ACCOUNT_PASSWORD
from tests.portal.conftest import account_for

pytestmark = pytest.mark.live

NAME = "Nordlicht Sicherheitstechnik und Videoanalyse GmbH & Co. KG"
CUSTOMER_PASSWORD = "hafen-kamera-2026-sicher"


@pytest.fixture(autouse=True)
def _database_beside_the_browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _mailed_link(live_service, email: str) -> str:
    """The invitation link the server's console e-mail backend wrote to its log."""
    deadline = time.monotonic() + 10
    while True:
        text = live_service.log.read_text(errors="replace")
        found = re.findall(
            rf"To: {re.escape(email)}[\s\S]*?(http://\S+/portal/invitation/\S+/)", text
        )
        if found:
            return found[-1]
        assert time.monotonic() < deadline, "no invitation e-mail in the server's log"
        time.sleep(0.2)


def test_invitation_first_login_dashboard_fleet_export_and_invoice_pdf(
    live_service, transactional_db, server_clock, tmp_path
):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(
        name=NAME, kind="oem", billing_address="Hafenstraße 1\n20457 Hamburg"
    )
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(today - dt.timedelta(days=3)):
        license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id="nl-lobby-01")
    invoice = invoice_issue(customer_id=customer.pk, period_days=30)
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=40)
    devices = [f"nl-ham-{n:03d}-axis-p3265-lve-b8a44f3c2d{n:02d}" for n in range(3)]
    for device in devices:
        _camera(
            live_service.url,
            batch.license.token,
            device,
            weak=device.endswith("02"),
            inferences=500,
        )
    email = "ana.ruiz@nordlicht-videoanalyse.example"
    url = live_service.url

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            # The operator invites from the customer's page.
            operator = browser.new_page(viewport={"width": 1280, "height": 900})
            operator.set_default_timeout(15_000)
            operator.goto(f"{url}/admin/")
            operator.fill("#id_username", "operator")
            operator.fill("#id_password", PASSWORD)
            operator.click("input[type=submit]")
            operator.goto(f"{url}/admin/customers/customer/{customer.pk}/change/")
            operator.click("a:text('Invite a portal user')")
            assert operator.input_value("#id_customer") == customer.pk
            operator.fill("#id_email", email)
            operator.fill("#id_name", "Ana Ruiz")
            operator.click("input[type=submit]")
            assert f"Invitation sent to {email}" in operator.inner_text(".messagelist")
            link = _mailed_link(live_service, email)

            # The invited person: a fresh browser, the link, a password, the dashboard.
            person = browser.new_context(
                viewport={"width": 1000, "height": 900}, accept_downloads=True
            )
            page = person.new_page()
            page.set_default_timeout(15_000)
            page.goto(link)
            assert NAME in page.inner_text("#content")
            page.fill("#id_password", CUSTOMER_PASSWORD)
            page.fill("#id_confirm", CUSTOMER_PASSWORD)
            page.click("#invitation-submit")
            page.wait_for_selector("#seats")
            assert batch.pk in page.inner_text("#seats")
            assert devices[2] in page.inner_text("#weak")
            assert page.locator("#chart-activations svg").count() == 1
            # Every portal page fits 1000 px with this realistic data (long names, real
            # device ids), checked in the page as the console's layout test does.
            shots = _screenshot_dir(tmp_path, 1000)
            for name in ("dashboard", "batches", "fleet", "invoices", "renewals", "api-keys",
                         "webhooks"):  # fmt: skip
                page.goto(f"{url}/portal/{'' if name == 'dashboard' else name + '/'}")
                page.screenshot(path=str(shots / f"portal-{name}.png"), full_page=True)
                assert page.evaluate(LAYOUT_PROBLEMS_JS) == [], name
            page.goto(f"{url}/portal/")

            # The fleet: search, then the whole fleet as CSV.
            page.click("#portal-nav a:text('Fleet')")
            page.fill("#q", "ham-001")
            page.click("#fleet-search input[type=submit]")
            assert devices[1] in page.inner_text("#units") and devices[0] not in page.inner_text(
                "#units"
            )
            with page.expect_download() as download:
                page.click("#fleet-export")
            rows = list(
                csv.DictReader(
                    io.StringIO(open(download.value.path(), encoding="utf-8-sig").read())
                )
            )
            assert sorted(r["device_id"] for r in rows) == sorted(devices)

            # An invoice and its PDF.
            page.click("#portal-nav a:text('Invoices')")
            page.click(f"a:text('{invoice.number}')")
            with page.expect_download() as download:
                page.click("#document-pdf")
            assert download.value.suggested_filename == f"{invoice.number}.pdf"
            pdf = pypdf.PdfReader(io.BytesIO(open(download.value.path(), "rb").read()))
            text = pdf.pages[0].extract_text()
            assert f"Invoice {invoice.number}" in text and "Hafenstraße 1" in text

            # Another customer's batch is not there.
            other = customer_create(name="Another customer", kind="oem")
            foreign = batch_issue(customer_id=other.pk, sku="VISION-PRO", units=1)
            answer = page.goto(f"{url}/portal/batches/{foreign.pk}/")
            assert answer.status == 404
        finally:
            browser.close()

    account = CustomerUser.objects.get()
    assert (account.customer_id, account.user.username) == (customer.pk, email)
    assert Invitation.objects.get().state == "accepted"
    assert Batch.objects.get(pk=batch.pk).units_activated == 3


def test_svcctl_invites_and_lists_portal_users(live_service, transactional_db):
    customer = customer_create(name=NAME, kind="oem")
    online = {"SVC_URL": live_service.url, "SVC_ADMIN_KEY": live_service.admin_key}
    made = svcctl("invite", customer.pk, "li.wei@nordlicht.example", "--name", "Li Wei", env=online)
    assert made.returncode == 0, made.stderr
    assert "li.wei@nordlicht.example" in made.stdout and "link valid until" in made.stdout
    listed = svcctl("portal-users", customer.pk, env=online)
    assert "li.wei@nordlicht.example" in listed.stdout and "invitation pending" in listed.stdout
    again = svcctl("invite", customer.pk, "nobody", env=online)
    assert again.returncode != 0 and "not an e-mail address" in again.stderr
    missing = svcctl("invite", "CUST-NOPE", "a@b.example", env=online)
    assert missing.returncode != 0 and "CUST-NOPE" in missing.stderr


def test_invoice_page_shows_the_document_and_its_total(
    live_service, transactional_db, server_clock
):
    """Issue 41: the invoice was a blank 300x150 box (the document's quotes ended the
    frame's srcdoc attribute). The total is read from inside the frame, as shown."""
    sync_playwright = _browser_or_skip()
    customer = customer_create(
        name=NAME, kind="oem", billing_address="Hafenstraße 1\n20457 Hamburg"
    )
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(today - dt.timedelta(days=3)):
        license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id="nl-lobby-01")
    invoice = invoice_issue(customer_id=customer.pk, period_days=30)
    # What is due: the net total and VAT on top (issue 43).
    total = money(invoice.gross_total, invoice.currency)
    assert invoice.total > 0 and invoice.tax_total > 0, total
    account_for(customer, "ana.ruiz@nordlicht-videoanalyse.example")
    url = live_service.url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on(
                "console",
                lambda m: m.type == "error" and not is_favicon(m) and errors.append(m.text),
            )
            page.goto(f"{url}/portal/login/")
            page.fill("#id_username", "ana.ruiz@nordlicht-videoanalyse.example")
            page.fill("#id_password", ACCOUNT_PASSWORD)
            page.click("#login-submit")
            page.wait_for_selector("#portal-nav")
            page.goto(f"{url}/portal/invoices/{invoice.number}/")
            frame = page.frame_locator("#document-frame")
            shown = frame.locator("body").inner_text()
            assert f"Invoice {invoice.number}" in shown, shown
            assert "Hafenstraße 1" in shown
            due = frame.locator("tr:has-text('Total due') td.num").inner_text()
            assert due.strip() == total, (due, total)
            box = page.eval_on_selector("#document-frame", "e => e.getBoundingClientRect().height")
            assert box > 600, box
            assert not errors, errors
        finally:
            browser.close()


def test_the_fleet_shows_last_contact_and_finds_silent_cameras(
    moved_service, server_clock, tmp_path
):
    """Last seen (issue 42) in the portal: cameras activated, twelve days later (the
    service's clock) two checked in and one stayed silent. The fleet shows each one's
    last contact in the page's time format, its filter finds the silent one, and the
    filtered export holds only it, with its last contact; at 1000 px."""
    sync_playwright = _browser_or_skip()
    customer = customer_create(name=NAME, kind="oem")
    account_for(customer, "ana.ruiz@nordlicht-videoanalyse.example")
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=40)
    url = moved_service.url
    devices = [f"nl-ham-{n:03d}-axis-p3265-lve-b8a44f3c2d{n:02d}" for n in range(3)]
    for device in devices:
        _post(f"{url}/v1/activate", {"batch_token": batch.license.token, "device_id": device})
    server_clock(12 * 86400)
    for device in devices[:2]:
        _post(f"{url}/v1/activate", {"batch_token": batch.license.token, "device_id": device})
    seen = {a.device_id: a.last_seen_at for a in Activation.objects.all()}
    silent = devices[2]
    assert seen[silent] < seen[devices[0]] - dt.timedelta(days=11)

    def shown(moment: dt.datetime) -> str:
        return dates.moment(moment)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(
                viewport={"width": 1000, "height": 900}, accept_downloads=True
            )
            page = context.new_page()
            page.set_default_timeout(15_000)
            page.goto(f"{url}/portal/login/")
            page.fill("#id_username", "ana.ruiz@nordlicht-videoanalyse.example")
            page.fill("#id_password", ACCOUNT_PASSWORD)
            page.click("#login-submit")
            page.wait_for_selector("#portal-nav")
            page.click("#portal-nav a:text('Fleet')")
            assert "LAST SEEN (UTC)" in page.inner_text("#units thead").upper()
            for device in devices:
                row = page.locator("#units tbody tr", has_text=device)
                cell = " ".join(row.locator("td.svc-seen").inner_text().split())
                assert cell == shown(seen[device]), (device, cell)
            assert page.evaluate(LAYOUT_PROBLEMS_JS) == []

            page.select_option("#not_seen_days", "7")
            page.click("#fleet-search input[type=submit]")
            page.wait_for_selector("#fleet-not-seen")
            units = page.inner_text("#units tbody")
            assert silent in units and devices[0] not in units and devices[1] not in units
            assert "not seen for more than 7 days" in page.inner_text("#fleet-not-seen")
            assert page.evaluate(LAYOUT_PROBLEMS_JS) == []
            page.screenshot(
                path=str(_screenshot_dir(tmp_path, 1000) / "portal-fleet-silent.png"),
                full_page=True,
            )
            with page.expect_download() as download:
                page.click("#fleet-export")
            rows = list(
                csv.DictReader(
                    io.StringIO(open(download.value.path(), encoding="utf-8-sig").read())
                )
            )
            assert [r["device_id"] for r in rows] == [silent]
            assert rows[0]["last_seen_at"] == seen[silent].strftime("%Y-%m-%dT%H:%M:%SZ")

            # Thirty days: none of these cameras has been silent that long.
            page.select_option("#not_seen_days", "30")
            page.click("#fleet-search input[type=submit]")
            page.wait_for_selector("#fleet-not-seen")
            assert "No units not seen for more than 30 days" in page.inner_text("#units")
        finally:
            browser.close()
