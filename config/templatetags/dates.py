"""The template face of :mod:`svccore.dates`, built in to every template (settings
``TEMPLATES`` ``builtins``): ``{{ invoice.issued_at|day }}`` (``27 November 2026``),
``{{ invoice|period }}`` or ``{{ start|period:end }}`` (``1–30 November 2026``) and
``{{ key.created_at|moment }}`` (``27 November 2026, 14:05 UTC``). Templates format no
date themselves (tests/test_dates.py holds them to it)."""

from __future__ import annotations

from typing import Any

from django import template

from svccore import dates

register = template.Library()


@register.filter
def day(value: Any, none: str = "") -> str:
    return dates.day(value or None, none=none)


@register.filter
def moment(value: Any, none: str = "") -> str:
    return dates.moment(value or None, none=none)


@register.filter
def clock(value: Any) -> str:
    """``14:05 UTC``, where a page shows the day and the time apart."""
    return dates.clock(value) if value else ""


@register.filter
def period(value: Any, end: Any = None) -> str:
    """``start|period:end``, or ``document|period`` for anything with ``period_start`` and
    ``period_end`` (an invoice, a credit note, a rated preview's dict)."""
    if end is None:
        if isinstance(value, dict):
            value, end = value.get("period_start"), value.get("period_end")
        else:
            value, end = getattr(value, "period_start", None), getattr(value, "period_end", None)
    if not value or not end:
        return ""
    return dates.period(value, end)
