"""Payments in a real browser (issue 43): Debian's Chromium through Playwright against a
live gunicorn. Finance records a payment on an invoice's page (confirmed first) and
uploads a bank statement (checked, then imported); the customer's portal then reads both
invoices paid, with a balance of 0.00 EUR and no due date, and a credited one void."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from customers.services import customer_create
from tests.billing.payment_support import credit_note, invoice
from tests.billing.test_camt053 import v08
from tests.operators.test_browser import CHROMIUM, CHROMIUM_ARGS, PASSWORD, _browser_or_skip
from tests.operators.test_console_layout import _screenshot_dir
from tests.portal.conftest import PASSWORD as ACCOUNT_PASSWORD
from tests.portal.conftest import account_for

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def _database_beside_the_browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _row(page, number: str) -> str:
    return page.locator("#invoices tr", has_text=number).inner_text()


def test_payment_by_hand_and_by_statement_read_paid_in_the_portal(
    live_service, transactional_db, tmp_path
):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(
        name="Nordlicht Sicherheitstechnik und Videoanalyse GmbH & Co. KG", kind="oem",
        billing_address="Hafenstraße 1\n20457 Hamburg",
    )  # fmt: skip
    by_hand = invoice(customer, "1190.00", tax="190.00")
    by_bank = invoice(customer, "238.00", tax="38.00")
    credited = invoice(customer, "59.50", tax="9.50")
    credit_note(credited)
    statement = tmp_path / "statement.xml"
    statement.write_bytes(v08("238.00", f"Rechnung {by_bank.number}"))
    email = "ap@nordlicht.example.com"
    account_for(customer, email)
    url = live_service.url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{url}/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.goto(f"{url}/admin/documents/{by_hand.number}/")
            assert page.text_content("#invoice-state") == "open"
            page.click("#document-payment")
            page.fill("#id_amount", "1190.00")
            page.fill("#id_reference", "SEPA NORDLICHT 2026-11")
            page.click("input[type=submit]")
            assert "goes from 1,190.00 EUR (open) to 0.00 EUR" in page.inner_text("#content")
            page.click("input[type=submit]")
            assert "recorded against" in page.inner_text("ul.messagelist")
            assert page.text_content("#invoice-state") == "paid"
            assert "SEPA NORDLICHT 2026-11" in page.text_content("#payments")

            page.goto(f"{url}/admin/payments/statement/")
            page.set_input_files("#id_file", str(statement))
            page.click("#check-statement")
            report = page.text_content("#statement-report")
            assert "What importing would do: 1 matched" in report and by_bank.number in report
            page.click("#confirm-import")
            assert "Imported: 1 matched" in page.text_content("#statement-report")

            portal = browser.new_page(viewport={"width": 1280, "height": 900})
            portal.set_default_timeout(15_000)
            portal.goto(f"{url}/portal/login/")
            portal.fill("#id_username", email)
            portal.fill("#id_password", ACCOUNT_PASSWORD)
            portal.click("input[type=submit], #login-submit")
            portal.goto(f"{url}/portal/invoices/")
            for number in (by_hand.number, by_bank.number):
                row = _row(portal, number)
                assert "paid" in row and "0.00 EUR" in row, row
                assert "partly" not in row
            portal.screenshot(
                path=str(_screenshot_dir(tmp_path, 1280) / "portal-invoices-paid.png"),
                full_page=True,
            )
            void = _row(portal, credited.number)
            assert "void (credited)" in void and "2026-" not in void.split("void")[0][-12:]
            portal.click(f"a:text('{by_bank.number}')")
            assert "paid" in portal.inner_text("#standing")
        finally:
            browser.close()
