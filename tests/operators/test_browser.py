"""A real browser through the operator console: log in, issue a batch, revoke a licence,
open the dashboard, and save a screenshot (tests/artifacts/, git-ignored).

Debian's Chromium (/usr/bin/chromium) driven by Playwright; .ci/run installs it, so in CI
(environment variable CI set) a missing browser is a failure, never a silent skip.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEntry
from customers.services import customer_create
from licensing.models import Batch, License
from licensing.services import license_issue
from tests.conftest import tool_missing

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct horse battery staple"


def _browser_or_skip():
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} is absent (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the playwright package is not installed")
        sync_playwright = None
    if missing:
        tool_missing("browser test: " + "; ".join(missing))
    return sync_playwright


def _post(url: str, body: dict, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _camera(url: str, batch_key: str, device_id: str, *, weak: bool, inferences: int) -> None:
    """A camera activates from the batch key and uploads an hour of usage."""
    body = {"batch_token": batch_key, "device_id": device_id}
    if weak:
        body |= {"fingerprint_source": "mac", "weak_binding": True}
    unit = _post(f"{url}/v1/activate", body)
    # The hour that ends now: it starts no earlier than an hour before the activation
    # (a record lies within its licence's life, contract §7).
    end = int(time.time())
    record = {
        "period_start": end - 3600,
        "period_end": end,
        "inferences": inferences,
        "frames": inferences // 2,
        "stream_seconds": 3600,
        "events": 3,
    }
    answer = _post(
        f"{url}/v1/usage",
        {"device_id": device_id, "license_id": unit["license_id"], "records": [record]},
        token=unit["unit_token"],
    )
    assert answer["accepted"] == 1, answer


@pytest.mark.live
def test_operator_console_in_a_real_browser(live_service, transactional_db):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(name="Acme Cameras", kind="oem", id="ACME")
    direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-lobby")
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "admin-dashboard.png"
    screenshot.unlink(missing_ok=True)
    url = live_service.url

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(15_000)

            page.goto(f"{url}/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#svc-console-links")

            # Sell a batch from the admin; the batch key is there to copy.
            page.goto(f"{url}/admin/licensing/batch/add/?customer={customer.id}")
            page.select_option("#id_sku", "VISION-PRO")
            page.fill("#id_units", "10")
            page.click("input[name=_submit]")  # Check the order…
            assert "2,400.00 EUR" in page.inner_text("#confirmation")
            page.click("input[name=_submit]")  # Yes, issue the batch (2,400.00 EUR)
            page.wait_for_selector("#batch-key")
            assert "issued" in page.inner_text(".messagelist")
            batch_key = page.input_value("#batch-key")
            assert batch_key.startswith("SVC1.")

            # Cameras activate (9 of 10, two weakly bound) and report usage: the batch nears
            # exhaustion.
            for n in range(9):
                _camera(url, batch_key, f"cam-{n:02d}", weak=n < 2, inferences=1000 * (n + 1))
            page.goto(f"{url}/admin/licensing/batch/")
            assert page.locator(".svc-progress.near-exhaustion").count() == 1

            # Revoke the direct licence with a reason, as an admin action.
            page.goto(f"{url}/admin/licensing/license/?kind__exact=direct")
            page.check(f"input.action-select[value='{direct.id}']")
            page.select_option("select[name=action]", "revoke_licenses")
            page.click("button[name=index]")
            page.fill("#id_reason", "camera stolen from the lobby")
            page.click("input.svc-danger[value='Revoke 1 licence']")
            assert "Revoked 1 licence;" in page.inner_text(".messagelist")

            # The dashboard, linked from the admin index.
            page.goto(f"{url}/admin/")
            page.click("#svc-console-links a:text('Dashboard')")
            page.wait_for_selector("svg.svc-chart")
            assert page.locator("svg.svc-chart").count() == 3
            assert "cam-00" in page.inner_text("#weak-binding")
            assert "Acme Cameras" in page.inner_text("#chart-top-customers")
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()

    assert screenshot.stat().st_size > 10_000
    direct.refresh_from_db()
    assert direct.revoke_reason == "camera stolen from the lobby"
    batch = Batch.objects.get(customer=customer)
    assert batch.units_activated == 9
    by_staff = AuditEntry.objects.filter(actor="operator", actor_kind="superuser", ip="127.0.0.1")
    assert set(by_staff.values_list("action", flat=True)) == {"batch.issue", "license.revoke"}
    assert License.objects.filter(kind="unit", customer=customer).count() == 9
