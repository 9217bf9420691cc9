"""Invoice periods: contiguous, non-overlapping, and over before they are invoiced.

A customer's invoices (per currency) cover contiguous, non-overlapping periods: each
starts where the customer's latest invoice that no credit note reverses ended; the first
starts ``period_days`` before its end. An end is 00:00 UTC of a day no later than today,
so a period is invoiced only once it is over. Without an explicit end (a scheduled run)
the period ends today and is issued only once it is ``period_days`` long, so a daily job
with ``--period-days 30`` issues every 30 days. Anything else is refused naming the
invoice it conflicts with. :mod:`billing.issuing` asks here under the customer's row
lock; the unique (customer, period_start, revision) constraint backs it.
"""

from __future__ import annotations

import datetime as dt

from billing.limits import is_midnight, start_of_day
from billing.models import Invoice
from config.errors import Conflict, InvalidInput
from svccore import dates


class InvoiceAlreadyIssued(Conflict):
    """The period asked for is (partly) covered by an issued invoice: ``overlap`` when
    its end lies inside an issued period, not when it is the end already invoiced to
    (a re-run)."""

    def __init__(self, detail: str, *, overlap: bool = False) -> None:
        super().__init__(detail)
        self.overlap = overlap


class InvoiceNotDue(Conflict):
    """A scheduled run found the customer's open period shorter than ``period_days``."""


class PeriodNotOver(Conflict):
    """The period would end after today: what happens later in it could not be billed."""


def in_currency(currency: str | None) -> str:
    """`` in EUR`` in a refusal that names the currency, or nothing."""
    return f" in {currency}" if currency else ""


def reissued():
    """The ids of invoices a credit note reversed whole, events included (neither partial
    nor price only): their periods are issued again. A partly or price-only credited
    invoice stands, and the next period starts where it ends."""
    return Invoice.objects.filter(
        kind=Invoice.Kind.CREDIT_NOTE, partial=False, price_only=False
    ).values("credits_id")


def open_invoice(*, customer_id: str, currency: str | None = None) -> Invoice | None:
    """The customer's latest invoice (in ``currency``, when given) that no credit note
    reverses whole (:func:`reissued`): the next period in that currency starts where it
    ends."""
    invoices = Invoice.objects.filter(customer_id=customer_id, kind=Invoice.Kind.INVOICE).exclude(
        pk__in=reissued()
    )
    if currency:
        invoices = invoices.filter(currency=currency)
    return invoices.order_by("-period_end", "-issued_at").first()


def check_period_end(end: dt.datetime, *, now: dt.datetime) -> None:
    """An invoice period ends at 00:00 UTC of a day no later than today."""
    if end.tzinfo is None or not is_midnight(end):
        raise InvalidInput(
            f"an invoice period ends at 00:00 UTC of a day; {end.isoformat()} is not one"
        )
    today = start_of_day(now)
    if end > today:
        raise PeriodNotOver(
            f"a period whose last day is {dates.day(dates.last_day(end))} is not over (today "
            f"is {dates.day(today)}); "
            "usage and activations later in it could never be billed"
        )


def invoice_period(
    *,
    customer_id: str,
    period_days: int,
    end: dt.datetime | None,
    now: dt.datetime,
    currency: str | None = None,
    named: bool = False,
) -> tuple[dt.datetime, dt.datetime]:
    """(start, end) of the customer's next invoice in ``currency``, or the reason there
    is none. Each currency's invoices cover contiguous periods of their own; ``named``
    puts the currency in the reasons (a customer buying in several)."""
    scheduled = end is None
    end = start_of_day(now) if end is None else end
    check_period_end(end, now=now)
    previous = open_invoice(customer_id=customer_id, currency=currency)
    shown = in_currency(currency) if named else ""
    if previous is None:
        return end - dt.timedelta(days=period_days), end
    start = previous.period_end
    covered = f"{previous.number} covers {dates.period(previous.period_start, previous.period_end)}"
    if end <= start:
        raise InvoiceAlreadyIssued(
            f"customer {customer_id} was already invoiced{shown} through "
            f"{dates.day(dates.last_day(start))} ({covered}); the next invoice starts on "
            f"{dates.day(start)}",
            overlap=end < start,
        )
    if scheduled and end - start < dt.timedelta(days=period_days):
        raise InvoiceNotDue(
            f"customer {customer_id}'s next {period_days}-day invoice{shown} is due on "
            f"{dates.day(start + dt.timedelta(days=period_days))} ({covered})"
        )
    return start, end
