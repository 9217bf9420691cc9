"""What is owed on each issued invoice (issue 43): its state and balance, read in bulk.

An invoice's balance is its gross total, plus its credit notes' (negative) gross totals,
minus the payments recorded against it. What it has been credited is summed over
``Invoice.objects.filter(kind="credit_note", credits=invoice)``: one credit note in
full, or several partial ones, alike. Its state:

- ``void``: its credit notes leave nothing to pay (a payment made before is then a
  credit owed back: the balance is negative);
- ``paid``: the balance is 0 or less (less: overpaid, a credit);
- ``overdue``: past its due date with a balance left, partly paid or not (the balance
  says how much is left);
- ``partly_paid``: not yet due, some paid, a balance left;
- ``open``: not yet due, nothing paid.

Lists annotate their queryset with :func:`with_balances` (two correlated sums in the
one query, never one query per row) and read :func:`standing_of` per row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import (
    DecimalField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from billing.models import Invoice
from billing.payment_models import Payment
from config import clock

_MONEY = DecimalField(max_digits=18, decimal_places=3)
ZERO = Decimal("0")


class State:
    OPEN = "open"
    PARTLY_PAID = "partly_paid"
    PAID = "paid"
    OVERDUE = "overdue"
    VOID = "void"


STATES = (State.OPEN, State.PARTLY_PAID, State.PAID, State.OVERDUE, State.VOID)
STATE_LABELS = {
    State.OPEN: "open",
    State.PARTLY_PAID: "partly paid",
    State.PAID: "paid",
    State.OVERDUE: "overdue",
    State.VOID: "void (credited)",
}


def _credited_sum() -> Subquery:
    notes = (
        Invoice.objects.filter(kind=Invoice.Kind.CREDIT_NOTE, credits=OuterRef("pk"))
        .order_by()
        .values("credits")
        .annotate(sum=Sum(F("total") + F("tax_total"), output_field=_MONEY))
        .values("sum")
    )
    return Subquery(notes, output_field=_MONEY)


def _paid_sum() -> Subquery:
    paid = (
        Payment.objects.filter(invoice=OuterRef("pk"))
        .order_by()
        .values("invoice")
        .annotate(sum=Sum("amount"))
        .values("sum")
    )
    return Subquery(paid, output_field=_MONEY)


def with_balances(documents: QuerySet) -> QuerySet:
    """``documents`` with ``credited_sum``, ``paid_sum``, ``remaining`` (after credits)
    and ``balance`` on each row, in the same query."""
    return documents.annotate(
        credited_sum=Coalesce(_credited_sum(), Value(ZERO), output_field=_MONEY),
        paid_sum=Coalesce(_paid_sum(), Value(ZERO), output_field=_MONEY),
    ).annotate(
        remaining=ExpressionWrapper(
            F("total") + F("tax_total") + F("credited_sum"), output_field=_MONEY
        ),
        balance=ExpressionWrapper(F("remaining") - F("paid_sum"), output_field=_MONEY),
    )


def terms() -> dt.timedelta:
    return dt.timedelta(days=settings.SVC_PAYMENT_TERMS_DAYS)


def days_overdue(due: dt.datetime, now: dt.datetime) -> int:
    """Whole days past ``due``, at least 1 once it has passed (0: not yet due)."""
    if now <= due:
        return 0
    return max(1, (now - due) // dt.timedelta(days=1))


@dataclass(frozen=True)
class Standing:
    state: str
    balance: Decimal
    paid: Decimal
    credited: Decimal
    due: dt.datetime
    days_overdue: int

    @property
    def label(self) -> str:
        return STATE_LABELS[self.state]

    @property
    def payable(self) -> bool:
        return self.balance > 0 and self.state != State.VOID


def standing_from(
    *,
    gross: Decimal,
    credited: Decimal,
    paid: Decimal,
    issued_at: dt.datetime,
    now: dt.datetime,
) -> Standing:
    """The state rule, once, from the sums."""
    remaining = gross + credited
    balance = remaining - paid
    due = issued_at + terms()
    late = days_overdue(due, now)
    if credited and remaining <= 0:
        state = State.VOID
    elif balance <= 0:
        state = State.PAID
    elif late:
        state = State.OVERDUE
    elif paid > 0:
        state = State.PARTLY_PAID
    else:
        state = State.OPEN
    return Standing(state, balance, paid, credited, due, late if balance > 0 else 0)


def standing_of(
    invoice: Invoice, now: dt.datetime | None = None, *, fresh: bool = False
) -> Standing | None:
    """``invoice``'s state and balance; None for a credit note. Reads the annotations of
    :func:`with_balances` when the row has them, else (or ``fresh``: a write since the
    row was read) sums them (two queries)."""
    if invoice.kind != Invoice.Kind.INVOICE:
        return None
    now = now or clock.now()
    credited = None if fresh else getattr(invoice, "credited_sum", None)
    paid = None if fresh else getattr(invoice, "paid_sum", None)
    if credited is None or paid is None:
        credited = (
            Invoice.objects.filter(kind=Invoice.Kind.CREDIT_NOTE, credits=invoice).aggregate(
                sum=Sum(F("total") + F("tax_total"), output_field=_MONEY)
            )["sum"]
            or ZERO
        )
        paid = Payment.objects.filter(invoice=invoice).aggregate(sum=Sum("amount"))["sum"] or ZERO
    return standing_from(
        gross=invoice.gross_total,
        credited=credited,
        paid=paid,
        issued_at=invoice.issued_at,
        now=now,
    )


def state_filter(state: str, now: dt.datetime | None = None) -> Q:
    """The rows of a :func:`with_balances` queryset in ``state`` (invoices only): the
    rule of :func:`standing_from` as a WHERE clause, for a list filtered by state."""
    now = now or clock.now()
    due_before = now - terms()  # issued before: due before now, so overdue
    live = Q(kind=Invoice.Kind.INVOICE) & ~(~Q(credited_sum=0) & Q(remaining__lte=0))
    if state == State.VOID:
        return Q(kind=Invoice.Kind.INVOICE) & ~Q(credited_sum=0) & Q(remaining__lte=0)
    if state == State.PAID:
        return live & Q(balance__lte=0)
    if state == State.OVERDUE:
        return live & Q(balance__gt=0, issued_at__lt=due_before)
    if state == State.PARTLY_PAID:
        return live & Q(balance__gt=0, paid_sum__gt=0, issued_at__gte=due_before)
    if state == State.OPEN:
        return live & Q(balance__gt=0, paid_sum__lte=0, issued_at__gte=due_before)
    raise ValueError(f"unknown state {state!r}")


AGE_BUCKETS = ("not yet due", "1-30", "31-60", "61-90", "over 90")


def _bucket(late: int) -> str:
    if late <= 0:
        return AGE_BUCKETS[0]
    if late <= 30:
        return AGE_BUCKETS[1]
    if late <= 60:
        return AGE_BUCKETS[2]
    if late <= 90:
        return AGE_BUCKETS[3]
    return AGE_BUCKETS[4]


def receivables_by_age(now: dt.datetime | None = None) -> dict[str, dict[str, Decimal]]:
    """What customers owe, per currency and age (not yet due, 1-30, 31-60, 61-90, over
    90 days overdue), in one query whatever the number of invoices."""
    now = now or clock.now()
    rows = (
        with_balances(Invoice.objects.filter(kind=Invoice.Kind.INVOICE))
        .filter(balance__gt=0)
        .exclude(~Q(credited_sum=0) & Q(remaining__lte=0))
        .order_by()
        .values_list("currency", "issued_at", "balance")
    )
    ages: dict[str, dict[str, Decimal]] = {}
    for currency, issued_at, balance in rows:
        row = ages.setdefault(currency, {bucket: ZERO for bucket in AGE_BUCKETS})
        row[_bucket(days_overdue(issued_at + terms(), now))] += balance
    return dict(sorted(ages.items()))
