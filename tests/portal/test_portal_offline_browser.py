"""Air-gapped cameras in the portal, in a real browser (issue 44): Debian's Chromium
through Playwright against a live gunicorn whose clock follows the camera's. The
customer's user uploads the camera's activation request on the *Air-gapped cameras*
page and downloads the answer; the camera installs it, counts, and exports its usage;
the user uploads that and downloads the receipt, which empties the camera's spool. The
page lists the unit with the date of its last exchange; the invoice preview bills the
seat and the usage (the catalogue's prices); the same usage file again stores nothing,
and a damaged one is refused on the page with its code."""

from __future__ import annotations

from pathlib import Path

import pytest

import devices
from billing.models import UsageRecord
from customers.services import customer_create
from licensing.models import Batch, OfflineExchange
from licensing.services import batch_issue
from svccore import dates
from tests.operators.test_browser import CHROMIUM, CHROMIUM_ARGS, _browser_or_skip
from tests.operators.test_console_layout import LAYOUT_PROBLEMS_JS
from tests.portal.conftest import PASSWORD, account_for
from tests.test_end_to_end import HOUR, T0, SharedClock

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DEVICE = "hafen-nord-ptz-07-axis-q6135-le-b8a44f3c2d91"


@pytest.fixture(autouse=True)
def _database_beside_the_browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def test_the_customer_runs_the_air_gapped_round_trip_in_the_portal(
    moved_service, server_clock, signing_key, tmp_path
):
    sync_playwright = _browser_or_skip()
    url = moved_service.url
    clock = SharedClock(T0 + 10, server_clock)
    customer = customer_create(name="Justizvollzugsanstalt Nordhafen Videotechnik", kind="oem")
    account = account_for(customer, "technik@jva-nordhafen.example")
    batch = batch_issue(customer_id=customer.pk, sku="VISION-PRO", units=2)
    public_key = devices.token.public_key_b64url(signing_key.public_key())
    state = tmp_path / "camera"
    camera = {"public_key": public_key, "device_id": DEVICE, "clock": clock}
    carried = tmp_path / "usb"
    carried.mkdir()
    request = carried / "request.svcreq"
    request.write_text(
        devices.offline_request(batch.license.token, state, device_id=DEVICE, clock=clock)
    )

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

            def log_in() -> None:
                page.goto(f"{url}/portal/login/")
                page.fill("#id_username", account.user.username)
                page.fill("#id_password", PASSWORD)
                page.click("#login-submit")
                page.wait_for_selector("#portal-nav")

            def answer(path: Path) -> Path:
                page.click("#portal-nav a:text('Air-gapped cameras')")
                page.set_input_files("#id_file", str(path))
                with page.expect_download() as download:
                    page.click("#offline-submit")
                saved = carried / download.value.suggested_filename
                download.value.save_as(saved)
                return saved

            log_in()
            page.click("#portal-nav a:text('Air-gapped cameras')")
            assert "No camera has exchanged files yet" in page.inner_text("#offline-units")
            response = answer(request)
            assert response.name == f"{DEVICE}.svcresp"
            assert Batch.objects.get(pk=batch.pk).units_activated == 1
            assert devices.offline_install(response.read_text(), state, **camera)["kind"] == (
                "activation"
            )

            with devices.Engine(state, **camera) as engine:
                assert engine.start() == "active"
                engine.require("detect")
                engine.count(inferences=250_000)
                clock.now = T0 + HOUR + 50
                engine.count(inferences=1)  # the first hour closes
                usage = carried / "usage.svcuse"
                usage.write_text(engine.usage_export())

            log_in()  # an hour on: the session ended
            receipt = answer(usage)
            assert receipt.name == f"{DEVICE}.svcrcpt"
            summary = devices.offline_install(receipt.read_text(), state, **camera)
            assert (summary["removed"], summary["pending"]) == (1, 0)
            assert UsageRecord.objects.get().inferences == 250_000

            # The page lists the unit with the date of its last exchange.
            page.click("#portal-nav a:text('Air-gapped cameras')")
            listed = page.inner_text("#offline-units")
            day = dates.day(T0 + HOUR)
            assert DEVICE in listed and day in listed
            # It fits 1000 px with a real device id, as every portal page does.
            assert page.evaluate(LAYOUT_PROBLEMS_JS) == []

            # The same file again stores nothing; a damaged one is refused with its code.
            again = answer(usage)
            with pytest.raises(devices.LicenseError) as replayed:
                devices.offline_install(again.read_text(), state, **camera)
            assert replayed.value.code == "RECEIPT_INVALID"
            assert UsageRecord.objects.count() == 1
            damaged = carried / "damaged.svcuse"
            damaged.write_text(usage.read_text()[:-40])
            page.click("#portal-nav a:text('Air-gapped cameras')")
            page.set_input_files("#id_file", str(damaged))
            page.click("#offline-submit")
            assert "BAD_REQUEST" in page.inner_text("#offline-refused")
            assert OfflineExchange.objects.count() == 2
        finally:
            browser.close()

    # The invoice: the seat at 240 and 50,000 inferences over the unit's 200,000 at 0.40
    # per 1,000, as for any camera.
    invoice = moved_service.admin("GET", f"/v1/admin/invoice/{customer.pk}?period_days=30")
    amounts = {line["kind"]: line["amount"] for line in invoice["lines"]}
    assert amounts["unit_activation"] == 240
    assert invoice["total"] == 260
