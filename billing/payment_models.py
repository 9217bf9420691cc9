"""Payments received against issued invoices, and the payment reminders sent (issue 43).

A payment is written once, like the documents it pays: a mistake is corrected by a
negative correcting entry (audited), never by editing or deleting a row. A bank
statement entry (CAMT.053) is imported once: its bank id is unique per invoice it paid.
A reminder row is the claim that the reminder of one level was sent for one invoice:
unique, so two workers never send it twice.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from billing.models import Invoice, _Immutable


class Payment(_Immutable):
    class Source(models.TextChoices):
        MANUAL = "manual", "Recorded by hand"
        CAMT053 = "camt053", "Bank statement (CAMT.053)"

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="payments")
    # In the invoice's currency, exact to its minor unit; negative: a correcting entry.
    amount = models.DecimalField(max_digits=18, decimal_places=3)
    currency = models.CharField(max_length=3)
    paid_on = models.DateField(help_text="Booking (or value) date of the payment.")
    reference = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MANUAL)
    bank_entry_id = models.CharField(  # noqa: DJ001 - NULL: recorded by hand, no bank id
        max_length=200,
        null=True,
        blank=True,
        help_text="The statement entry's bank reference (AcctSvcrRef, NtryRef or TxId): "
        "an entry is imported once.",
    )
    recorded_by = models.CharField(max_length=200, blank=True)
    recorded_at = models.DateTimeField(db_index=True)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["paid_on", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["bank_entry_id", "invoice"],
                condition=Q(bank_entry_id__isnull=False),
                name="payment_bank_entry_once",
            ),
            models.CheckConstraint(condition=~Q(amount=0), name="payment_not_zero"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id} {self.amount} {self.currency} {self.paid_on}"


class PaymentReminder(models.Model):
    """A reminder of ``level`` (1 first, 2 second, 3 final) sent for an invoice."""

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="reminders")
    level = models.PositiveSmallIntegerField()
    sent_at = models.DateTimeField()
    address = models.CharField(max_length=254, blank=True)
    days_overdue = models.PositiveIntegerField()

    class Meta:
        ordering = ["invoice", "level"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "level"], name="payment_reminder_once"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id} reminder {self.level}"
