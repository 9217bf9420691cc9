"""Dates in one home (issue 43, item 6): :mod:`svccore.dates` writes every day, period and
moment people read (documents, console, portal, svcctl, e-mails), and nothing else
formats one by hand: no template uses Django's ``date`` filter, no server or svcctl module
calls ``strftime`` or writes a period as "X to Y" outside the few machine formats listed
here with their reason."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.template import Context, Template

from svccore import dates

REPO = Path(__file__).resolve().parent.parent
CODE = ("config", "customers", "licensing", "billing", "audit", "operators", "ratelimits")
CODE += ("signing", "events", "console", "portal", "svccore", "svcctl")

pytestmark = pytest.mark.every_database


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [
        (utc(2026, 11, 1), utc(2026, 12, 1), "1–30 November 2026"),
        (utc(2026, 11, 28), utc(2026, 12, 28), "28 November – 27 December 2026"),
        (utc(2026, 12, 28), utc(2027, 1, 4), "28 December 2026 – 3 January 2027"),
        (utc(2026, 11, 27), utc(2026, 11, 28), "27 November 2026"),
        # A rated estimate's window ends at the moment it was rated: that day is its last.
        (utc(2026, 10, 29, 14, 5), utc(2026, 11, 28, 14, 5), "29 October – 28 November 2026"),
    ],
)
def test_a_period_is_shown_by_its_first_and_last_day_inclusive(start, end, shown):
    assert dates.period(start, end) == shown
    assert dates.period(int(start.timestamp()), int(end.timestamp())) == shown  # svcctl's


def test_a_day_and_a_moment_read_the_same_everywhere():
    moment = utc(2026, 11, 27, 14, 5, 59)
    assert dates.day(moment) == "27 November 2026"
    assert dates.day(dt.date(2026, 1, 3)) == "3 January 2026"
    assert dates.moment(moment) == "27 November 2026, 14:05 UTC"
    assert dates.moment(int(moment.timestamp())) == "27 November 2026, 14:05 UTC"
    # In UTC, whatever zone the datetime carries.
    tokyo = moment.astimezone(dt.timezone(dt.timedelta(hours=9)))
    assert dates.moment(tokyo) == "27 November 2026, 14:05 UTC"
    assert dates.moment(None) == "" and dates.moment(0, none="never") == "never"
    assert dates.span(utc(2026, 11, 27, 14), utc(2026, 11, 27, 15)) == (
        "27 November 2026, 14:00–15:00 UTC"
    )
    assert dates.iso_day(moment) == "2026-11-27"
    assert dates.last_day(utc(2026, 12, 1)) == dt.date(2026, 11, 30)
    with pytest.raises(ValueError, match="naive"):
        dates.day(dt.datetime(2026, 11, 27))


def test_the_template_filters_are_the_module():
    template = Template(
        "{{ doc|period }}|{{ start|period:end }}|{{ start|day }}|{{ start|moment }}|"
        "{{ none|moment:'never' }}|{{ start|clock }}"
    )
    start, end = utc(2026, 11, 1, 8, 30), utc(2026, 12, 1)
    doc = {"period_start": start, "period_end": end}
    shown = template.render(Context({"doc": doc, "start": start, "end": end, "none": None}))
    assert shown == (
        "1–30 November 2026|1–30 November 2026|1 November 2026|"
        "1 November 2026, 08:30 UTC|never|08:30 UTC"
    )


# Templates' machine uses of a date, with their reason.
TEMPLATES_ALLOWED = {"templates/admin/index.html": "today as the audit list's URL query"}


def test_no_template_formats_a_date_itself():
    found = []
    for path in sorted((REPO / "templates").rglob("*.html")):
        if str(path.relative_to(REPO)) in TEMPLATES_ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\|\s*(date|time)\s*:|\|\s*utc\b|\bnow\s+\"", line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not found, "dates formatted in a template (use |day, |period, |moment):\n" + "\n".join(
        found
    )


# Machine formats, each with its reason: they are not read as dates by people.
ALLOWED = {
    "svccore/dates.py": "the one home",
    "svccore/csvformat.py": "ISO 8601 timestamps of the finance CSV",
    "audit/services.py": "the minute in a repeat digest, hashed, never shown",
    "billing/admin.py": "a download's file name stamp",
    "licensing/api/fleet.py": "a download's file name stamp",
    "portal/views.py": "a download's file name stamp",
    "billing/einvoice_cii.py": "EN 16931 CII dates (format 102)",
    "billing/einvoice_ubl.py": "EN 16931 UBL ISO dates",
    "billing/periods.py": "echoes a refused input exactly, to the second",
}
HAND_MADE = re.compile(
    r"strftime\(|\.isoformat\(\)|:%Y-%m-%d|:%d %b|%Y-%m-%d %H:%M|"
    r"\}\s+to\s+\{(?:[a-z_.]*\()?(?:utc_time|day|_day|when|output\.when)\("
)


def test_no_server_or_svcctl_module_formats_a_date_by_hand():
    found = []
    for package in CODE:
        for path in sorted((REPO / package).rglob("*.py")):
            name = str(path.relative_to(REPO))
            if name in ALLOWED or "/migrations/" in name:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if HAND_MADE.search(line):
                    found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "dates formatted outside svccore.dates:\n" + "\n".join(found)
