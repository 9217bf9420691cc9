"""Finance and operator flows end to end in a real browser (issue 26): Debian's Chromium
through Playwright against a live gunicorn.

Finance: invoice preview, issue (confirmed with its total), the document's PDF, a credit
note (confirmed with what it reverses), and the same period issued again. Operator: a
customer edited, a 250-unit batch issued after its amount is confirmed, a camera's
licence revoked and the batch renewed, each after a confirmation that shows its context.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import urllib.parse
import urllib.request

import pypdf
import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEntry
from billing.models import Invoice
from customers.models import Customer
from customers.services import customer_create
from licensing.models import Activation, Batch, License, Renewal
from licensing.services import batch_issue, license_issue, license_revoke
from svccore import dates
from tests.operators.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    _browser_or_skip,
    _camera,
    _post,
)
from tests.operators.test_console_layout import LAYOUT_PROBLEMS_JS, _screenshot_dir

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def _database_beside_the_browser(monkeypatch):
    """The tests read the database between clicks; Playwright's sync API runs an event
    loop in this thread, which Django would otherwise take for async code."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


NAME = "Nordlicht Sicherheitstechnik und Videoanalyse GmbH & Co. KG"


def _login(page, url: str) -> None:
    page.goto(f"{url}/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#svc-console-links")


def _browser(playwright):
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )


def test_finance_preview_issue_pdf_credit_note_and_reissue(
    live_service, transactional_db, server_clock
):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    address = "Hafenstraße 1\n20457 Hamburg"
    customer = customer_create(name=NAME, kind="oem", billing_address=address, tax_id="DE298765432")
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(today - dt.timedelta(days=3)):
        for n in range(3):
            license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id=f"nl-lobby-{n}")
    url = live_service.url

    with sync_playwright() as playwright:
        browser = _browser(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
            page.set_default_timeout(15_000)
            _login(page, url)

            # Preview: the next invoice as "Issue" issues it, and the estimate beside it.
            page.click("#svc-console-links a:text('Invoice preview')")
            page.select_option("#id_customer", customer.pk)
            page.click("input[value=Preview]")
            assert "270.00 EUR" in page.inner_text("#draft-lines .svc-total")
            page.click("#invoice-issue-form input[type=submit]")

            # Confirm with the total, then the issued document.
            assert "270.00 EUR" in page.inner_text("#confirm-total")
            assert not Invoice.objects.exists()
            page.click("#confirm-issue")
            page.wait_for_selector(".svc-document")
            first = Invoice.objects.get()
            assert f"Invoice {first.number} issued" in page.inner_text(".messagelist")
            document = page.inner_text(".svc-document")
            assert "Hafenstraße 1" in document and "DE298765432" in document
            # Net 270.00, German VAT on top (a customer with no country is the seller's).
            words = " ".join(document.split())
            assert "Net total 270.00 EUR" in words and "VAT 19" in words
            assert "Total due 321.30 EUR" in words

            # The PDF, as the customer gets it.
            with page.expect_download() as download:
                page.click("#document-pdf")
            pdf = download.value
            assert pdf.suggested_filename == f"{first.number}.pdf"
            text = (
                pypdf.PdfReader(io.BytesIO(open(pdf.path(), "rb").read())).pages[0].extract_text()
            )
            assert f"Invoice {first.number}" in text and "Total due 321.30 EUR" in text

            # Credit it: the confirmation shows what is reversed.
            page.click("#document-credit")
            assert "-270.00 EUR" in page.inner_text("#credit-total")
            assert "-3" in page.inner_text("#credit-lines")
            page.fill("#id_reason", "wrong SKU agreed with the customer")
            page.click("#confirm-credit")
            page.wait_for_selector(".svc-document")
            note = Invoice.objects.get(kind="credit_note")
            assert f"Credit note {note.number}" in page.inner_text(".svc-document")
            assert page.locator("#document-credit").count() == 0

            # The credited period is issued again: the same lines wait for it.
            page.goto(f"{url}/admin/invoice-preview/?customer={customer.pk}&period_days=30")
            assert "270.00 EUR" in page.inner_text("#draft-lines .svc-total")
            page.click("#invoice-issue-form input[type=submit]")
            page.click("#confirm-issue")
            page.wait_for_selector(".svc-document")
        finally:
            browser.close()

    again = Invoice.objects.filter(kind="invoice").exclude(pk=first.pk).get()
    assert (again.period_start, again.period_end, again.total) == (
        first.period_start, first.period_end, first.total,
    )  # fmt: skip
    assert again.revision == 1
    actions = AuditEntry.objects.filter(actor="operator", result="ok").values_list(
        "action", flat=True
    )
    assert sorted(actions) == ["invoice.credit", "invoice.issue", "invoice.issue"]


def test_operator_edit_customer_issue_batch_revoke_and_renew(live_service, transactional_db):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(name=NAME, kind="oem")
    url = live_service.url

    with sync_playwright() as playwright:
        browser = _browser(playwright)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.set_default_timeout(15_000)
            _login(page, url)

            # Edit the customer: billing address and tax id.
            page.goto(f"{url}/admin/customers/customer/{customer.pk}/change/")
            page.fill("#id_billing_address", "Überseeallee 12\n20457 Hamburg")
            page.fill("#id_tax_id", "DE298765432")
            page.click("#customer-save")
            assert "updated: billing address, tax id" in page.inner_text(".messagelist")

            # Issue a 250-unit batch: the SKU is chosen, the amount confirmed first.
            page.click("a:text('Issue batch')")
            assert page.input_value("#id_sku") == ""
            page.select_option("#id_sku", "VISION-PRO")
            page.fill("#id_units", "250")
            page.click("input[name=_submit]")
            amount = page.inner_text("#confirm-amount")
            assert re.fullmatch(r"\d{1,3}(,\d{3})*\.\d\d EUR", amount), amount
            assert not Batch.objects.exists()
            page.click(f"input[value='Yes, issue the batch ({amount})']")
            page.wait_for_selector("#batch-key")
            batch = Batch.objects.get()
            batch_key = page.input_value("#batch-key")

            # A camera activates; its licence is revoked after a confirmation naming it.
            device = "nl-ham-007-axis-p3265-lve-b8a44f3c2d19"
            _camera(url, batch_key, device, weak=False, inferences=100)
            page.goto(f"{url}/admin/licensing/activation/")
            page.check("#result_list input.action-select")
            page.select_option("select[name=action]", "revoke_units")
            page.click("button[name=index]")
            context = page.inner_text("#revoke-rows")
            assert device in context and NAME in context and batch.pk in context
            page.fill("#id_reason", "camera stolen from the quay")
            page.click("input.svc-danger[value='Revoke 1 unit licence']")
            assert "Revoked 1 unit licence;" in page.inner_text(".messagelist")

            # Renew the batch: its new end and amount before anything is renewed.
            page.goto(f"{url}/admin/licensing/batch/")
            page.check("#result_list input.action-select")
            page.select_option("select[name=action]", "renew_batches")
            page.click("button[name=index]")
            quote = page.inner_text("#renew-quotes")
            assert batch.pk in quote and "365 days" in quote
            assert not Renewal.objects.exists()
            page.click("input[type=submit].default")
            assert f"Renewed 1 batch ({batch.pk} now ends " in page.inner_text(".messagelist")
        finally:
            browser.close()

    customer = Customer.objects.get()
    assert (customer.billing_address, customer.tax_id) == ("Überseeallee 12\n20457 Hamburg",
                                                            "DE298765432")  # fmt: skip
    assert License.objects.get(kind="unit").revoke_reason == "camera stolen from the quay"
    renewal = Renewal.objects.get()
    assert renewal.batch_id == batch.pk and renewal.units == 0  # the one unit was revoked


def _status_fetch(url: str, license_id: str, device_id: str) -> None:
    query = urllib.parse.urlencode({"license_id": license_id, "device_id": device_id})
    with urllib.request.urlopen(f"{url}/v1/revocations/status?{query}", timeout=10) as answer:
        assert json.loads(answer.read())["license_id"] == license_id


def test_operator_finds_the_cameras_not_seen_for_days(moved_service, server_clock, tmp_path):
    """Last seen (issue 42): a fleet of cameras on a quay; nine days later (the service's
    clock) some checked in (status, usage, re-activation) and some did not. The
    dashboard counts the silent ones not revoked, its link lists them with their last
    contact, and the fleet's own filter finds them, on a 1000 px window."""
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(name=NAME, kind="oem")
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=250)
    url = moved_service.url
    devices = [f"nl-ham-{n:03d}-axis-p3265-lve-b8a44f3c2d{n:02d}" for n in range(6)]
    units = {
        device: _post(f"{url}/v1/activate", {"batch_token": batch.license.token,
                                              "device_id": device, "sdk_version": "4.12.1"})
        for device in devices
    }  # fmt: skip
    activated = {a.device_id: a.last_seen_at for a in Activation.objects.all()}
    server_clock(9 * 86400)
    # Four cameras check in, each by another path; two stay silent, one of them revoked.
    for device in devices[:2]:
        _status_fetch(url, units[device]["license_id"], device)
    _post(f"{url}/v1/activate", {"batch_token": batch.license.token, "device_id": devices[2]})
    start = int(activated[devices[3]].timestamp())
    record = {"period_start": start, "period_end": start + 3600, "inferences": 48_211,
              "frames": 172_800, "stream_seconds": 3600, "events": 17}  # fmt: skip
    answer = _post(
        f"{url}/v1/usage",
        {"device_id": devices[3], "license_id": units[devices[3]]["license_id"],
         "records": [record]},
        token=units[devices[3]]["unit_token"],
    )  # fmt: skip
    assert answer["accepted"] == 1, answer
    license_revoke(license_id=units[devices[5]]["license_id"], reason="camera scrapped")
    seen = {a.device_id: a.last_seen_at for a in Activation.objects.all()}
    assert all(seen[d] > activated[d] for d in devices[:4]), seen
    assert all(seen[d] == activated[d] for d in devices[4:]), seen
    silent = devices[4]
    shown = dates.moment(seen[silent])

    with sync_playwright() as playwright:
        browser = _browser(playwright)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.set_default_timeout(15_000)
            _login(page, url)
            page.goto(f"{url}/admin/dashboard/")
            tile = page.inner_text("#silent-units")
            assert "Units not seen for more than 7 days" in tile
            assert tile.split()[-1] == "1", tile  # the revoked silent camera is not counted
            page.click("#silent-units a")
            page.wait_for_selector("#result_list")
            rows = page.inner_text("#result_list")
            assert silent in rows and all(d not in rows for d in devices[:4] + devices[5:]), rows
            cell = page.inner_text("#result_list tbody tr td.field-last_seen_at")
            assert " ".join(cell.split()) == shown, (cell, shown)
            assert page.evaluate(LAYOUT_PROBLEMS_JS) == []
            page.screenshot(path=str(_screenshot_dir(tmp_path, 1000) / "fleet-silent.png"))

            # The fleet's own filter: the silent cameras, revoked or not.
            page.goto(f"{url}/admin/licensing/activation/")
            assert page.locator("#result_list tbody tr").count() == 6
            page.click("#changelist-filter a:text-is('more than 7 days ago, or never')")
            page.wait_for_selector("#result_list")
            rows = page.inner_text("#result_list")
            assert silent in rows and devices[5] in rows and devices[0] not in rows, rows
            assert page.locator("#result_list tbody tr").count() == 2
            assert page.evaluate(LAYOUT_PROBLEMS_JS) == []
            # A checked-in camera's page shows its last contact to the minute.
            page.goto(f"{url}/admin/licensing/activation/")
            page.click(f"#result_list a:text('{devices[3]}')")
            recent = dates.moment(seen[devices[3]])
            assert recent in " ".join(page.inner_text("#content").split())
        finally:
            browser.close()
