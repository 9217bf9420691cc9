"""Add-ons in a real browser (issue 42 item 4): Debian's Chromium through Playwright
against a live gunicorn, with realistic data (a long customer name, long device ids, a
250-unit batch, cameras talking HTTP to the service).

Finance re-prices the anpr add-on on the VISION-PRO catalogue page; the operator adds it
to a batch from the batches list (the confirmation names the batch, what it carries and
what a camera receiving it today is billed), the batch page says none of the three units
carries it yet, one camera syncs and the page says one does; the customer's portal shows
the add-on on the batches list and the batch page, with the units still to receive it;
the invoice preview has the add-on line; the operator adds an add-on to a direct
licence from the licences list, removes it (a reason), and removes the batch's."""

from __future__ import annotations

import json
import re
import urllib.request
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEntry
from customers.services import customer_create
from devices.token import decode_unverified
from licensing.models import AddOn, AddOnGrant, License
from licensing.services import batch_issue, license_issue
from tests.operators.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    _browser_or_skip,
    _post,
)
from tests.portal.conftest import PASSWORD as CUSTOMER_PASSWORD
from tests.portal.conftest import account_for

pytestmark = pytest.mark.live

NAME = "Hafenlogistik Bremerhaven Kennzeichenerfassung und Torsteuerung GmbH"
DEVICES = [
    "hb-gate-north-01-axis-q1800-le-3f2a91c4d7e0",
    "hb-gate-north-02-axis-q1800-le-3f2a91c4d7e1",
    "hb-gate-south-01-hikvision-ds-2cd7a26-9b0e55a1",
]
EMAIL = "torsteuerung@hafenlogistik-bremerhaven.example"


@pytest.fixture(autouse=True)
def _database_beside_the_browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _act(page, url: str, listing: str, action: str, query: str = "") -> None:
    page.goto(f"{url}/admin/{listing}/{query}")
    page.check("#result_list input.action-select")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def _sync(url: str, token: str, device_id: str) -> str:
    """The camera's licence fetch (``GET /v1/license``, as ``Engine.sync`` asks it)."""
    request = urllib.request.Request(
        f"{url}/v1/license?device_id={device_id}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the test's server
        return json.loads(response.read())["token"]


def test_operator_adds_and_removes_add_ons_and_the_customer_sees_them(
    live_service, transactional_db
):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(name=NAME, kind="oem")
    account_for(customer, EMAIL)
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=250)
    url = live_service.url
    units = [
        _post(f"{url}/v1/activate", {"batch_token": batch.license.token, "device_id": device})
        for device in DEVICES
    ]
    direct = license_issue(
        customer_id=customer.pk, sku="DETECT-STD", device_id="hb-office-lobby-bosch-flexidome-7100i"
    )

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
            page.wait_for_selector("#svc-console-links")

            # Finance re-prices anpr on its SKU's page.
            page.goto(f"{url}/admin/licensing/sku/VISION-PRO/change/")
            row = page.locator("tr.form-row", has=page.locator("input[value='anpr']"))
            row.locator("input[name$='-unit_price']").fill("64.50")
            page.click("input[name=_save]")
            assert "was changed successfully" in page.inner_text(".messagelist")
            assert AddOn.objects.get(sku_id="VISION-PRO", code="anpr").unit_price == Decimal(
                "64.50"
            )

            # Add anpr to the batch: the confirmation names it and the bill.
            _act(page, url, "licensing/batch", "add_addon_batches")
            rows = page.inner_text("#addon-rows")
            assert batch.pk in rows and "no add-on" in rows and NAME in rows
            assert re.search(
                r"anpr: 64\.50 EUR x \d+/365 days = [\d.]+ EUR per unit receiving it today", rows
            ), rows
            page.select_option("#id_addon", "anpr")
            page.click("input[value='Add the add-on to 1 batch']")
            message = page.inner_text(".messagelist")
            assert "Added anpr to 1 batch; each camera receives it at its next sync" in message
            grant = AddOnGrant.objects.get(batch=batch)
            assert grant.unit_price == Decimal("64.50")

            page.goto(f"{url}/admin/licensing/batch/{batch.pk}/change/")
            assert "0 of 3 activated units carry them now" in page.inner_text("#addon-delivery")
            renewed = _sync(url, units[0]["unit_token"], DEVICES[0])
            assert decode_unverified(renewed)["ent"]["anpr"] is True
            page.reload()
            assert "1 of 3 activated units carry them now" in page.inner_text("#addon-delivery")
            assert "anpr" in page.inner_text(".svc-addons")

            # The customer sees the add-on and which cameras still wait for it.
            person = browser.new_context(viewport={"width": 1280, "height": 900})
            portal = person.new_page()
            portal.set_default_timeout(15_000)
            portal.goto(f"{url}/portal/login/")
            portal.fill("#id_username", EMAIL)
            portal.fill("#id_password", CUSTOMER_PASSWORD)
            portal.click("#login-submit")
            portal.wait_for_selector("#portal-nav")
            portal.goto(f"{url}/portal/batches/")
            assert "+ anpr" in portal.inner_text("#batches")
            portal.goto(f"{url}/portal/batches/{batch.pk}/")
            said = portal.inner_text("#batch-addons")
            assert "anpr (Number-plate recognition: anpr) since" in said
            assert "2 units below receive the change at their next sync" in said
            table = portal.inner_text("#units")
            assert table.count("add-ons at next sync") == 2

            # The invoice preview bills the camera that carries it, pro rata.
            page.goto(f"{url}/admin/invoice-preview/?customer={customer.pk}&period_days=30")
            preview = page.inner_text("#content")
            assert f"VISION-PRO add-on Number-plate recognition (anpr) on batch {batch.pk}" in (
                preview
            )
            assert "1 unit, " in preview and "days of 365-day terms" in preview

            # A direct licence: add four more streams, then take them away with a reason.
            _act(page, url, "licensing/license", "add_addon_licenses", f"?q={direct.pk}")
            assert "streams-4: 25.00 EUR x" in page.inner_text("#addon-rows")
            page.select_option("#id_addon", "streams-4")
            page.click("input[value='Add the add-on to 1 licence']")
            assert "Added streams-4 to 1 licence" in page.inner_text(".messagelist")
            lic = License.objects.get(pk=direct.pk)
            assert lic.claims["lim"]["max_streams"] == 8
            _act(page, url, "licensing/license", "remove_addon_licenses", f"?q={direct.pk}")
            assert "streams-4" in page.inner_text("#addon-rows")
            page.fill("#id_reason", "the lobby camera went back to four streams")
            page.click("input.svc-danger[value='Remove the add-on from 1 licence']")
            assert "Removed streams-4 from 1 licence" in page.inner_text(".messagelist")
            lic.refresh_from_db()
            assert lic.claims["lim"]["max_streams"] == 4

            # And the batch's, from the batches list.
            _act(page, url, "licensing/batch", "remove_addon_batches")
            assert "Nothing is billed back" in page.inner_text("#content-main")
            page.click("input.svc-danger[value='Remove the add-on from 1 batch']")
            assert "Removed anpr from 1 batch" in page.inner_text(".messagelist")
            portal.reload()
            assert "Add-ons: none" in portal.inner_text("#batch-addons")
        finally:
            browser.close()

    actions = list(AuditEntry.objects.values_list("action", flat=True))
    assert actions.count("license.addon_add") == 2 and actions.count("license.addon_remove") == 2
