"""Request and response shapes of credit notes (issue 43 item 4): the body of
``POST /v1/admin/invoices/{number}/credit-note`` (and its ``/draft``) and the draft's
answer. The issued credit note answers as :class:`billing.serializers.InvoiceOut`."""

from __future__ import annotations

from rest_framework import serializers

from billing.serializers import InvoiceLineOut, TaxRowOut
from config.api.fields import (
    BodyIn,
    InCurrency,
    MoneyField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
)


class CreditLineIn(BodyIn):
    line = StrictIntegerField(
        min_value=1, help_text="The invoice line's position, 1-based, as printed on it."
    )
    quantity = serializers.DecimalField(
        max_digits=18,
        decimal_places=3,
        coerce_to_string=False,
        help_text="How much of the line to credit (above 0, at most what remains).",
    )


class CreditNoteIn(BodyIn):
    reason = StrictCharField(max_length=500)
    lines = CreditLineIn(
        many=True,
        required=False,
        help_text="The lines and quantities to credit; without it, all of the invoice that "
        "earlier credit notes left.",
    )
    rebill = StrictBooleanField(
        required=False,
        allow_null=True,
        help_text="Return the credited events to waiting for the next invoice. Default: "
        "true for the whole of an invoice not credited before, else false (a price "
        "credit). In part, only unit activation and direct licence lines re-bill.",
    )


class CreditNoteDraftOut(InCurrency):
    """A credit note as it would be issued now (``billing.services.credit_note_draft``);
    not stored. Amounts are negative."""

    customer_id = serializers.CharField()
    credits = serializers.CharField(help_text="The invoice it would credit.")
    period_start = serializers.IntegerField(help_text="Unix seconds.")
    period_end = serializers.IntegerField(help_text="Unix seconds.")
    currency = serializers.CharField()
    lines = InvoiceLineOut(many=True)
    total = MoneyField(max_digits=16, decimal_places=2, help_text="Net.")
    tax_total = MoneyField(max_digits=16, decimal_places=2)
    gross_total = MoneyField(max_digits=16, decimal_places=2)
    tax_breakdown = TaxRowOut(many=True)
    partial = serializers.BooleanField()
    rebill = serializers.BooleanField(help_text="Its events would wait again.")
