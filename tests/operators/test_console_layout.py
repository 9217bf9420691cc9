"""The operator console as an operator sees it: a real browser (Debian's /usr/bin/chromium
through Playwright, 1280 and 1000 px wide) on a live server with realistic data, one
full-page screenshot per page, and the layout checked in the page itself.

Screenshots go to ``SVC_SCREENSHOT_DIR`` when it is set (to keep them), else to a pytest
temporary directory, one folder per width (``1000px/dashboard.png``); their paths are
printed. A missing browser skips the test, except
in CI (environment variable CI set), where it is a failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import sync_playwright

from audit.context import Actor, acting_as
from billing.credit_notes import credit_note_issue
from billing.limits import start_of_day
from billing.services import invoice_issue
from config.errors import ServiceError
from customers.services import customer_create
from events.models import DeliveryAttempt, Event, Webhook
from licensing.models import Activation, License
from licensing.services import (
    addon_add,
    batch_issue,
    license_issue,
    license_register,
    license_revoke,
    trial_convert,
)
from licensing.services.seats import seat_release
from tests.conftest import tool_missing
from tests.history import rewritten
from tests.operators.test_browser import CHROMIUM, CHROMIUM_ARGS, PASSWORD, _camera

# A laptop's full screen, and a window beside another one (or a smaller laptop).
WIDTHS = (1280, 1000)
HEIGHT = 900
# A guard against a walk that never ends, not a speed target (quiet: under a minute per
# width; the slow tests share the cores).
BUDGET_SECONDS = 900
PAGE_TIMEOUT_MS = 10_000

# Run in the page after it has loaded: every way text can be cut off, squeezed or pushed
# out of view, as a list of "what: <element> "text"" strings (empty when the page is fine).
LAYOUT_PROBLEMS_JS = r"""
() => {
  const problems = [];
  const squash = (text) => (text || "").replace(/\s+/g, " ").trim();
  const describe = (el) => {
    let name = el.tagName.toLowerCase();
    if (el.id) name += "#" + el.id;
    const cls = typeof el.className === "string" ? el.className.trim() : "";
    if (cls) name += "." + cls.split(/\s+/).join(".");
    return `<${name}> "${squash(el.innerText || el.textContent).slice(0, 60)}"`;
  };
  const hidden = (el) =>
    el.closest(".visually-hidden, .hidden, [hidden], [aria-hidden=true], template") !== null;
  const shown = (el) => {
    const style = getComputedStyle(el);
    if (style.display === "none" || style.visibility === "hidden") return false;
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.height > 0;
  };
  // Code and token boxes scroll on purpose.
  const preformatted = (el) => el.closest("pre, textarea, code") !== null;

  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth) {
    problems.push(
      `page scrolls sideways: ${doc.scrollWidth}px of content in a ${window.innerWidth}px window`
    );
  }

  // Text wider than the box that holds it (cut off, or spilling over its neighbours).
  const boxes = "a, th, td, label, h1, h2, h3, caption, button, li, p, dt, dd, legend, " +
    "div.readonly, div.help, .svc-card";
  for (const el of document.querySelectorAll(boxes)) {
    if (hidden(el) || preformatted(el) || !shown(el) || !squash(el.innerText)) continue;
    const style = getComputedStyle(el);
    if (style.display.startsWith("inline") && style.display !== "inline-block") continue;
    if (el.scrollWidth > el.clientWidth + 1) {
      problems.push(`text wider than its box (${el.scrollWidth}px in ${el.clientWidth}px): ` +
        describe(el));
    }
  }

  // Boxes that cut their content off or make it scroll sideways.
  for (const el of document.body.querySelectorAll("*")) {
    if (hidden(el) || preformatted(el) || !shown(el)) continue;
    const overflow = getComputedStyle(el).overflowX;
    if (overflow === "visible" || overflow === "clip" && el.tagName === "svg") continue;
    if (el.scrollWidth > el.clientWidth + 1) {
      problems.push(`content cut off or scrolling sideways (${el.scrollWidth}px in ` +
        `${el.clientWidth}px, overflow-x ${overflow}): ${describe(el)}`);
    }
  }

  // Words broken across lines (a column squeezed until its text stacks letter by
  // letter): a text node drawn on more lines than it has places to break.
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = squash(node.textContent);
    const parent = node.parentElement;
    if (!text || !parent || hidden(parent) || preformatted(parent) || !shown(parent)) continue;
    if (parent.closest("svg, script, style, select, option")) continue;
    range.selectNodeContents(node);
    const tops = new Set();
    for (const rect of range.getClientRects()) {
      if (rect.width > 0) tops.add(Math.round(rect.top));
    }
    const breaks = Math.max(1, text.split(/[\s\-\u2010-\u2014\/]+/).filter(Boolean).length);
    if (tops.size > breaks) {
      problems.push(`text broken inside a word (${tops.size} lines for ${breaks} words): ` +
        describe(parent));
    }
  }

  // Chart labels drawn outside their chart, where the SVG cuts them off.
  for (const label of document.querySelectorAll("svg text")) {
    const svg = label.ownerSVGElement;
    const view = svg.viewBox.baseVal;
    const box = label.getBBox();
    if (box.width === 0) continue;
    const right = view && view.width ? view.x + view.width : svg.width.baseVal.value;
    const left = view && view.width ? view.x : 0;
    if (box.x < left - 0.5 || box.x + box.width > right + 0.5) {
      const span = `x ${box.x.toFixed(0)} to ${(box.x + box.width).toFixed(0)}`;
      problems.push(`chart label cut off (${span}, chart ${left} to ${right}): ` +
        `"${squash(label.textContent)}"`);
    }
  }
  return problems;
}
"""

# Money with a currency code next to it must show the currency's two decimals.
MONEY = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?) (EUR|USD|GBP|CHF)\b")
# Unix seconds of 2001-2033 shown raw instead of as a date (JSON keeps them, each with
# its date after it).
# A moment as svccore.dates writes it: "28 November 2026, 23:19 UTC"; claims show their
# Unix seconds with it as a comment ("1795907954,  // 28 November 2026, 23:19 UTC").
_MOMENT = r"\d{1,2} [A-Z][a-z]+ 20\d\d, \d\d:\d\d UTC"
UNIX_SECONDS = re.compile(rf"(?<![\w.-])1[0-9]{{9}}(?![\w.])(?!,?\s*// {_MOMENT})")
DATE = re.compile(rf"\b{_MOMENT}\b")


def _screenshot_dir(tmp_path: Path, width: int) -> Path:
    chosen = os.environ.get("SVC_SCREENSHOT_DIR")
    directory = (Path(chosen) if chosen else tmp_path / "screenshots") / f"{width}px"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _chromium_or_skip() -> None:
    if not CHROMIUM.exists():
        tool_missing(f"browser test: {CHROMIUM} is absent (apt-get install chromium)")


def _ham(n: int) -> str:
    """A camera id as firmware reports one: model and serial number."""
    return f"nl-ham-{n:03d}-axis-p3265-lve-b8a44f3c2d{n:02d}"


def _seed(url: str) -> dict[str, str]:
    """Three customers, batches with activations and usage, a weakly bound camera whose
    licence was revoked, a released seat, direct licences, a trial batch with cameras on
    trial and a trial bought, an invoice and its credit note, and audit entries with long
    details."""
    # Generated ids (CUST- and 16 characters) and names as long as real companies'.
    nordlicht = customer_create(
        name="Nordlicht Sicherheitstechnik und Videoanalyse GmbH & Co. KG",
        kind="oem",
        contact="lizenzverwaltung@nordlicht-sicherheitstechnik.example",
        billing_address="Überseeallee 12, Haus B\n20457 Hamburg\nDeutschland",
        tax_id="DE298765432",
    )
    harbour = customer_create(
        name="Port of Rotterdam Harbour Authority, Maasvlakte Container Terminals",
        kind="end_user",
    )
    acme = customer_create(name="Acme Cameras International Ltd.", kind="oem")
    vision = batch_issue(customer_id=nordlicht.id, sku="VISION-PRO", units=10)
    detect = batch_issue(customer_id=nordlicht.id, sku="DETECT-STD", units=4)
    port = batch_issue(customer_id=harbour.id, sku="VISION-PRO", units=25, term_days=0)
    small = batch_issue(customer_id=acme.id, sku="DETECT-STD", units=7)
    for n in range(9):  # nine of ten: near exhaustion; two weakly bound
        _camera(url, vision.license.token, _ham(n), weak=n < 2, inferences=9000 * n)
    for n in range(3):  # heavy users: metered overage on the invoice
        _camera(url, detect.license.token, f"nl-brm-{n:03d}", weak=False, inferences=140_000)
    for n in range(4):
        _camera(url, port.license.token, f"rtm-quay-{n:02d}", weak=n == 0, inferences=25_000)
    _camera(url, small.license.token, "acme-demo-1", weak=False, inferences=800)
    # Trials (issue 42): Nordlicht evaluates Vision Pro on three cameras of a new site;
    # Acme trialled Detect on its yard camera and bought it.
    trial = batch_issue(customer_id=nordlicht.id, sku="VISION-PRO", units=12, trial_days=30)
    for n in range(3):
        _camera(url, trial.license.token, f"nl-kiel-pier-{n:02d}-5e2a", weak=False,
                inferences=1_200 * n)  # fmt: skip
    bought = batch_issue(customer_id=acme.id, sku="DETECT-STD", units=5, trial_days=14)
    _camera(url, bought.license.token, "acme-yard-0007", weak=False, inferences=300)
    trial_convert(batch_id=bought.id)
    revoked = Activation.objects.get(device_id=_ham(1))
    license_revoke(license_id=revoked.license_id, reason="MAC address cloned on a second camera")
    license_revoke(license_id=small.license_id, reason="order cancelled by the customer")
    direct = license_issue(
        customer_id=nordlicht.id, sku="DETECT-STD", device_id="nl-ham-lobby-entrance"
    )
    seat_release(license_id=Activation.objects.get(device_id="rtm-quay-03").license_id,
                 reason="camera died: water in the housing")  # fmt: skip
    # Add-ons (issue 42): number-plate recognition on the Hamburg batch (its cameras have
    # not synced since: pending), four more streams on the lobby camera's licence.
    addon_add(addon="anpr", batch_id=vision.id)
    addon_add(addon="streams-4", license_id=direct.id)
    # Acme's gate camera licensed ten days ago: an issued invoice, then its credit note.
    gate = license_issue(customer_id=acme.id, sku="API-METERED", device_id="acme-gate-0001")
    with rewritten():
        License.objects.filter(pk=gate.pk).update(issued_at=start_of_day() - dt.timedelta(days=10))
    invoice = invoice_issue(customer_id=acme.id, period_days=30, end=start_of_day())
    note = credit_note_issue(number=invoice.number, reason="sent to the wrong billing address")
    # Refused actions land in the audit log too, with all their arguments.
    for attempt in (
        lambda: batch_issue(customer_id="CUST-NOBODY", sku="VISION-PRO", units=5),
        lambda: license_register(token="SVC1." + "eyJhbGciOiJFZERTQSJ9" * 30),
        lambda: invoice_issue(customer_id=nordlicht.id, period_days=30),
    ):
        with contextlib.suppress(ServiceError):
            attempt()
    # A customer's webhook endpoint (made as the service would, without resolving its
    # example name) that failed twice on an event, then took it.
    hook = Webhook.objects.create(
        id="wh_7Q2M9XK4PD3TR8VB1ZNC",
        url="https://hooks.nordlicht-sicherheitstechnik.example/licensing/v2/events?tenant=hamburg-nord",
        events=["license.activated", "license.revoked", "batch.threshold", "seat.released"],
        customer_id=nordlicht.id,
        secret="whsec_" + "A" * 44,
    )
    revoked_event = Event.objects.filter(type="license.revoked").order_by("id").first()
    for attempt, (ok, status, excerpt) in enumerate(
        [(False, 503, "upstream connect error or disconnect/reset before headers. reset reason: "
          "connection termination"), (False, None, ""), (True, 204, "")], start=1
    ):  # fmt: skip
        DeliveryAttempt.objects.create(
            webhook=hook, event=revoked_event, attempt=attempt, ok=ok, status_code=status,
            latency_ms=[10_012, 3, 87][attempt - 1], response_excerpt=excerpt,
            error="" if status else "ConnectionRefusedError: [Errno 111] Connection refused",
        )  # fmt: skip
    return {
        "webhook": hook.pk,
        "customer": nordlicht.id,
        "batch": vision.id,
        "trial_batch": trial.id,
        "revoked_licence": revoked.license_id,
        "direct_licence": direct.id,
        "invoice": str(invoice.pk),
        "credit_note": note.number,
    }


@pytest.mark.live
@pytest.mark.parametrize("width", WIDTHS)
def test_console_pages_fit_the_window(width, live_service, transactional_db, tmp_path, capsys):
    _chromium_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    url = live_service.url
    with acting_as(Actor(name="jdoe", kind="cli")):
        seeded = _seed(url)
    shots = _screenshot_dir(tmp_path, width)
    pages = [
        ("admin-index", "/admin/", "#svc-console-links"),
        ("dashboard", "/admin/dashboard/", "#weak-binding"),
        ("batch-list", "/admin/licensing/batch/", "#result_list"),
        ("batch-page", f"/admin/licensing/batch/{seeded['batch']}/change/", "#batch-key"),
        (
            "licence-page",
            f"/admin/licensing/license/{seeded['revoked_licence']}/change/",
            "#licence-token",
        ),
        (
            "direct-licence-page",
            f"/admin/licensing/license/{seeded['direct_licence']}/change/",
            "#licence-token",
        ),
        (
            "invoice-preview",
            f"/admin/invoice-preview/?customer={seeded['customer']}&period_days=30",
            "#invoice-lines",
        ),
        ("audit-log", "/admin/audit/auditentry/", "#result_list"),
        # Every other list of the console, with rows in it.
        ("licence-list", "/admin/licensing/license/", "#result_list"),
        ("activation-list", "/admin/licensing/activation/", "#result_list"),
        ("seat-release-list", "/admin/licensing/seatrelease/", "#result_list"),
        ("catalogue-list", "/admin/licensing/sku/", "#result_list"),
        ("customer-list", "/admin/customers/customer/", "#result_list"),
        ("invoice-list", "/admin/billing/invoice/", "#result_list"),
        ("invoice-page", f"/admin/billing/invoice/{seeded['invoice']}/change/", ".svc-document"),
        ("credit-note-page", f"/admin/documents/{seeded['credit_note']}/", ".svc-document"),
        (
            "customer-page",
            f"/admin/customers/customer/{seeded['customer']}/change/",
            "#customer-batches",
        ),  # fmt: skip
        ("renewal-list", "/admin/licensing/renewal/", "#content-main"),
        ("signing-key-list", "/admin/signing/signingkey/", "#result_list"),
        ("invoice-line-list", "/admin/billing/invoiceline/", "#result_list"),
        ("ledger-list", "/admin/billing/ledgerentry/", "#result_list"),
        ("usage-daily-list", "/admin/billing/usagedaily/", "#result_list"),
        ("usage-record-list", "/admin/billing/usagerecord/", "#result_list"),
        ("revocation-list", "/admin/licensing/revocation/", "#result_list"),
        ("event-list", "/admin/events/event/", "#result_list"),
        ("webhook-list", "/admin/events/webhook/", "#result_list"),
        ("webhook-page", f"/admin/events/webhook/{seeded['webhook']}/change/", "#content-main"),
    ]
    problems: dict[str, list[str]] = {}
    texts: dict[str, str] = {}  # each page's text
    parts: dict[str, str] = {}  # the text of the element each page was waited for
    saved: list[Path] = []
    weak_rows: list[str] = []  # the dashboard's weak-binding devices, a row each
    deadline = time.monotonic() + BUDGET_SECONDS

    def budget() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"the console pages took more than {BUDGET_SECONDS} s")
        return min(PAGE_TIMEOUT_MS, left * 1000)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=budget()
        )
        try:
            page = browser.new_page(viewport={"width": width, "height": HEIGHT})
            page.set_default_timeout(budget())
            page.goto(f"{url}/admin/login/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#svc-console-links")
            for name, path, ready in pages:
                page.set_default_timeout(budget())
                page.goto(f"{url}{path}")
                page.wait_for_selector(ready)
                shot = shots / f"{name}.png"
                page.screenshot(path=str(shot), full_page=True)
                saved.append(shot)
                texts[name] = page.inner_text("body")
                parts[name] = page.inner_text(ready)
                if name == "dashboard":
                    parts["top-customers"] = page.inner_text("#chart-top-customers")
                    weak_rows = page.locator("#weak-binding tbody tr").all_inner_texts()
                found = page.evaluate(LAYOUT_PROBLEMS_JS)
                if found:
                    problems[name] = found
            # An audit entry's own page holds its full detail.
            page.set_default_timeout(budget())
            page.goto(f"{url}/admin/audit/auditentry/?action=license.register")
            page.click("#result_list tbody tr a")
            page.wait_for_selector("#content-main")
            shot = shots / "audit-entry.png"
            page.screenshot(path=str(shot), full_page=True)
            saved.append(shot)
            texts["audit-entry"] = page.inner_text("body")
            if found := page.evaluate(LAYOUT_PROBLEMS_JS):
                problems["audit-entry"] = found
            # The index's "Recent actions" link to the audit log, filtered.
            page.goto(f"{url}/admin/")
            for link in page.locator("#svc-audit-links a").all():
                href = link.get_attribute("href")
                answer = page.request.get(f"{url}{href}")
                # The admin redirects a filter it does not know to ?e=1.
                assert answer.ok and "e=1" not in answer.url, href
            with page.expect_navigation():
                page.click("#svc-audit-links a:text('All recent actions')")
            page.locator("#result_list tbody tr").first.wait_for()
            assert page.locator("#result_list tbody tr").count() >= 10
            # A batch's history is its entries in the audit log.
            page.goto(f"{url}/admin/licensing/batch/{seeded['batch']}/history/")
            assert "batch.issue" in page.inner_text("#result_list")
        finally:
            browser.close()

    with capsys.disabled():
        print("\nconsole screenshots:", *(str(p) for p in saved), sep="\n  ")
    report = "\n".join(f"{name}:\n  " + "\n  ".join(found) for name, found in problems.items())
    assert not problems, f"layout problems at {width} px:\n{report}"

    for name, text in texts.items():
        money = [m.group(0) for m in MONEY.finditer(text) if not re.search(r"\.\d\d$", m[1])]
        assert not money, f"{name}: money without two decimals: {money}"
        raw = UNIX_SECONDS.findall(text)
        assert not raw, f"{name}: raw Unix times instead of dates: {raw}"
    assert re.search(r"\d\.\d\d EUR", texts["invoice-preview"])
    assert DATE.search(texts["batch-page"]) and DATE.search(texts["audit-log"])
    assert texts["batch-page"].lower().count("units activated") == 1
    weak = {row.split()[0]: row for row in weak_rows}
    assert "revoked" in weak[_ham(1)], "the revoked weak device is not marked"
    assert "revoked" not in weak[_ham(0)]
    assert "Nordlicht Sicherheitstechnik" in parts["top-customers"]
    assert "audit" in texts["admin-index"].lower()
    assert "eyJhbGciOiJFZERTQSJ9" * 30 not in texts["audit-log"]
    assert "eyJhbGciOiJFZERTQSJ9" * 30 in texts["audit-entry"].replace("\n", "")
    for shot in saved:
        assert shot.stat().st_size > 10_000, shot
