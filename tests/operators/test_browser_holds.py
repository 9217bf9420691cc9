"""Suspend, reinstate and the check-in lease in a real browser (issue 42): Debian's
Chromium through Playwright against a live gunicorn, with realistic data.

The operator issues a batch with a seven-day lease from the console (the confirmation
first), a camera activates and the fleet shows its lease end; the operator suspends the
batch (a confirmation naming it, a reason), the fleet and the batch page say suspended,
and the customer's portal fleet says the same; the batch is reinstated, then the whole
customer is suspended and reinstated from the customers list."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEntry
from customers.services import customer_create
from licensing.models import Batch, Suspension
from tests.operators.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    _browser_or_skip,
    _camera,
)
from tests.portal.conftest import PASSWORD as CUSTOMER_PASSWORD
from tests.portal.conftest import account_for

pytestmark = pytest.mark.live

NAME = "Nordlicht Sicherheitstechnik und Videoanalyse GmbH & Co. KG"
DEVICE = "nl-ham-007-axis-p3265-lve-b8a44f3c2d19"
EMAIL = "ana.ruiz@nordlicht-videoanalyse.example"


@pytest.fixture(autouse=True)
def _database_beside_the_browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _act(page, url: str, listing: str, action: str) -> None:
    page.goto(f"{url}/admin/{listing}/")
    page.check("#result_list input.action-select")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def test_operator_suspends_and_reinstates_a_batch_and_a_customer_and_both_sides_see_it(
    live_service, transactional_db
):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(name=NAME, kind="oem")
    account_for(customer, EMAIL)
    url = live_service.url

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{url}/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#svc-console-links")

            # A 250-unit batch with a seven-day check-in lease, confirmed first.
            page.goto(f"{url}/admin/licensing/batch/add/?customer={customer.pk}")
            page.select_option("#id_sku", "VISION-PRO")
            page.fill("#id_units", "250")
            page.fill("#id_max_offline_days", "7")
            page.click("input[name=_submit]")
            amount = page.inner_text("#confirm-amount")
            page.click(f"input[value='Yes, issue the batch ({amount})']")
            page.wait_for_selector("#batch-key")
            batch = Batch.objects.get()
            assert batch.max_offline_days == 7
            _camera(url, page.input_value("#batch-key"), DEVICE, weak=False, inferences=100)

            # The fleet shows the unit's lease end.
            page.goto(f"{url}/admin/licensing/activation/")
            row = page.inner_text("#result_list tbody tr")
            assert DEVICE in row and re.search(
                r"lease to \d{1,2} [A-Z][a-z]+ \d{4}, \d\d:\d\d UTC", row
            )

            # Suspend the batch: the confirmation names it, a reason is required.
            _act(page, url, "licensing/batch", "suspend_batches")
            assert batch.pk in page.inner_text("#hold-rows")
            assert "refuses analytics" in page.inner_text("#content-main")
            page.click("input.svc-danger[value='Suspend 1 batch']")
            assert not Suspension.objects.exists()  # no reason: nothing done
            page.fill("#id_reason", "invoice 2026-0042 unpaid for 60 days")
            page.click("input.svc-danger[value='Suspend 1 batch']")
            message = page.inner_text(".messagelist")
            assert "Suspended 1 batch; their cameras refuse analytics" in message
            page.goto(f"{url}/admin/licensing/activation/")
            assert "suspended" in page.inner_text("#result_list tbody tr .svc-state")
            page.goto(f"{url}/admin/licensing/batch/{batch.pk}/change/")
            assert "invoice 2026-0042 unpaid for 60 days" in page.inner_text("#content")

            # The customer sees it in the portal's fleet, with the lease end.
            person = browser.new_context(viewport={"width": 1000, "height": 900})
            portal = person.new_page()
            portal.set_default_timeout(15_000)
            portal.goto(f"{url}/portal/login/")
            portal.fill("#id_username", EMAIL)
            portal.fill("#id_password", CUSTOMER_PASSWORD)
            portal.click("#login-submit")
            portal.wait_for_selector("#portal-nav")
            portal.goto(f"{url}/portal/fleet/")
            units = portal.inner_text("#units")
            assert DEVICE in units and "suspended" in units and "lease to" in units

            # Reinstate the batch: the confirmation says it is suspended now.
            _act(page, url, "licensing/batch", "reinstate_batches")
            assert "suspended" in page.inner_text("#hold-rows")
            page.click("input[type=submit].default")
            assert "Reinstated 1 batch" in page.inner_text(".messagelist")
            portal.reload()
            assert "suspended" not in portal.inner_text("#units")

            # The whole customer, from the customers list, and back.
            _act(page, url, "customers/customer", "suspend_customers")
            page.fill("#id_reason", "contract disputed by the customer's legal team")
            page.click("input.svc-danger[value='Suspend 1 customer']")
            assert "Suspended 1 customer" in page.inner_text(".messagelist")
            portal.reload()
            assert "suspended" in portal.inner_text("#units")
            _act(page, url, "customers/customer", "reinstate_customers")
            page.click("input[type=submit].default")
            assert "Reinstated 1 customer" in page.inner_text(".messagelist")
            portal.reload()
            assert "active" in portal.inner_text("#units")
        finally:
            browser.close()

    assert not Suspension.objects.exists()
    actions = list(AuditEntry.objects.values_list("action", flat=True))
    assert actions.count("license.suspend") == 2 and actions.count("license.reinstate") == 2
