"""The console's truth about bindings in Chromium (issue 45), with a realistic fleet over
a real gunicorn: strong units with a tick and their component count, weak ones with a red
cross and their source, every reported source in the filter (``explicit`` among them), a
repaired unit's components and rebinding history on its page, and a suspected clone
listed with its evidence and revoked as a copy."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth import get_user_model

from customers.services import customer_create
from licensing.models import CloneSuspicion
from licensing.services import batch_issue
from tests.operators.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    _browser_or_skip,
    _post,
)

pytestmark = [pytest.mark.live]


def digest(name: str, value: str) -> str:
    return hashlib.sha256(f"{name}\x00{value}".encode()).hexdigest()


def parts(n: int, **changed: str) -> dict[str, str]:
    raw = {
        "soc_serial": f"00000000{n:08x}",
        "emmc_cid": f"15010030313647333{n:015d}",
        "board_serial": f"BRD-2026-{n:06d}",
        "machine_id": f"{n:032x}",
        "mac": f"02:1a:2b:3c:{n // 256:02x}:{n % 256:02x}",
        **changed,
    }
    return {name: digest(name, value) for name, value in raw.items()}


def test_fleet_bindings_components_and_clones_in_chromium(live_service, transactional_db):
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    customer = customer_create(
        name="Nordlicht Videoanalyse und Sicherheitstechnik GmbH & Co. KG",
        kind="oem",
        id="NORDLICHT",
    )
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=40)
    url, key = live_service.url, batch.license.token

    def activate(device_id: str, source: str, weak: bool, components=None) -> dict:
        body = {"batch_token": key, "device_id": device_id, "fingerprint_source": source}
        body["weak_binding"] = weak
        if components is not None:
            body["components"] = components
        return _post(f"{url}/v1/activate", body)

    for n in range(1, 13):  # strong: devicetree serials with their components
        activate(f"soc-00000000{n:08x}", "devicetree", False, parts(n))
    for n in range(13, 17):  # weak: MAC-derived ids
        activate(f"02:1a:2b:3c:00:{n:02x}", "mac", True, parts(n))
    activate("CAM-LOBBY-NORTH-ENTRANCE-0001", "explicit", False)  # old firmware
    # A repair: unit 1's eMMC swapped, then a copy of unit 2's state on other hardware.
    repaired = activate("soc-0000000000000001", "devicetree", False, parts(1, emmc_cid="NEW"))
    activate("soc-0000000000000002", "devicetree", False, parts(99))
    suspicion = CloneSuspicion.objects.get()
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(15_000)
            page.goto(f"{url}/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#svc-console-links")

            page.goto(f"{url}/admin/licensing/activation/")
            rows = page.locator("#result_list tbody tr")
            assert rows.count() == 17
            cells = {}
            for i in range(rows.count()):
                row = rows.nth(i)
                cells[row.locator("td.field-device_id, th.field-device_id").inner_text()] = (
                    row.locator("td.field-binding").inner_text()
                )
            assert cells["soc-0000000000000005"] == "✓ hardware-bound (5 components)"
            assert cells["02:1a:2b:3c:00:0d"] == "✗ weak: mac"
            assert cells["CAM-LOBBY-NORTH-ENTRANCE-0001"] == "✓ hardware-bound"
            weak_cell = page.locator("td.field-binding .svc-red").first
            assert weak_cell.inner_text().startswith("✗ weak")
            assert (
                page.locator(
                    "#result_list img[src*='icon-yes'], #result_list img[src*='icon-no']"
                ).count()
                == 0
            )
            hrefs = page.eval_on_selector_all(
                "#changelist-filter a", "links => links.map(a => a.getAttribute('href'))"
            )
            for source in ("env", "devicetree", "dmi", "machine-id", "macos", "mac", "explicit"):
                assert f"?fingerprint_source={source}" in hrefs, (source, hrefs)
            with page.expect_navigation():
                page.click("#changelist-filter a[href='?fingerprint_source=explicit']")
            assert page.locator("#result_list tbody tr").count() == 1
            assert "CAM-LOBBY-NORTH-ENTRANCE-0001" in page.inner_text("#result_list")

            # The repaired unit's page: its hashed components and its rebinding.
            page.goto(f"{url}/admin/licensing/activation/?q=soc-0000000000000001")
            with page.expect_navigation():
                page.click("#result_list a:text('soc-0000000000000001')")
            text = page.inner_text("#content-main")
            assert "emmc_cid " + digest("emmc_cid", "NEW")[:16] in text
            assert "mac " in text and "(weak)" in text
            assert "emmc_cid (device soc-0000000000000001 → soc-0000000000000001)" in text
            assert repaired["license_id"] in text
            page.screenshot(path=str(ARTIFACTS / "console-unit-identity.png"), full_page=True)

            # The clone: listed with its evidence beside the original, revoked as a copy.
            page.goto(f"{url}/admin/licensing/clonesuspicion/")
            listing = page.inner_text("#result_list")
            assert "soc-0000000000000002" in listing and "suspected" in listing
            assert "changed board_serial, emmc_cid, mac, machine_id, soc_serial" in listing
            page.check(f"input.action-select[value='{suspicion.pk}']")
            page.select_option("select[name=action]", "revoke_copies")
            with page.expect_navigation():
                page.click("button[name=index]")
            assert "Revoked 1 copy" in page.inner_text(".messagelist")
            assert "revoked" in page.inner_text("#result_list")
            page.screenshot(path=str(ARTIFACTS / "console-clones.png"), full_page=True)
        finally:
            browser.close()
    suspicion.refresh_from_db()
    assert suspicion.copy_revoked_at is not None
