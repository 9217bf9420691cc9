"""Input and output of the billing admin endpoints. The usage upload is validated in
:func:`billing.services.usage_ingest` with plain Python: a serializer per record would
cost more than storing it."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from rest_framework import serializers

from billing.limits import MAX_TIMESTAMP, PERIOD_DAYS_MAX, unix
from billing.models import Invoice
from config.fields import IdField, StrictCharField, StrictIntegerField
from svccore import money

_DIGITS = re.compile(r"\A[0-9]{1,6}\Z")


class PeriodDaysField(serializers.Field):
    """A query-string integer; "30.0", "3e1" or " 30" are not integers."""

    default_error_messages = {
        "invalid": f"must be an integer 1..{PERIOD_DAYS_MAX}, not {{value!r}}",
    }

    def get_value(self, dictionary):
        # Present but blank ("?period_days=") is an error, not the default.
        return dictionary.get(self.field_name, serializers.empty)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not _DIGITS.match(data):
            self.fail("invalid", value=data)
        value = int(data)
        if not 1 <= value <= PERIOD_DAYS_MAX:
            self.fail("invalid", value=data)
        return value


class InvoiceQuery(serializers.Serializer):
    period_days = PeriodDaysField(required=False, default=30)


class InvoiceIssueIn(serializers.Serializer):
    customer_id = IdField()
    period_days = StrictIntegerField(
        required=False, default=30, min_value=1, max_value=PERIOD_DAYS_MAX
    )
    period_end = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_TIMESTAMP,
        help_text="Unix seconds of a 00:00 UTC; default: today, once due.",
    )

    def validate_period_end(self, value: int) -> dt.datetime:
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise serializers.ValidationError(f"{value} is not a time") from None


class CreditNoteIn(serializers.Serializer):
    reason = StrictCharField(max_length=500)


def _line_out(line: dict[str, Any], currency: str) -> dict[str, Any]:
    """An invoice line with its numbers exact for the renderer: the quantity without
    trailing zeros (``3``, ``12.345``), price and amount with the currency's decimals."""
    return line | {
        "quantity": money.quantity(line["quantity"]),
        "unit_price": money.amount(line["unit_price"], currency),
        "amount": money.amount(line["amount"], currency),
    }


def invoice_preview_out(rated: dict[str, Any]) -> dict[str, Any]:
    """A rated invoice (``billing.services.invoice_rate``, spec §2.7) as the admin API
    renders it: money with the currency's decimals (``630.00``)."""
    currency = rated["currency"]
    return rated | {
        "lines": [_line_out(line, currency) for line in rated["lines"]],
        "total": money.amount(rated["total"], currency),
    }


def invoice_out(invoice: Invoice) -> dict[str, Any]:
    """An issued invoice or credit note as the admin API renders it (spec §2.7 plus its
    number and ledger facts)."""
    return {
        "number": invoice.number,
        "kind": invoice.kind,
        "customer_id": invoice.customer_id,
        "period_start": unix(invoice.period_start),
        "period_end": unix(invoice.period_end),
        "period_days": invoice.period_days,
        "issued_at": unix(invoice.issued_at),
        "credits": invoice.credits.number if invoice.credits_id else None,
        "reason": invoice.reason,
        "currency": invoice.currency,
        "lines": [
            _line_out(
                {
                    "kind": line.kind,
                    "sku": line.sku,
                    "description": line.description,
                    "quantity": line.quantity,
                    "unit": line.unit,
                    "unit_price": line.unit_price,
                    "amount": line.amount,
                }
                | ({"batch_id": line.batch_id} if line.batch_id else {})
                | ({"license_id": line.license_id} if line.license_id else {}),
                invoice.currency,
            )
            for line in invoice.lines.order_by("position")
        ],
        "total": money.amount(invoice.total, invoice.currency),
    }


# The view renders through this class, which is also its OpenAPI schema.
class LicenseUsageOut(serializers.Serializer):
    license_id = serializers.CharField()
    inferences = serializers.IntegerField()
    frames = serializers.IntegerField()
    stream_seconds = serializers.IntegerField()
    events = serializers.IntegerField()
    records = serializers.IntegerField(help_text="Number of usage records.")
