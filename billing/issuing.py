"""Issuing invoices: the customer's next period (:mod:`billing.periods`), a gapless
``INV-<year>-<seq>`` number, and the ledger (:mod:`billing.ledger`) deciding what the
invoice bills; a draft of one (issued and rolled back); and the run that issues every
customer's. Credit notes live in :mod:`billing.credit_notes`; what both share (numbers,
the customer's lock, lines, the event) in :mod:`billing.document_writes`.
"""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal
from typing import Any, NamedTuple

from django.db import DatabaseError, transaction
from django.db.models import Count, F, Min, Sum

from audit.services import audited
from billing import ledger, limits, rating, vat
from billing.document_writes import (
    SERIES,
    document_as_drafted,
    document_event,
    locked_customer,
    next_number,
    store_lines,
)
from billing.documents import require_seller
from billing.limits import start_of_day
from billing.models import Invoice, InvoiceUsage, UsageDaily
from billing.periods import (
    InvoiceAlreadyIssued,
    InvoiceNotDue,
    check_period_end,
    in_currency,
    invoice_period,
)
from billing.periods import open_invoice as open_invoice  # console.admin, portal.selectors
from config.drafts import drafted
from config.errors import Conflict, InvalidInput, MisconfiguredService, ServiceError
from customers.models import Customer
from customers.services import customer_get
from events.models import Event
from licensing.models import Activation, License
from svccore import dates, money

log = logging.getLogger(__name__)


class NothingToInvoice(InvalidInput):
    pass


class TotalChanged(Conflict):
    """The invoice would not total what the operator confirmed (usage arrived since)."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _nothing_owed(
    customer_id: str, start: dt.datetime, end: dt.datetime, taken, currency: str | None
) -> str:
    """Why an invoice for (start, end) would be empty, with the numbers: what it held, and
    what of the customer's activity lies after ``end`` (today's, on a fresh install) and
    the first day a period holding it can be issued."""
    inferences = sum(meter.inferences + meter.late_inferences for meter in taken.meters.values())
    renewals = sum(row.renewals for row in taken.renewals)
    addons = sum(row.licenses for row in taken.addons)
    conversions = len(taken.conversions)
    held = (
        f"{_plural(sum(row.units for row in taken.activations), 'new activation')}, "
        f"{_plural(sum(row.licenses for row in taken.directs), 'direct licence')}, "
        + (f"{_plural(renewals, 'renewal')}, " if renewals else "")
        + (f"{_plural(addons, 'add-on charge')}, " if addons else "")
        + (f"{_plural(conversions, 'trial conversion')}, " if conversions else "")
        + f"{inferences:,} inferences{' within the allowance' if inferences else ''}"
    )
    activations = Activation.objects.filter(
        batch__customer_id=customer_id, transfer_of__isnull=True, trial=False, activated_at__gte=end
    ).aggregate(n=Count("id"), first=Min("activated_at"))
    directs = (
        License.objects.filter(customer_id=customer_id, kind=License.Kind.DIRECT)
        .filter(issued_at__gte=end)
        .exclude(device_id="*")
        .aggregate(n=Count("id"), first=Min("issued_at"))
    )
    usage = (
        UsageDaily.objects.filter(customer_id=customer_id, day__gte=end.date())
        .exclude(records=F("billed_records"))
        .aggregate(n=Sum(F("records") - F("billed_records")), first=Min("day"))
    )
    reason = (
        f"customer {customer_id} owes nothing{in_currency(currency)} for "
        f"{dates.period(start, end)} ({held})"
    )
    firsts = [
        start_of_day(moment) if isinstance(moment, dt.datetime) else limits.midnight(moment)
        for moment in (activations["first"], directs["first"], usage["first"])
        if moment is not None
    ]
    if not firsts:
        return f"{reason}; no invoice issued"
    ready = min(firsts) + dt.timedelta(days=1)
    later = ", ".join(
        [
            _plural(activations["n"], "activation"),
            _plural(directs["n"], "direct licence"),
            _plural(usage["n"] or 0, "usage record"),
        ]
    )
    return (
        f"{reason}; no invoice issued. Its {later} from {dates.day(end)} on fall after "
        f"this period: a period ends with a day before today (00:00 UTC), so they can "
        f"be invoiced from {dates.day(ready)}, in a period ending then or later"
    )


@audited("invoice.issue")
@transaction.atomic
def invoice_issue(
    *,
    customer_id: str,
    period_days: int = 30,
    end: dt.datetime | None = None,
    now: dt.datetime | None = None,
    expected_total: Decimal | None = None,
    currency: str | None = None,
) -> Invoice:
    """Issue the customer's next invoice in ``currency``: the period from where the
    last one in that currency ended (the first: ``period_days`` before ``end``) to
    ``end`` (default: today 00:00 UTC, once the period is ``period_days`` long), billing
    every event in that currency the ledger attributes to it, numbered
    ``INV-<year>-<seq>`` without gaps. Without ``currency``, the only one the customer
    buys in; a customer buying in several gets one invoice per currency, each asked for
    by name (:class:`billing.rating.SeveralCurrencies` otherwise, a 409).

    Refused: an end that is not 00:00 UTC (InvalidInput), after today (PeriodNotOver),
    not after the last invoice's end (InvoiceAlreadyIssued), a scheduled period not yet
    due (InvoiceNotDue), a zero total (NothingToInvoice; the events keep waiting), a
    total other than ``expected_total`` when given (TotalChanged: what the operator
    confirmed is what is issued, or nothing); no seller set (SellerNotSet).
    """
    require_seller()
    now = now or limits.now()
    period_days = rating.check_period_days(period_days)
    customer = locked_customer(customer_id)
    entries = rating.catalogue_entries()
    currency = rating.billing_currency(customer.id, currency, entries)
    # Messages name the currency of a customer who buys in several.
    named = len(rating.currencies(customer.id, entries)) > 1
    start, end = invoice_period(
        customer_id=customer.id,
        period_days=period_days,
        end=end,
        now=now,
        currency=currency,
        named=named,
    )
    revision = Invoice.objects.filter(
        customer=customer, kind=Invoice.Kind.INVOICE, period_start=start, currency=currency
    ).count()
    year = now.astimezone(dt.UTC).year
    seq = next_number(SERIES[Invoice.Kind.INVOICE], year)
    number = f"INV-{year}-{seq:06d}"
    _check_usage_skus(customer.id, end, entries)
    taken = ledger.take(
        document=number,
        customer_id=customer.id,
        start=start,
        end=end,
        currency=currency,
        usage_skus=sorted(
            sku for sku, priced in rating.usage_currencies(entries).items() if priced == currency
        ),
    )
    rated = rating.rated(
        customer_id=customer.id,
        start=start,
        end=end,
        activations=taken.activations,
        directs=taken.directs,
        meters=taken.meters,
        entries=entries,
        currency=currency,
        renewals=taken.renewals,
        addons=taken.addons,
        conversions=taken.conversions,
    )
    if not rated["total"]:
        raise NothingToInvoice(
            _nothing_owed(customer.id, start, end, taken, currency if named else None)
        )
    if expected_total is not None and rated["total"] != expected_total:
        raise TotalChanged(
            f"the invoice of {customer.id} for {dates.period(start, end)} now totals "
            f"{money.amount(rated['total'], currency)} {currency}, not the "
            f"{money.amount(expected_total, currency)} {currency} confirmed (usage or "
            "activations arrived since the preview); nothing was issued: review it again"
        )
    taxes, tax_fields = vat.invoice_tax_apply(
        customer=customer, lines=rated["lines"], currency=currency, on=now.astimezone(dt.UTC).date()
    )
    invoice = Invoice.objects.create(
        kind=Invoice.Kind.INVOICE,
        number=number,
        year=year,
        seq=seq,
        customer=customer,
        period_start=start,
        period_end=end,
        period_days=(end - start).days,
        currency=currency,
        total=rated["total"],
        issued_at=now,
        revision=revision,
        **tax_fields,
    )
    store_lines(invoice, rated["lines"])
    vat.invoice_tax_store(invoice, taxes)
    InvoiceUsage.objects.bulk_create(
        InvoiceUsage(
            invoice=invoice,
            sku=meter.sku,
            units=meter.units,
            allowance=meter.allowance,
            inferences=meter.inferences,
            records=meter.records,
            late_inferences=meter.late_inferences,
            late_records=meter.late_records,
        )
        for meter in taken.meters.values()
    )
    document_event(Event.Type.INVOICE_ISSUED, invoice)
    return invoice


def _check_usage_skus(customer_id: str, end: dt.datetime, entries: dict[str, dict]) -> None:
    """Usage waiting to be billed of a SKU the catalogue lacks has no price nor currency:
    refused, naming it, rather than left waiting unseen."""
    waiting = set(
        UsageDaily.objects.filter(customer_id=customer_id, day__lt=end.date())
        .exclude(records=F("billed_records"), inferences=F("billed_inferences"))
        .values_list("sku", flat=True)
        .distinct()
    )
    missing = sorted(waiting - set(entries))
    if missing:
        raise MisconfiguredService(
            f"customer {customer_id} has usage of SKU {', '.join(missing)}, which is not in "
            "the catalogue; restore the catalogue entry to rate this invoice"
        )


def invoice_draft(
    *,
    customer_id: str,
    period_days: int = 30,
    end: dt.datetime | None = None,
    currency: str | None = None,
) -> dict[str, Any]:
    """What :func:`invoice_issue` would issue now for the customer, with the same
    arguments: the period and every line, computed by issuing it and rolling back
    (:func:`config.drafts.drafted`: its number, ledger entries, event and audit entry go
    with it). Raises what issuing would (nothing owed, not due, an overlap).

    ``{customer_id, period_start, period_end, period_days, currency, total, lines}``, as
    :func:`billing.rating.rated` shapes a preview (Unix seconds)."""

    return drafted(
        lambda: invoice_issue(
            customer_id=customer_id, period_days=period_days, end=end, currency=currency
        ),
        document_as_drafted,
    )


def customer_currencies(*, customer_id: str) -> list[str]:
    """The currencies the customer buys in, sorted (one invoice each per period)."""
    customer = customer_get(customer_id=customer_id)
    return rating.currencies(customer.id, rating.catalogue_entries())


class IssueResult(NamedTuple):
    """One customer's outcome of :func:`invoice_issue_all`."""

    customer_id: str
    invoice: Invoice | None
    note: str
    # The period asked for overlaps an issued invoice (an explicit end inside it).
    overlap: bool = False
    # Issuing was refused for a reason other than "nothing owed" or "not due": a ledger
    # that disagrees with itself, a SKU missing from the catalogue, the database refusing
    # a write. ``note`` says why; the run went on with the other customers.
    refused: bool = False


def invoice_issue_all(
    *,
    period_days: int,
    end: dt.datetime | None = None,
    customer_id: str | None = None,
    now: dt.datetime | None = None,
) -> list[IssueResult]:
    """Issue the next invoice of every customer (or one) that owes something, one per
    currency the customer buys in. Returns an :class:`IssueResult` per customer and
    currency considered; each invoice commits on its own, so one refusal does not undo
    the others. An end that no customer could be invoiced to is refused before any is
    tried.

    A customer already invoiced up to ``end`` (a re-run), or whose scheduled period is
    not yet due, is noted and skipped. An ``end`` inside an issued period is an overlap:
    for one customer it raises :class:`InvoiceAlreadyIssued` (the API's 409 and its
    message); for every customer the others are still issued and the overlap is noted
    (``manage.py issue_invoices`` exits 1 on it). Any other refusal (a ledger that
    disagrees with its counters, a SKU missing from the catalogue, a write the database
    refuses) is noted as ``refused`` with its reason and the run goes on with the
    others: one customer's broken ledger never holds back another's invoice."""
    now = now or limits.now()
    if end is not None:
        check_period_end(end, now=now)
    rating.check_period_days(period_days)
    ids = (
        [customer_id]
        if customer_id
        else Customer.objects.order_by("id").values_list("id", flat=True)
    )
    entries = rating.catalogue_entries()
    out: list[IssueResult] = []
    for cid in ids:
        try:
            currencies = rating.currencies(customer_get(customer_id=cid).id, entries)
        except ServiceError:
            if customer_id:
                raise
            continue  # deleted since the list was read
        for currency in currencies:
            out.append(_issue_one(cid, currency, period_days, end, now, alone=bool(customer_id)))
    return out


def _issue_one(
    cid: str,
    currency: str,
    period_days: int,
    end: dt.datetime | None,
    now: dt.datetime,
    *,
    alone: bool,
) -> IssueResult:
    """One customer's invoice in one currency, or why there is none."""
    try:
        invoice = invoice_issue(
            customer_id=cid, period_days=period_days, end=end, now=now, currency=currency
        )
    except InvoiceAlreadyIssued as exc:
        if exc.overlap and alone:
            raise
        return IssueResult(cid, None, exc.detail, overlap=exc.overlap)
    except (InvoiceNotDue, NothingToInvoice) as exc:
        return IssueResult(cid, None, exc.detail)
    except ServiceError as exc:
        if alone:
            raise  # one customer asked for: its refusal is the answer
        log.warning("invoice of %s in %s refused: %s", cid, currency, exc.detail)
        return IssueResult(cid, None, exc.detail, refused=True)
    except DatabaseError as exc:
        # A guard of migration 0009 (or a constraint) refused a write: the customer's
        # transaction rolled back; its invoice waits for the ledger to be repaired.
        log.warning("invoice of %s in %s refused by the database: %s", cid, currency, exc)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return IssueResult(
            cid,
            None,
            f"the database refused the invoice ({reason}); nothing was issued to "
            "this customer. Run manage.py reconcile to see what disagrees",
            refused=True,
        )
    total = money.amount(invoice.total, invoice.currency)
    return IssueResult(cid, invoice, f"{invoice.number}: {total} {invoice.currency}")
