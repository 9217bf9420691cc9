"""Payment reminders (issue 43): an invoice past its due date with a balance left gets
``invoice.overdue`` once, and the reminders of ``SVC_REMINDER_DAYS`` (days past due of the
first, second and final one) e-mailed to its customer's contact, each once.

A reminder is claimed by inserting its :class:`PaymentReminder` row (unique per invoice
and level) in the transaction that sends it: a second worker's insert waits for the
first's commit and then finds the row, so two workers never send the same reminder; a
send that fails rolls the claim back and the next run tries again. When a run finds an
invoice further overdue than one reminder (the schedule changed, the worker was down),
it sends the highest level due only, never a backlog of lower ones.

The webhook worker (``deliver_events``) runs this every minute as a part of the
scheduled pass (:mod:`events.scan`); ``manage.py send_reminders`` runs it once.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction

from billing import balances
from billing.downloads import facturx_pdf
from billing.models import Invoice
from billing.payment_models import PaymentReminder
from config import clock
from events.models import Event
from events.scan import ScanResult, event_once, scan_pass
from svccore import dates, money

log = logging.getLogger(__name__)

LEVELS = {1: "first reminder", 2: "second reminder", 3: "final reminder"}


@dataclass
class ReminderRun:
    overdue_events: int = 0
    sent: list[tuple[str, int]] = field(default_factory=list)
    no_address: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def level_due(late: int, schedule: tuple[int, ...]) -> int:
    """The highest reminder level ``late`` days past due has reached (0: none)."""
    return sum(1 for day in schedule if late >= day)


def level_name(level: int, schedule: tuple[int, ...]) -> str:
    return "final reminder" if level == len(schedule) else LEVELS.get(level, "reminder")


def overdue_data(invoice: Invoice, standing: balances.Standing) -> dict:
    return {
        "invoice_number": invoice.number,
        "customer_id": invoice.customer_id,
        "total": str(money.amount(invoice.gross_total, invoice.currency)),
        "balance": str(money.amount(standing.balance, invoice.currency)),
        "currency": invoice.currency,
        "due_at": int(standing.due.timestamp()),
        "days_overdue": standing.days_overdue,
    }


def _address(invoice: Invoice) -> str:
    contact = (invoice.customer.contact or "").strip()
    return contact if "@" in contact and " " not in contact else ""


def _message(invoice: Invoice, standing: balances.Standing, level: int, address: str):
    schedule = settings.SVC_REMINDER_DAYS
    name = level_name(level, schedule)
    currency = invoice.currency
    subject = f"{name.capitalize()}: invoice {invoice.number} is overdue"
    body = (
        f"Dear {invoice.customer.name},\n\n"
        f"our invoice {invoice.number} of {dates.day(invoice.issued_at)} was due on "
        f"{dates.day(standing.due)} and is {standing.days_overdue} day(s) overdue.\n"
        f"Total {money.amount(invoice.gross_total, currency)} {currency}, paid "
        f"{money.amount(standing.paid, currency)} {currency}, "
        f"balance due {money.amount(standing.balance, currency)} {currency}.\n\n"
        f"Please pay the balance to IBAN {settings.SVC_SELLER_IBAN or '(see the invoice)'}"
        f" naming {invoice.number} in the remittance information. If you have paid in the "
        "meantime, please disregard this reminder.\n\n"
        f"{settings.SVC_SELLER_NAME}\n"
    )
    if level == len(schedule):
        body = body.replace("Please pay", "This is our final reminder. Please pay", 1)
    message = EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [address])
    try:
        message.attach(f"{invoice.number}.pdf", facturx_pdf(invoice), "application/pdf")
    except Exception as problem:  # the reminder matters more than its attachment
        log.warning("reminder of %s sent without its PDF: %s", invoice.number, problem)
    return message


def _send_one(invoice: Invoice, standing: balances.Standing, level: int, address: str,
              now: dt.datetime) -> bool:  # fmt: skip
    """Claim and send one reminder; False when another run claimed it first."""
    try:
        with transaction.atomic():
            PaymentReminder.objects.create(
                invoice=invoice,
                level=level,
                sent_at=now,
                address=address,
                days_overdue=standing.days_overdue,
            )
            _message(invoice, standing, level, address).send()
    except IntegrityError:
        return False
    return True


def overdue_invoices(now: dt.datetime):
    return (
        balances.with_balances(Invoice.objects.select_related("customer"))
        .filter(balances.state_filter(balances.State.OVERDUE, now))
        .order_by("issued_at", "id")
    )


def reminders_send(now: dt.datetime | None = None, result: ScanResult | None = None) -> ReminderRun:
    """Write ``invoice.overdue`` for each newly overdue invoice and send every reminder
    that is due and not yet sent."""
    now = now or clock.now()
    result = result or ScanResult()
    run = ReminderRun()
    schedule = settings.SVC_REMINDER_DAYS
    invoices = list(overdue_invoices(now))
    sent_levels: dict[int, int] = {}
    for invoice_id, level in PaymentReminder.objects.filter(
        invoice_id__in=[invoice.pk for invoice in invoices]
    ).values_list("invoice_id", "level"):
        sent_levels[invoice_id] = max(level, sent_levels.get(invoice_id, 0))
    for invoice in invoices:
        standing = balances.standing_of(invoice, now)
        assert standing is not None
        before = result.written.get(Event.Type.INVOICE_OVERDUE, 0)
        with transaction.atomic():
            event_once(
                result,
                Event.Type.INVOICE_OVERDUE,
                customer_id=invoice.customer_id,
                data=overdue_data(invoice, standing),
                once_key=f"invoice.overdue:{invoice.number}",
            )
        run.overdue_events += result.written.get(Event.Type.INVOICE_OVERDUE, 0) - before
        level = level_due(standing.days_overdue, schedule)
        if not level or sent_levels.get(invoice.pk, 0) >= level:
            continue
        address = _address(invoice)
        if not address:
            run.no_address.append(invoice.number)
            continue
        try:
            if _send_one(invoice, standing, level, address, now):
                run.sent.append((invoice.number, level))
        except Exception as problem:  # SMTP down: the claim rolled back, next run retries
            log.warning("reminder of %s not sent: %s", invoice.number, type(problem).__name__)
            run.failed.append(invoice.number)
    return run


@scan_pass
def reminders_scan(result: ScanResult, now: dt.datetime) -> None:
    """The reminders as a part of the scheduled pass (every minute in the worker)."""
    run = reminders_send(now, result)
    for _number, _level in run.sent:
        result.count("payment.reminder")
