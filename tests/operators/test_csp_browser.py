"""The Content-Security-Policy in a real browser (issue 39 item 7): Debian's Chromium
through Playwright against a live gunicorn with production defaults and the console
layout test's realistic data (tests/operators/test_console_layout.py ``_seed``). Every
console and portal page, found by walking their links from the index and the portal's
dashboard (one page of each kind: a list, an object's page, a form, a document, its
printable page, the portal's document frame), loads with no CSP violation (the page's
securitypolicyviolation events and Chromium's console reports), no script error and its
stylesheets applied; and the pages still work under the policy: the console's Copy button
(static/svc/console.js), Django admin's select-all of a list (actions.js), a form
submitted in each (the invoice preview; a portal API key created and shown once).

A control proves the watch sees what the policy refuses: a style attribute set by the
test itself is reported."""

from __future__ import annotations

import re
import time
from collections import deque
from urllib.parse import urljoin, urlsplit

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Error as PlaywrightError

from audit.context import Actor, acting_as
from customers.models import Customer
from tests.operators.test_browser import CHROMIUM, CHROMIUM_ARGS, PASSWORD, _browser_or_skip
from tests.operators.test_console_layout import _seed
from tests.portal.conftest import PASSWORD as CUSTOMER_PASSWORD
from tests.portal.conftest import account_for

pytestmark = pytest.mark.live

# A guard against a walk that never ends, not a speed target: the walk is bounded by
# its pages (one of each kind), and a busy machine (the slow tests share the cores) may
# take several times its quiet 80-100 s.
BUDGET_SECONDS = 900
PAGE_TIMEOUT_MS = 15_000

# Before any script of the page: every violation the document reports, kept for the test.
WATCH_JS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(
    `${e.effectiveDirective} blocked ${e.blockedURI || "inline"} at ` +
    `${e.sourceFile || ""}:${e.lineNumber} ${e.sample || ""}`.trim()
  );
});
"""
READ_JS = "() => (window.__cspViolations || []).slice()"

# Links not followed: leaving, destroying, or downloads (not pages: no policy applies).
SKIP = re.compile(r"logout|/delete/|/pdf/?$|\.pdf$|\.csv$|/export|/r/\d+/|download")


def _kind(path: str) -> str:
    """One page of each kind: identifiers (any segment with a digit or capital, or a
    long token) are the same page."""
    parts = ["*" if re.search(r"[0-9A-Z]|^[\w-]{20,}$", part) else part for part in path.split("/")]
    return "/".join(parts)


def _is_favicon(message) -> bool:
    """Chromium asks for /favicon.ico on its own, on some pages and not others; the 404 it
    logs names the icon only in the message's location, not in its text."""
    location = message.location or {}
    return "favicon" in message.text or str(location.get("url", "")).endswith("/favicon.ico")


class Watch:
    """What Chromium reported while the test walked: CSP refusals and script errors, by
    the page they happened on."""

    def __init__(self) -> None:
        self.current = "(start)"
        self.problems: dict[str, list[str]] = {}

    def note(self, what: str) -> None:
        self.problems.setdefault(self.current, []).append(what)

    def console(self, message) -> None:
        text = message.text
        if "Content Security Policy" in text or "Content-Security-Policy" in text:
            self.note(f"console: {text}")
        elif message.type == "error" and not _is_favicon(message):
            self.note(f"console error: {text}")

    def attach(self, page) -> None:
        page.add_init_script(WATCH_JS)
        page.on("console", self.console)
        page.on("pageerror", lambda error: self.note(f"script error: {error}"))


def _violations_in_frames(page) -> list[str]:
    found = []
    for frame in page.frames:
        try:
            found += frame.evaluate(READ_JS)
        except Exception:  # noqa: BLE001, S112 - a frame that runs no script reports none
            continue
    return found


def _walk(page, watch: Watch, url: str, start: str, prefix: str, deadline: float) -> dict:
    """Visit ``start`` and every page of ``prefix`` linked from the pages visited, one
    per kind; return {path: policy header} of each."""
    seen_kinds: set[str] = set()
    headers: dict[str, str] = {}
    queue = deque([start])
    while queue:
        target = queue.popleft()
        kind = _kind(urlsplit(target).path)
        if kind in seen_kinds:
            continue
        seen_kinds.add(kind)
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"walking the pages took more than {BUDGET_SECONDS} s")
        page.set_default_timeout(min(PAGE_TIMEOUT_MS, left * 1000))
        watch.current = target
        try:
            response = page.goto(f"{url}{target}", wait_until="load")
        except PlaywrightError as exc:  # a download (CSV, PDF) is not a page
            if "Download is starting" in str(exc):
                continue
            raise
        if response is None or "text/html" not in response.headers.get("content-type", ""):
            continue
        assert response.status == 200, f"{target}: {response.status}"
        headers[target] = response.headers.get("content-security-policy", "")
        for violation in _violations_in_frames(page):
            watch.note(f"event: {violation}")
        for href in page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)"):
            parts = urlsplit(urljoin(page.url, href))
            if f"{parts.scheme}://{parts.netloc}" != url or not parts.path.startswith(prefix):
                continue
            link = parts.path + (f"?{parts.query}" if parts.query else "")
            if not SKIP.search(parts.path) and _kind(parts.path) not in seen_kinds:
                queue.append(link)
    return headers


def test_every_console_and_portal_page_keeps_the_policy(
    live_service, transactional_db, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    sync_playwright = _browser_or_skip()
    get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
    url = live_service.url
    with acting_as(Actor(name="jdoe", kind="cli")):
        seeded = _seed(url)
    # A portal user of the customer with the invoice and its credit note, a batch, a
    # direct licence, a revoked licence; and the webhook customer's.
    acme = Customer.objects.get(name="Acme Cameras International Ltd.")
    account_for(acme, "it@acme.example")
    deadline = time.monotonic() + BUDGET_SECONDS
    watch = Watch()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            watch.attach(page)
            page.set_default_timeout(PAGE_TIMEOUT_MS)

            # The control: a style attribute set by script is refused, and seen.
            watch.current = "(control)"
            page.goto(f"{url}/admin/login/")
            page.evaluate("() => document.body.setAttribute('style', 'color: red')")
            page.wait_for_function("() => window.__cspViolations.length > 0")
            control = _violations_in_frames(page)
            assert any("style-src" in v for v in control), control
            watch.problems.pop("(control)")

            # The console: log in (a form), then every kind of page.
            watch.current = "/admin/login/"
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#svc-console-links")
            starts = [
                "/admin/",
                f"/admin/documents/{seeded['credit_note']}/",
                f"/admin/invoice-preview/?customer={seeded['customer']}&period_days=30",
                "/admin/second-factor/",  # the enrolment page: its QR code is inline SVG
            ]
            console = {}
            for start in starts:
                console |= _walk(page, watch, url, start, "/admin/", deadline)

            # Styles from static/svc/console.css apply.
            page.goto(f"{url}/admin/dashboard/")
            assert page.eval_on_selector(
                ".svc-dashboard .svc-stat", "e => getComputedStyle(e).fontWeight"
            ) in ("700", "bold")
            # The Copy button's script (static/svc/console.js).
            watch.current = "batch page: Copy"
            page.goto(f"{url}/admin/licensing/batch/{seeded['batch']}/change/")
            page.click("button[data-copy=batch-key]")
            page.wait_for_selector("button[data-copy=batch-key]:text('Copied')")
            # Django admin's own script: select every row of a list.
            watch.current = "licence list: select all"
            page.goto(f"{url}/admin/licensing/license/")
            page.check("#action-toggle")
            rows = page.locator("#result_list tbody tr").count()
            assert page.inner_text(".action-counter").startswith(f"{rows} of {rows} selected")
            # Forms submitted: a search (GET) and a batch order checked (POST).
            watch.current = "licence list: search"
            page.fill("#searchbar", "nl-ham")
            with page.expect_navigation():
                page.click("#changelist-search input[type=submit]")
            assert "q=nl-ham" in page.url
            watch.current = "batch order: check"
            page.goto(f"{url}/admin/licensing/batch/add/?customer={seeded['customer']}")
            page.select_option("#id_sku", "VISION-PRO")
            page.fill("#id_units", "10")
            page.click("input[name=_submit]")
            assert "EUR" in page.inner_text("#confirmation")
            for violation in _violations_in_frames(page):
                watch.note(f"event: {violation}")

            # The portal, in a session of its own.
            portal_context = browser.new_context(viewport={"width": 1280, "height": 900})
            portal_page = portal_context.new_page()
            watch.attach(portal_page)
            portal_page.set_default_timeout(PAGE_TIMEOUT_MS)
            watch.current = "/portal/login/"
            portal_page.goto(f"{url}/portal/login/")
            portal_page.fill("#id_username", "it@acme.example")
            portal_page.fill("#id_password", CUSTOMER_PASSWORD)
            portal_page.click("#login-submit")
            portal_page.wait_for_selector("#portal-nav")
            assert (
                portal_page.eval_on_selector("#portal-nav", "e => getComputedStyle(e).display")
                == "flex"
            )  # static/svc/portal.css applies
            portal = _walk(portal_page, watch, url, "/portal/", "/portal/", deadline)
            # A form submitted: a new API key, shown once.
            watch.current = "portal API keys: create"
            portal_page.goto(f"{url}/portal/api-keys/")
            portal_page.fill("#id_name", "fleet-sync")
            with portal_page.expect_navigation():
                portal_page.click("#key-submit")
            assert portal_page.inner_text("#new-key-value").strip()
            for violation in _violations_in_frames(portal_page):
                watch.note(f"event: {violation}")
        finally:
            browser.close()

    report = "\n".join(
        f"{page}:\n  " + "\n  ".join(found) for page, found in watch.problems.items()
    )
    assert not watch.problems, f"CSP violations or script errors:\n{report}"
    pages = {**console, **portal}
    print(f"\n{len(console)} console and {len(portal)} portal pages without a violation")
    assert len(console) >= 30 and len(portal) >= 6, sorted(pages)
    for must in ("/admin/dashboard/", "/admin/audit/auditentry/", "/portal/invoices/"):
        assert any(path.startswith(must) for path in pages), must
    assert any("/print/" in path for path in console), sorted(console)
    # Every kind of page of the console layout test's list, among others.
    visited = {_kind(urlsplit(path).path) for path in console}
    for kind in (
        "/admin/licensing/batch/*/change/",
        "/admin/licensing/license/*/change/",
        "/admin/customers/customer/*/change/",
        "/admin/billing/invoice/*/change/",
        "/admin/documents/*/",
        "/admin/events/webhook/*/change/",
        "/admin/audit/auditentry/*/change/",
        "/admin/licensing/renewal/",
        "/admin/signing/signingkey/",
        "/admin/billing/usagerecord/",
    ):
        assert kind in visited, (kind, sorted(visited))
    assert any(re.match(r"/portal/invoices/[^/]+/$", path) for path in portal), sorted(portal)
    for path, header in pages.items():
        assert "frame-ancestors 'none'" in header and "script-src 'self'" in header, path
        assert "unsafe-inline" not in header, path
