"""What the browser tests watch in Chromium (Playwright): Content-Security-Policy
refusals, script errors and console errors, by the page they happened on; and which
links of a walk are pages of a kind already seen."""

from __future__ import annotations

import re

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


def kind(path: str) -> str:
    """One page of each kind: identifiers (any segment with a digit or capital, or a
    long token) are the same page."""
    parts = ["*" if re.search(r"[0-9A-Z]|^[\w-]{20,}$", part) else part for part in path.split("/")]
    return "/".join(parts)


def is_favicon(message) -> bool:
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
        elif message.type == "error" and not is_favicon(message):
            self.note(f"console error: {text}")

    def attach(self, page) -> None:
        page.add_init_script(WATCH_JS)
        page.on("console", self.console)
        page.on("pageerror", lambda error: self.note(f"script error: {error}"))


def violations_in_frames(page) -> list[str]:
    """The policy refusals each frame of ``page`` reported since it loaded."""
    found = []
    for frame in page.frames:
        try:
            found += frame.evaluate(READ_JS)
        except Exception:  # noqa: BLE001, S112 - a frame that runs no script reports none
            continue
    return found
