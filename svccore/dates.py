"""How people are shown dates, periods and moments, defined once (issue 43): the invoice
document and its PDF, the portal, the console and the Django admin, ``svcctl``, the alert
e-mails. Free of Django, so ``svcctl`` formats what the API sends exactly as the server
formats its rows; the templates reach it through the ``day``, ``period`` and ``moment``
filters (:mod:`config.templatetags.dates`, built in to every template).

- a day: ``27 November 2026`` (:func:`day`);
- a period, stored as ``[start, end)`` with ``end`` at 00:00 UTC of the day after it, is
  shown the way invoices are read, by its first and last day inclusive (:func:`period`):
  ``1–30 November 2026``, ``28 November – 27 December 2026``, ``28 December 2026 –
  3 January 2027``, and a one-day period as its day, ``27 November 2026``;
- a moment where the time matters: ``27 November 2026, 14:05 UTC`` (:func:`moment`), two
  of them as :func:`span`.

Machine-readable output keeps ISO 8601: the JSON API its Unix seconds, the e-invoice XML
its ISO dates (EN 16931), the finance CSV its ISO timestamps plus the inclusive period as
ISO days (:func:`iso_day`, :func:`last_day`; docs/finance.md).
"""

from __future__ import annotations

import datetime as dt

__all__ = [
    "clock",
    "day",
    "day_month",
    "iso_day",
    "last_day",
    "moment",
    "period",
    "precise",
    "span",
    "to_utc",
]

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
# An en dash: between days of one month bare ("1–30"), between longer parts spaced.
DASH = "\u2013"

When = dt.datetime | dt.date | int


def to_utc(value: When) -> dt.datetime | dt.date:
    """An aware datetime in UTC, Unix seconds as one, a date as itself."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a moment")
    if isinstance(value, int):
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime has no UTC day: {value!r}")
        return value.astimezone(dt.UTC)
    return value


def _date(value: When) -> dt.date:
    value = to_utc(value)
    return value.date() if isinstance(value, dt.datetime) else value


def day(value: When | None, *, none: str = "") -> str:
    """``27 November 2026`` (the UTC day of a moment); ``none`` for None or 0 seconds."""
    if value is None or (isinstance(value, int) and value == 0):
        return none
    d = _date(value)
    return f"{d.day} {MONTHS[d.month - 1]} {d.year}"


def day_month(value: When) -> str:
    """A chart axis's short label, ``27 Nov`` (the tooltip says the whole day)."""
    d = _date(value)
    return f"{d.day:02d} {MONTHS[d.month - 1][:3]}"


def moment(value: When | None, *, none: str = "") -> str:
    """``27 November 2026, 14:05 UTC``; ``none`` for None or 0 seconds (a perpetual end)."""
    if value is None or (isinstance(value, int) and value == 0):
        return none
    try:
        value = to_utc(value)
    except (OverflowError, OSError):
        return str(value)
    if not isinstance(value, dt.datetime):
        return day(value)
    return f"{day(value)}, {clock(value)}"


def precise(value: When | None, *, none: str = "") -> str:
    """A moment to the second, where seconds decide (a reconciliation's diagnostics, the
    audit's times): ``27 November 2026, 14:05:59 UTC``."""
    if value is None or (isinstance(value, int) and value == 0):
        return none
    value = to_utc(value)
    if not isinstance(value, dt.datetime):
        return day(value)
    return f"{day(value)}, {value:%H:%M:%S} UTC"


def clock(value: dt.datetime | int) -> str:
    """The time of a moment, ``14:05 UTC`` (the second half of :func:`moment`)."""
    value = to_utc(value)
    return f"{value:%H:%M} UTC" if isinstance(value, dt.datetime) else ""


def span(start: When, end: When) -> str:
    """Two moments, where the times matter (a usage record's window, a certificate's
    validity): ``27 November 2026, 14:00–15:00 UTC`` within a day, else
    ``27 November 2026, 23:00 UTC – 28 November 2026, 01:00 UTC``."""
    first, second = to_utc(start), to_utc(end)
    if isinstance(first, dt.datetime) and isinstance(second, dt.datetime):
        if first.date() == second.date():
            return f"{day(first)}, {first:%H:%M}{DASH}{second:%H:%M} UTC"
    return f"{moment(start)} {DASH} {moment(end)}"


def last_day(end: When) -> dt.date:
    """The last day of a period that ends (exclusively) at ``end``: a period ending at
    00:00 UTC of 1 December ends on 30 November; one ending later in a day ends on that
    day (a rated preview's window ends at the moment it was rated)."""
    value = to_utc(end)
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0, 0):
            return value.date() - dt.timedelta(days=1)
        return value.date()
    return value - dt.timedelta(days=1)


def period(start: When, end: When) -> str:
    """The period ``[start, end)`` by its first and last day, inclusive:
    ``1–30 November 2026``, ``28 November – 27 December 2026``,
    ``28 December 2026 – 3 January 2027``, ``27 November 2026`` (one day)."""
    first, last = _date(start), last_day(end)
    if last <= first:
        return day(first)
    if first.year != last.year:
        return f"{day(first)} {DASH} {day(last)}"
    if first.month != last.month:
        return f"{first.day} {MONTHS[first.month - 1]} {DASH} {day(last)}"
    return f"{first.day}{DASH}{day(last)}"


def iso_day(value: When) -> str:
    """The UTC day as ISO 8601 (``2026-11-27``), for CSV cells and other machine reads."""
    return _date(value).isoformat()
