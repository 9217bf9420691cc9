"""Input and output of the payment endpoints (issue 43): a payment recorded against an
invoice, an invoice's payments with its state and balance, and a bank statement's
import report."""

from __future__ import annotations

import re
from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing import balances
from billing.camt053 import MAX_BYTES
from config.api.fields import (
    BodyIn,
    InCurrency,
    MoneyField,
    StrictBooleanField,
    StrictCharField,
    UnixField,
)
from svccore import money

_AMOUNT = re.compile(r"\A-?[0-9]{1,15}(\.[0-9]{1,3})?\Z")


class AmountField(StrictCharField):
    """An amount written as a string ("1234.50") or an integer, never a float (which
    has already lost the exact value); the service checks its decimals against the
    invoice's currency."""

    default_error_messages = {
        "amount": 'must be a decimal number as a string (e.g. "1234.50") or an integer',
    }

    def to_internal_value(self, data):
        if isinstance(data, int) and not isinstance(data, bool):
            data = str(data)
        if not isinstance(data, str) or not _AMOUNT.match(data.strip()):
            self.fail("amount")
        return data.strip()


class PaymentIn(BodyIn):
    amount = AmountField(
        help_text="In the invoice's currency, exact to its minor unit (JPY 0, EUR 2, KWD 3 "
        "decimals); negative: a correcting entry, which needs a note."
    )
    paid_on = serializers.DateField(
        required=False, help_text="YYYY-MM-DD (UTC); default: today. Not in the future."
    )
    reference = StrictCharField(
        max_length=200, required=False, allow_blank=True, default="",
        help_text="The bank's or the customer's reference.",
    )  # fmt: skip
    note = StrictCharField(max_length=300, required=False, allow_blank=True, default="")


class PaymentOut(InCurrency):
    id = serializers.IntegerField()
    invoice_number = serializers.CharField(source="invoice.number")
    amount = MoneyField(max_digits=16, decimal_places=3)
    currency = serializers.CharField()
    paid_on = serializers.DateField()
    reference = serializers.CharField(allow_blank=True)
    source = serializers.CharField(help_text="manual or camt053.")
    bank_entry_id = serializers.CharField(allow_null=True)
    recorded_by = serializers.CharField(allow_blank=True)
    recorded_at = UnixField(help_text="Unix seconds.")
    note = serializers.CharField(allow_blank=True)


class StandingOut(InCurrency):
    """An invoice's state and balance (:mod:`billing.balances`)."""

    invoice_number = serializers.CharField(source="number")
    currency = serializers.CharField()
    gross_total = MoneyField(max_digits=16, decimal_places=3)
    state = serializers.SerializerMethodField(
        help_text="open, partly_paid, paid, overdue or void (fully credited)."
    )
    balance = serializers.SerializerMethodField(
        help_text="Gross total, plus credit notes (negative), minus payments; negative: "
        "overpaid (a credit)."
    )
    due_at = serializers.SerializerMethodField(help_text="Unix seconds.")

    @extend_schema_field(serializers.ChoiceField(choices=balances.STATES))
    def get_state(self, invoice) -> str:
        return balances.standing_of(invoice).state

    @extend_schema_field({"type": "number"})
    def get_balance(self, invoice) -> Decimal:
        return money.amount(balances.standing_of(invoice).balance, invoice.currency)

    @extend_schema_field(serializers.IntegerField())
    def get_due_at(self, invoice) -> int:
        return int(balances.standing_of(invoice).due.timestamp())


class InvoicePaymentsOut(serializers.Serializer):
    invoice = StandingOut()
    payments = PaymentOut(many=True, help_text="Oldest first.")


class StatementIn(BodyIn):
    statement = StrictCharField(
        max_length=MAX_BYTES,
        trim_whitespace=False,
        help_text="The CAMT.053 XML document (camt.053.001.02 to .08), as text.",
    )
    dry_run = StrictBooleanField(
        required=False, default=False, help_text="Report what would be imported; import nothing."
    )


@extend_schema_field({"type": "number"})
class AmountOut(serializers.Field):
    """An amount the service already wrote with its currency's decimals (a Decimal),
    rendered digit for digit as a JSON number."""

    def __init__(self, **kwargs) -> None:
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, value):
        return value


class StatementEntryPaymentOut(serializers.Serializer):
    invoice_number = serializers.CharField()
    amount = AmountOut()
    balance = AmountOut(help_text="The invoice's balance after the payment.")
    state = serializers.CharField()


class StatementEntryOut(serializers.Serializer):
    entry_id = serializers.CharField(help_text="The bank's reference: imported once.")
    outcome = serializers.ChoiceField(choices=["matched", "already_imported", "unmatched"])
    reason = serializers.CharField(allow_blank=True)
    amount = AmountOut()
    currency = serializers.CharField()
    booked_on = serializers.CharField()
    debtor = serializers.CharField(allow_blank=True)
    remittance = serializers.CharField(allow_blank=True)
    invoice_numbers = serializers.ListField(child=serializers.CharField())
    payments = StatementEntryPaymentOut(many=True)


class StatementSummaryOut(serializers.Serializer):
    statement_id = serializers.CharField()
    account = serializers.CharField(allow_blank=True)
    entries = serializers.IntegerField()


class StatementImportOut(serializers.Serializer):
    statements = StatementSummaryOut(many=True)
    entries = StatementEntryOut(many=True)
    matched = serializers.IntegerField()
    already_imported = serializers.IntegerField()
    unmatched = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text="Debits and entries not booked.")
    dry_run = serializers.BooleanField()
