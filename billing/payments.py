"""Recording payments against issued invoices (issue 43): by hand (the console, the
API, ``svcctl payment-record``, ``manage.py record_payment``) and from a bank statement
(:mod:`billing.statements`). Each writes one immutable :class:`Payment` row; a mistake is
undone by a negative correcting entry, itself audited. When a payment settles what an
invoice still owed, ``invoice.paid`` is written in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction

from audit.context import current_actor
from audit.services import audited
from billing import balances
from billing.document_writes import locked_customer
from billing.models import Invoice
from billing.payment_models import Payment
from config import clock
from config.errors import Conflict, InvalidInput, NotFound
from events.models import Event
from events.services import event_emit
from svccore import dates, money

REFERENCE_MAX = 200
AMOUNT_MAX = Decimal("999999999999999")  # 15 digits before the point: the column's


def exact_amount(value: Any, currency: str) -> Decimal:
    """``value`` as an amount of ``currency``, exact to its minor unit: 12.345 EUR is
    refused (not rounded: a payment is what the bank moved, to the cent)."""
    if isinstance(value, float | bool) or value is None:
        raise InvalidInput("amount must be a decimal number written as a string or an integer")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise InvalidInput(f"amount {str(value)[:40]!r} is not a number") from None
    if not amount.is_finite():
        raise InvalidInput("amount must be a finite number")
    places = money.minor_units(currency)
    if amount != amount.quantize(Decimal(1).scaleb(-places)):
        raise InvalidInput(
            f"amount {amount} has more decimals than {currency} has ({places}): a payment "
            "is exact to the minor unit"
        )
    if abs(amount) > AMOUNT_MAX:
        raise InvalidInput(f"amount {amount} is too large")
    if amount == 0:
        raise InvalidInput("amount must not be 0")
    return amount


def _invoice(number: str) -> Invoice:
    invoice = Invoice.objects.filter(number=number).first()
    if invoice is None:
        raise NotFound(f"invoice {number} does not exist")
    if invoice.kind != Invoice.Kind.INVOICE:
        raise InvalidInput(f"{number} is a credit note; payments are recorded against invoices")
    return invoice


def paid_event(invoice: Invoice, standing: balances.Standing, payment: Payment) -> None:
    event_emit(
        Event.Type.INVOICE_PAID,
        customer_id=invoice.customer_id,
        data={
            "invoice_number": invoice.number,
            "customer_id": invoice.customer_id,
            "total": str(money.amount(invoice.gross_total, invoice.currency)),
            "paid": str(money.amount(standing.paid, invoice.currency)),
            "balance": str(money.amount(standing.balance, invoice.currency)),
            "currency": invoice.currency,
            "paid_on": dates.iso_day(payment.paid_on),
            "reference": payment.reference,
        },
    )


def payment_write(
    *,
    invoice: Invoice,
    amount: Decimal,
    paid_on: dt.date,
    reference: str,
    source: str,
    bank_entry_id: str | None = None,
    note: str = "",
    now: dt.datetime | None = None,
) -> Payment:
    """Write one payment of a locked customer's invoice (the caller holds the lock and
    the transaction), and ``invoice.paid`` when it settles the balance."""
    before = balances.standing_of(invoice, now, fresh=True)
    assert before is not None
    payment = Payment.objects.create(
        invoice=invoice,
        amount=amount,
        currency=invoice.currency,
        paid_on=paid_on,
        reference=reference[:REFERENCE_MAX],
        source=source,
        bank_entry_id=bank_entry_id,
        recorded_by=current_actor().name[:200],
        recorded_at=now or clock.now(),
        note=note[:300],
    )
    after = balances.standing_of(invoice, now, fresh=True)
    assert after is not None
    if before.balance > 0 and after.balance <= 0 and after.state == balances.State.PAID:
        paid_event(invoice, after, payment)
    return payment


def _payment_target(result: Payment | None, arguments: dict[str, Any]) -> str:
    return arguments.get("number", "")


@audited("payment.record", target=_payment_target)
@transaction.atomic
def payment_record(
    *,
    number: str,
    amount: Any,
    paid_on: dt.date | None = None,
    reference: str = "",
    note: str = "",
    now: dt.datetime | None = None,
) -> Payment:
    """Record a payment of ``amount`` (the invoice's currency, exact to its minor unit)
    against invoice ``number``. A negative amount is a correcting entry (it needs a
    ``note`` saying why); an amount over the balance is recorded (an overpayment: the
    balance goes negative, a credit), never refused."""
    invoice = _invoice(number)
    locked_customer(invoice.customer_id)
    value = exact_amount(amount, invoice.currency)
    reference = reference.strip() if isinstance(reference, str) else ""
    note = note.strip() if isinstance(note, str) else ""
    if value < 0 and not note:
        raise InvalidInput("a correcting (negative) entry needs a note saying why")
    if value < 0:
        paid = balances.standing_of(invoice, now, fresh=True)
        if paid is not None and paid.paid + value < 0:
            raise Conflict(
                f"a correction of {-value} {invoice.currency} is more than the "
                f"{paid.paid} {invoice.currency} recorded against {number}"
            )
    today = (now or clock.now()).astimezone(dt.UTC).date()
    paid_on = paid_on or today
    if paid_on > today:
        raise InvalidInput(f"paid_on {paid_on} is in the future")
    if paid_on < invoice.issued_at.astimezone(dt.UTC).date() - dt.timedelta(days=366):
        raise InvalidInput(f"paid_on {paid_on} is over a year before {number} was issued")
    return payment_write(
        invoice=invoice,
        amount=value,
        paid_on=paid_on,
        reference=reference,
        source=Payment.Source.MANUAL,
        note=note,
        now=now,
    )


def payments_of(*, number: str) -> tuple[Invoice, list[Payment]]:
    """Invoice ``number`` (annotated with its balance) and its payments, oldest first."""
    invoice = (
        balances.with_balances(Invoice.objects.select_related("customer"))
        .filter(number=number)
        .first()
    )
    if invoice is None:
        raise NotFound(f"invoice {number} does not exist")
    if invoice.kind != Invoice.Kind.INVOICE:
        raise InvalidInput(f"{number} is a credit note; payments are recorded against invoices")
    return invoice, list(Payment.objects.filter(invoice=invoice).order_by("paid_on", "id"))
