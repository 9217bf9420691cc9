"""How the console and the invoice documents show things, the same on every page: a
moment as ``23 November 2026, 18:40 UTC`` (:func:`utc_time`, also for Unix seconds, from
:mod:`svccore.dates`, the one home of dates and periods), money with its currency's
decimals and thousands separators (:func:`money`: ``20,000.00 EUR``, never ``20000.0``),
quantities grouped and without trailing zeros (:func:`quantity`: ``1,953,000``,
``12.345``), counts with their noun (:func:`counted`: ``1 licence``, ``2 licences``),
and JSON indented, wrapped and with its Unix times dated (:func:`pretty_json`)."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from svccore import dates
from svccore.money import exact, minor_units

# Keys whose integer values are Unix seconds, in licence claims, audit details and events.
TIME_KEYS = ("iat", "nbf", "exp", "period_start", "period_end", "not_before", "not_after",
             "usable_until", "expires_at")  # fmt: skip
_TIME_LINE = re.compile(rf'^(\s*"({"|".join(TIME_KEYS)})": )(\d+)(,?)$', re.MULTILINE)


def utc_time(moment: dt.datetime | int | None) -> str:
    """``moment`` (an aware datetime or Unix seconds) as ``23 November 2026, 18:40 UTC``
    (:func:`svccore.dates.moment`, the one format); "" for none (``None``, or 0 seconds,
    which the claims use for "no end")."""
    return dates.moment(moment)


def utc_time_html(moment: dt.datetime | int | None) -> SafeString | None:
    """:func:`utc_time` for a table cell: it wraps after the day and month, after the
    year and before nothing else ("27 November / 2026, / 14:05 UTC"), so that two moments
    side by side fit a narrow window. ``None`` for no moment, which the admin shows as its
    empty value."""
    text = utc_time(moment)
    if not text:
        return None
    day, _, clock = text.partition(", ")
    day_month, _, year = day.rpartition(" ")
    return format_html(
        '<span class="svc-time"><span>{}</span> <span>{},</span> <span>{}</span></span>',
        day_month,
        year,
        clock,
    )


def amount(value: Decimal | int | float | str | None, currency: str) -> str:
    """``value`` with its currency's decimals and thousands separators: ``4,320.00`` for
    EUR (never ``4320.0``), more decimals only where the value has them (a price per 1000
    inferences of 0.0125); "" for none."""
    if value is None or value == "":
        return ""
    return f"{exact(value, minor_units(currency)):,f}"


def quantity(value: Decimal | int | str | None) -> str:
    """A quantity grouped, without trailing zeros: ``1,953,000``, ``12.345``, ``-3``."""
    if value is None or value == "":
        return ""
    return f"{exact(value, 0):,f}"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 licence``, ``2 licences``, ``1,250 lines``: the count grouped, the noun agreeing."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def money(value: Decimal | int | float | str | None, currency: str) -> str:
    """:func:`amount` and the currency: ``630.00 EUR``; "" for none."""
    shown = amount(value, currency)
    return f"{shown} {currency}".rstrip() if shown else ""


def admin_url(name: str, object_id: Any) -> str:
    """The console page ``admin:<name>`` of one object. Its id is quoted as the admin
    quotes it: the admin reads ``_3A`` in a path as ``:``, so ``wh_3A9…`` reversed raw
    opened no page at all."""
    return reverse(f"admin:{name}", args=[quote(object_id)])


def customer_link(customer: Any) -> SafeString:
    """A customer in a list: its name, linked to its page, its id on hover. Names wrap
    between words; ``Name (CUST-<16 characters>)`` took three lines of a column."""
    url = admin_url("customers_customer_change", customer.pk)
    return format_html('<a href="{}" title="{}">{}</a>', url, customer.pk, customer.name)


def pretty_json(value: Any) -> SafeString:
    """``value`` as indented JSON that wraps long strings (tokens) instead of running off
    the page; each Unix time is followed by its date."""
    text = json.dumps(value, indent=2, sort_keys=True, default=str)

    def dated(match: re.Match) -> str:
        seconds = int(match[3])
        when = utc_time(seconds) or ("no end" if match[2] == "exp" else "none")
        return f"{match[0]}  // {when}"

    return format_html('<pre class="svc-json">{}</pre>', _TIME_LINE.sub(dated, text))
