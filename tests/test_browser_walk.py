"""The browser walk, a gate (issues 39 and 41): Debian's Chromium through Playwright
against a live gunicorn with realistic data (the console layout test's seed: customers
with long names, firmware device ids, a revoked and a released unit, an invoice and its
credit note, a webhook with failed deliveries; and portal users). It visits every console
page an operator reaches and every portal page a customer reaches, found by following
their links from the index and the dashboard (one page of each kind, bounded), and the
confirmation pages behind the console's destructive actions; each at 1280 and then 1000 px
wide (the same page, resized). The console is walked by a superuser and by one operator of
each role of operators.roles (at 1280 px, one page per kind): every page a role reaches
passes the same checks, and a link on its pages that answers a refusal (403) or sends it
back to the login is a failure. The server runs as production does, with SVC_REQUIRE_2FA
on: every console and portal user enrols an authenticator and gives its code after the
password. Three tests (the superuser's console, the roles', the portal), so that the slow
run's workers share them. A page fails on:

- horizontal overflow (the document wider than the window),
- an empty main area,
- a raw Unix time (10 digits, 1.5e9 to 2.2e9) or a number of 10,000 or more without
  grouping in a table cell,
- a broken image, a console error or a script error,
- a Content-Security-Policy violation (the page's securitypolicyviolation events and
  Chromium's console reports), or a policy header without frame-ancestors 'none' and
  script-src 'self', or with 'unsafe-inline'.

A control proves the watch sees what the policy refuses (a style attribute set by the test
itself is reported), and the pages still work under the policy: the stylesheets apply, the
Copy buttons (static/svc/console.js) copy, Django admin's select-all (actions.js) selects,
and forms submit (a search, a batch order checked, a portal API key created).

Full-page screenshots of the superuser's and the portal users' pages go to
``$SVC_SCREENSHOT_DIR/walk/<width>px/`` when it is set (none otherwise: they cost a
third of the walk); the roles' pages, a subset of the superuser's, are checked but not
photographed."""

from __future__ import annotations

import base64
import os
import re
import time
from collections import deque
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django_otp.oath import totp
from playwright.sync_api import Error as PlaywrightError

from audit.context import Actor, acting_as
from customers.models import Customer
from operators.roles import ROLES
from operators.services import roles_ensure
from tests.browser import SKIP, Watch, kind, violations_in_frames
from tests.conftest import start_gunicorn, stop_gunicorn
from tests.operators.test_browser import CHROMIUM, CHROMIUM_ARGS, PASSWORD, _browser_or_skip
from tests.operators.test_console_layout import _seed
from tests.portal.conftest import PASSWORD as CUSTOMER_PASSWORD
from tests.portal.conftest import account_for

pytestmark = pytest.mark.live

WIDTHS = (1280, 1000)
ROLE_WIDTHS = (1280,)  # a restricted role's pages: the superuser's walk tried both widths
HEIGHT = 900
# A guard against a walk that never ends, not a speed target: a walk is bounded by its
# pages (one of each kind), and a busy machine (the slow tests share the cores) may take
# several times its quiet time.
BUDGET_SECONDS = 900
PAGE_TIMEOUT_MS = 15_000
MAX_PAGES = 200  # per site: a bound, should a link multiply kinds

# Run in the page: what is wrong with it as a user would see it (a list of strings).
PROBLEMS_JS = r"""
() => {
  const problems = [];
  const squash = (text) => (text || "").replace(/\s+/g, " ").trim();
  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth) {
    // Name the widest element that sticks out, to say where to look.
    let worst = null;
    for (const el of document.body.querySelectorAll("*")) {
      const box = el.getBoundingClientRect();
      if (box.right > window.innerWidth + 1 && (!worst || box.right > worst.right)) {
        const cls = typeof el.className === "string" ? el.className.trim() : "";
        worst = {right: box.right, name: el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
          (cls ? "." + cls.split(/\s+/).join(".") : "")};
      }
    }
    problems.push(`scrolls sideways: ${doc.scrollWidth}px in a ${window.innerWidth}px window` +
      (worst ? ` (${worst.name} ends at ${Math.round(worst.right)}px)` : ""));
  }
  // A printable document is a page of its own: its body is its main area.
  const main = document.querySelector("#content-main") || document.querySelector("#content") ||
    document.querySelector("main") || document.body;
  if (squash(main.innerText).length < 20 &&
             !main.querySelector("table, img, svg, iframe, form")) {
    problems.push(`empty main area: "${squash(main.innerText)}"`);
  }
  // Table cells: a Unix time shown raw, a large number without grouping.
  const unix = /(?<![\w.,:\/-])(1[5-9]\d{8}|2[01]\d{8})(?![\w.,:\/-])/;
  const ungrouped = /(?<![\w.,:\/+#-])(\d{5,})(?![\w,:\/-]|\.\d)/;
  for (const cell of document.querySelectorAll("td, th")) {
    if (cell.closest("pre, code, textarea, svg")) continue;
    let text = "";
    for (const node of cell.childNodes) {
      // The cell's own text, not that of a code box or a hidden input inside it.
      if (node.nodeType === Node.TEXT_NODE) text += node.textContent + " ";
      else if (node.nodeType === Node.ELEMENT_NODE &&
               !node.matches("pre, code, textarea, input, select, .svc-json")) {
        text += node.innerText + " ";
      }
    }
    text = squash(text);
    let m = unix.exec(text);
    if (m) { problems.push(`raw Unix time ${m[1]} in a cell: "${text.slice(0, 80)}"`); continue; }
    m = ungrouped.exec(text);
    if (m) problems.push(`number ${m[1]} without grouping in a cell: "${text.slice(0, 80)}"`);
  }
  for (const img of document.images) {
    if (img.complete && img.naturalWidth === 0) problems.push(`broken image: ${img.src}`);
  }
  return problems;
}
"""


def _screenshots() -> Path | None:
    chosen = os.environ.get("SVC_SCREENSHOT_DIR")
    return Path(chosen) / "walk" if chosen else None


def _name(path: str) -> str:
    return re.sub(r"[^\w.-]+", "_", path.strip("/")) or "index"


class Walker:
    """One browser page of one site, its checks and what they found."""

    def __init__(
        self, page, url: str, site: str, deadline: float, widths: tuple[int, ...] = WIDTHS
    ) -> None:
        self.page, self.url, self.site, self.deadline = page, url, site, deadline
        self.widths = widths
        self.watch = Watch()
        self.watch.attach(page)
        self.problems: dict[str, list[str]] = {}
        self.visited: list[str] = []
        self.policies: dict[str, str] = {}  # page: its Content-Security-Policy header
        self.shots = _screenshots()

    def timeout(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"the walk took more than {BUDGET_SECONDS} s")
        return min(PAGE_TIMEOUT_MS, left * 1000)

    def check(self, label: str) -> None:
        """The page as loaded, at each width (the same page, resized)."""
        page = self.page
        for violation in violations_in_frames(page):
            self.watch.note(f"CSP: {violation}")
        for width in self.widths:
            page.set_viewport_size({"width": width, "height": HEIGHT})
            for problem in page.evaluate(PROBLEMS_JS):
                self.problems.setdefault(f"{label} at {width}px", []).append(problem)
            if self.shots is not None:
                folder = self.shots / f"{width}px"
                folder.mkdir(parents=True, exist_ok=True)
                # JPEG: a full-page PNG of each page at each width costs the walk ~25 s.
                shot = folder / f"{self.site}-{_name(label)}.jpg"
                page.screenshot(path=str(shot), full_page=True, quality=80)
        page.set_viewport_size({"width": WIDTHS[0], "height": HEIGHT})

    def walk(self, starts: list[str], prefix: str) -> None:
        """Visit each start and every page of ``prefix`` linked from the pages visited,
        one per kind of page."""
        seen: set[str] = set()
        queue = deque(starts)
        while queue and len(self.visited) < MAX_PAGES:
            target = queue.popleft()
            page_kind = kind(urlsplit(target).path)
            if page_kind in seen and target not in starts:
                continue
            seen.add(page_kind)
            self.page.set_default_timeout(self.timeout())
            self.watch.current = target
            try:
                response = self.page.goto(f"{self.url}{target}", wait_until="load")
            except PlaywrightError as exc:  # a download (CSV, PDF) is not a page
                if "Download is starting" in str(exc):
                    continue
                raise
            if response is None or "text/html" not in response.headers.get("content-type", ""):
                continue
            if response.status != 200:
                self.problems.setdefault(target, []).append(f"answered {response.status}")
                continue
            landed = urlsplit(self.page.url).path
            if landed != urlsplit(target).path and re.search(r"/(login|second-factor)/$", landed):
                # A page this user may not see, linked all the same.
                self.problems.setdefault(target, []).append(f"sent to {landed}")
                continue
            self.visited.append(target)
            self.policies[target] = response.headers.get("content-security-policy", "")
            self.check(target)
            for href in self.page.eval_on_selector_all("a[href]", "a => a.map(e => e.href)"):
                parts = urlsplit(urljoin(self.page.url, href))
                if f"{parts.scheme}://{parts.netloc}" != self.url:
                    continue
                if not parts.path.startswith(prefix) or SKIP.search(parts.path):
                    continue
                if parts.path.endswith("/history/"):  # the audit log, filtered: seen
                    continue
                if kind(parts.path) not in seen:
                    queue.append(parts.path + (f"?{parts.query}" if parts.query else ""))

    def action(self, label: str, changelist: str, action: str, rows: int = 1) -> None:
        """A destructive action's confirmation page: rows selected on ``changelist``,
        the action chosen, its page checked (nothing is confirmed)."""
        page = self.page
        page.set_default_timeout(self.timeout())
        self.watch.current = label
        page.goto(f"{self.url}{changelist}")
        boxes = page.locator("#result_list input.action-select")
        for n in range(min(rows, boxes.count())):
            boxes.nth(n).check()
        page.select_option("select[name=action]", action)
        with page.expect_navigation():
            page.click("button[name=index]")
        assert page.locator("input[name=apply]").count() == 1, f"{label}: no confirmation page"
        self.visited.append(label)
        self.check(label)

    def log_in(self, login: str, username: str, password: str, *, check: bool) -> None:
        """The login page, the password, then the second factor as production asks it:
        an authenticator enrolled (its secret read off the page, as an app scans the QR
        code), its first code, the recovery codes kept. ``check``: each of those pages
        is checked too."""
        page = self.page
        page.set_default_timeout(self.timeout())
        self.watch.current = login
        page.goto(f"{self.url}{login}")
        if check:
            self.check(login)
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("input[type=submit], #login-submit")
        page.wait_for_selector("#enrol-secret")
        self.watch.current = urlsplit(page.url).path
        if check:
            self.check(f"{self.watch.current} (enrol)")
        secret = page.inner_text("#enrol-secret").replace(" ", "")
        key = base64.b32decode(secret + "=" * (-len(secret) % 8))
        page.fill("#id_code", f"{totp(key):06d}")
        page.click("#second-factor-submit")
        page.wait_for_selector("#recovery-codes")
        if check:
            self.check(f"{self.watch.current} (recovery codes)")
        with page.expect_navigation():
            page.click("#codes-continue")


@pytest.fixture
def site(django_db_setup, django_db_blocker, signing_key_file, tmp_path, transactional_db,
         monkeypatch):  # fmt: skip
    """gunicorn on the test database with SVC_REQUIRE_2FA on, as in production, and the
    console layout test's data in it, seeded by a superuser ``operator``. Yields
    (url, the seed's ids)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    service = start_gunicorn(tmp_path, SVC_REQUIRE_2FA="1")
    try:
        get_user_model().objects.create_superuser("operator", "ops@example.com", PASSWORD)
        with acting_as(Actor(name="jdoe", kind="cli")):
            seeded = _seed(service.url)
        yield service.url, seeded
    finally:
        stop_gunicorn(service)


@pytest.fixture
def browser():
    sync_playwright = _browser_or_skip()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


def _walker(browser, url: str, name: str, widths: tuple[int, ...] = WIDTHS) -> Walker:
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": HEIGHT})
    return Walker(context.new_page(), url, name, time.monotonic() + BUDGET_SECONDS, widths)


def _passed(walkers: list[Walker], started: float) -> None:
    """Nothing found on any page any walker visited, and each page's policy as strict as
    production's."""
    report = []
    for walker in walkers:
        for where, found in walker.problems.items():
            report.append(f"{walker.site} {where}:\n  " + "\n  ".join(found))
        for where, found in walker.watch.problems.items():
            report.append(f"{walker.site} {where}:\n  " + "\n  ".join(found))
        for path, policy in walker.policies.items():
            if "frame-ancestors 'none'" not in policy or "script-src 'self'" not in policy:
                report.append(f"{walker.site} {path}: policy {policy!r}")
            if "unsafe-inline" in policy:
                report.append(f"{walker.site} {path}: policy allows unsafe-inline")
    counts = ", ".join(f"{w.site} {len(w.visited)}" for w in walkers)
    print(f"\nwalked {counts} pages in {time.monotonic() - started:.0f} s")
    assert not report, "\n".join(report)


def test_every_console_page_as_a_superuser_at_two_widths(site, browser):
    started = time.monotonic()
    url, seeded = site
    console = _walker(browser, url, "console")
    page = console.page
    # The control: a style attribute set by script is refused, and the watch sees it.
    console.watch.current = "(control)"
    page.goto(f"{url}/admin/login/")
    page.evaluate("() => document.body.setAttribute('style', 'color: red')")
    page.wait_for_function("() => window.__cspViolations.length > 0")
    assert any("style-src" in v for v in violations_in_frames(page))
    assert console.watch.problems.pop("(control)")

    console.log_in("/admin/login/", "operator", PASSWORD, check=True)
    page.wait_for_selector("#svc-console-links")
    # A reconciliation stored: the dashboard's ledger shows figures and their age.
    page.goto(f"{url}/admin/dashboard/")
    assert page.eval_on_selector(
        ".svc-dashboard .svc-stat", "e => getComputedStyle(e).fontWeight"
    ) in ("700", "bold")  # static/svc/console.css applies
    with page.expect_navigation():
        page.click("#ledger-reconcile input[type=submit]")
    assert "Not live" in page.inner_text("#ledger-as-of")
    console.walk(
        [
            "/admin/",
            "/admin/dashboard/",
            f"/admin/documents/{seeded['credit_note']}/",
            f"/admin/invoice-preview/?customer={seeded['customer']}&period_days=30",
        ],
        "/admin/",
    )
    # The confirmations of the destructive actions, three rows selected.
    console.action("revoke licences", "/admin/licensing/license/", "revoke_licenses", 3)
    console.action("revoke units", "/admin/licensing/activation/", "revoke_units", 3)
    console.action("release seats", "/admin/licensing/activation/", "release_seats", 3)
    console.action("revoke signing key", "/admin/signing/signingkey/", "revoke_keys")
    console.action("renew licences", "/admin/licensing/license/", "renew_licenses", 3)
    console.action("renew batches", "/admin/licensing/batch/", "renew_batches", 3)
    # Add-ons (issue 42): the add and remove confirmations, three rows selected.
    console.action("add add-on to batches", "/admin/licensing/batch/", "add_addon_batches", 3)
    console.action(
        "remove add-on from batches", "/admin/licensing/batch/", "remove_addon_batches", 3
    )
    console.action("add add-on to licences", "/admin/licensing/license/", "add_addon_licenses", 3)
    console.action(
        "remove add-on from licences", "/admin/licensing/license/", "remove_addon_licenses", 3
    )
    # Issue 42: converting a trial batch, its cameras on trial quoted before anything is
    # converted (the seed's trial: three cameras of Vision Pro at 240.00 EUR).
    console.action(
        "convert trial batches", "/admin/licensing/batch/?trial=on", "convert_trial_batches"
    )
    assert "720.00 EUR" in page.inner_text("#convert-total")
    assert seeded["trial_batch"] in page.inner_text("#convert-quotes")

    # Scripts and forms under the policy. The batch key's Copy button (console.js):
    console.watch.current = "batch page: Copy"
    page.goto(f"{url}/admin/licensing/batch/{seeded['batch']}/change/")
    page.click("button[data-copy=batch-key]")
    page.wait_for_selector("button[data-copy=batch-key]:text('Copied')")
    # Django admin's own script: select every row of a list.
    console.watch.current = "licence list: select all"
    page.goto(f"{url}/admin/licensing/license/")
    page.check("#action-toggle")
    rows = page.locator("#result_list tbody tr").count()
    assert page.inner_text(".action-counter").startswith(f"{rows} of {rows} selected")
    # A search (GET) and a batch order checked (POST).
    console.watch.current = "licence list: search"
    page.fill("#searchbar", "nl-ham")
    with page.expect_navigation():
        page.click("#changelist-search input[type=submit]")
    assert "q=nl-ham" in page.url
    console.watch.current = "batch order: check"
    page.goto(f"{url}/admin/licensing/batch/add/?customer={seeded['customer']}")
    page.select_option("#id_sku", "VISION-PRO")
    page.fill("#id_units", "10")
    page.click("input[name=_submit]")
    assert "EUR" in page.inner_text("#confirmation")
    console.check("batch order: check")

    _passed([console], started)
    assert len(console.visited) >= 40, console.visited
    assert any("/print/" in path for path in console.visited), console.visited
    visited = {kind(urlsplit(path).path) for path in console.visited}
    for each in (
        "/admin/licensing/batch/*/change/",
        "/admin/licensing/license/*/change/",
        "/admin/customers/customer/*/change/",
        "/admin/billing/invoice/*/change/",
        "/admin/documents/*/",
        "/admin/events/webhook/*/change/",
        "/admin/audit/auditentry/*/change/",
        "/admin/audit/auditentry/",
        "/admin/licensing/renewal/",
        "/admin/licensing/trialconversion/",
        "/admin/signing/signingkey/",
        "/admin/billing/usagerecord/",
    ):
        assert each in visited, (each, sorted(visited))


def test_every_console_page_each_role_reaches(site, browser):
    """One operator of each restricted role (operators.roles), as a console user gets
    it: staff, in the role's group, no permission of its own. What its index and
    dashboard link to, followed."""
    started = time.monotonic()
    url, _ = site
    roles_ensure()
    for role in ROLES:
        user = get_user_model().objects.create_user(
            f"{role}.operator", f"{role}@ops.example", PASSWORD, is_staff=True
        )
        user.groups.add(Group.objects.get(name=role))
    walkers = {}
    for role in ROLES:
        walker = walkers[role] = _walker(browser, url, f"console-{role}", ROLE_WIDTHS)
        # A role sees a subset of the pages the superuser's walk photographed: checked,
        # not photographed again (their screenshots took 17 s of its 55 s here).
        walker.shots = None
        walker.log_in("/admin/login/", f"{role}.operator", PASSWORD, check=False)
        walker.walk(["/admin/", "/admin/dashboard/"], "/admin/")
        walker.page.context.close()
    _passed(list(walkers.values()), started)
    reached = {role: len(walker.visited) for role, walker in walkers.items()}
    assert all(count >= 10 for count in reached.values()), reached


def test_every_portal_page_of_two_customers_at_two_widths(site, browser):
    """A portal user of the customer with an invoice, its credit note and a revoked
    batch, and one of the customer with most units (revoked, weakly bound, a webhook)."""
    started = time.monotonic()
    url, seeded = site
    acme = Customer.objects.get(name="Acme Cameras International Ltd.")
    nordlicht = Customer.objects.get(pk=seeded["customer"])
    portals = []
    for email, customer in (
        ("it@acme.example", acme),
        ("lizenzen@nordlicht-sicherheitstechnik.example", nordlicht),
    ):
        account_for(customer, email)
        portal = _walker(browser, url, f"portal-{email[:4]}")
        portals.append(portal)
        portal.log_in("/portal/login/", email, CUSTOMER_PASSWORD, check=len(portals) == 1)
        portal.page.wait_for_selector("#portal-nav")
        assert (
            portal.page.eval_on_selector("#portal-nav", "e => getComputedStyle(e).display")
            == "flex"
        )  # static/svc/portal.css applies
        portal.walk(["/portal/"], "/portal/")
    # A secret shown once, and its Copy button (static/svc/console.js): shown only with
    # script, it puts the key on the clipboard.
    page = portal.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    portal.watch.current = "API key: Copy"
    page.goto(f"{url}/portal/api-keys/")
    page.fill("#id_name", "fleet-sync")
    with page.expect_navigation():
        page.click("#key-submit")
    key = page.inner_text("#new-key-value").strip()
    page.click("#new-key-copy")
    page.wait_for_selector("#new-key-copy:text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == key
    portal.check("API key created")
    # Issue 42: Nordlicht buys its trial batch: the page names the cameras on trial and
    # the amount, the purchase says what was bought and what is billed.
    portal.watch.current = "trial: buy"
    page.goto(f"{url}/portal/batches/{seeded['trial_batch']}/")
    assert "3 cameras on trial now" in " ".join(page.inner_text("#batch-trial").split())
    with page.expect_navigation():
        page.click("#batch-buy")
    assert page.inner_text("#buy-amount").strip() == "720.00 EUR"
    portal.check("trial: buy")
    with page.expect_navigation():
        page.click("#buy-submit")
    bought = " ".join(page.inner_text(".messagelist").split())
    assert "Bought: batch" in bought and "720.00 EUR is billed on your next invoice" in bought
    assert "Bought" in page.inner_text("#batch-trial")
    portal.check("trial: bought")

    _passed(portals, started)
    acme_pages, nordlicht_pages = (w.visited for w in portals)
    for pages in (acme_pages, nordlicht_pages):
        assert len(pages) >= 8, pages
    assert any(re.match(r"/portal/invoices/[^/]+/$", p) for p in acme_pages), acme_pages
    assert any(re.match(r"/portal/batches/[^/]+/buy/$", p) for p in nordlicht_pages), (
        nordlicht_pages
    )
