"""Input and output of the billing endpoints: each answer renders through its class here,
which is also its OpenAPI schema."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.balances import STATES, standing_of
from billing.documents import due_date
from billing.limits import MAX_COUNTER, MAX_TIMESTAMP, PERIOD_DAYS_MAX
from billing.models import Invoice, InvoiceLine, VatCategory
from billing.selectors import CONFLICT_PAGE_MAX, INVOICE_PAGE_MAX
from config.api.fields import (
    BodyIn,
    DeviceIdField,
    ExactDecimalField,
    IdField,
    InCurrency,
    MoneyField,
    QueryIntegerField,
    StrictIntegerField,
    UnixField,
)
from devices.documents import NONCE_MAX_CHARS
from svccore import money
from svccore.timeunits import DAY, unix

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


def currency_field() -> serializers.RegexField:
    """An ISO 4217 code: which of a customer's currencies (one invoice each)."""
    return serializers.RegexField(
        r"^[A-Za-z]{3}\Z",
        required=False,
        help_text="ISO 4217 code; needed when the customer buys in several currencies "
        "(one invoice per currency); default: the only one it buys in.",
    )


class InvoiceQuery(serializers.Serializer):
    period_days = PeriodDaysField(required=False, default=30)
    currency = currency_field()


@extend_schema_field({"type": "integer", "format": "int64", "multipleOf": DAY})
class DayStartField(StrictIntegerField):
    """Unix seconds of a 00:00 UTC: the schema states it (a multiple of 86400); the
    service refuses another time, naming it."""


class InvoiceIssueIn(BodyIn):
    customer_id = IdField()
    period_days = StrictIntegerField(
        required=False, default=30, min_value=1, max_value=PERIOD_DAYS_MAX
    )
    period_end = DayStartField(
        required=False,
        min_value=0,
        max_value=MAX_TIMESTAMP,
        help_text="Unix seconds of a 00:00 UTC; default: today, once due.",
    )
    currency = currency_field()

    def validate_period_end(self, value: int) -> dt.datetime:
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise serializers.ValidationError(f"{value} is not a time") from None


# --- usage (devices) ---------------------------------------------------------------------
# The upload is checked in plain Python (billing.ingestion.usage_ingest): a serializer per
# record would cost more than storing it. UsageUploadIn states what that check accepts;
# tests/test_fuzz_api.py holds the check to it (schema-valid bodies accepted, invalid
# ones refused).


def _counter(help_text: str = "") -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=MAX_COUNTER, help_text=help_text)


class UsageRecordIn(serializers.Serializer):
    """A usage record (spec §2.5); period_end must be after period_start (400 otherwise)."""

    period_start = serializers.IntegerField(
        min_value=0, max_value=MAX_TIMESTAMP, help_text="Unix seconds."
    )
    period_end = serializers.IntegerField(
        min_value=0, max_value=MAX_TIMESTAMP, help_text="Unix seconds, after period_start."
    )
    inferences = _counter()
    frames = _counter()
    stream_seconds = _counter()
    events = _counter("A numeric counter.")


class UsageUploadIn(serializers.Serializer):
    device_id = DeviceIdField(help_text="The device the unit token is bound to (403 otherwise).")
    license_id = serializers.JSONField(
        required=False, help_text="Ignored, whatever it holds: the token decides whose usage it is."
    )
    records = UsageRecordIn(
        many=True,
        help_text="At most 1000 are processed per call; the rest are counted in deferred. "
        "Validation is all or nothing.",
    )
    nonce = serializers.RegexField(
        rf"^[A-Za-z0-9_-]{{1,{NONCE_MAX_CHARS}}}$",
        required=False,
        allow_null=True,
        help_text="base64url, echoed in the signed receipt.",
    )


COUNTS = ("inferences", "frames", "stream_seconds", "events")


class UsageCountsOut(serializers.Serializer):
    inferences = serializers.IntegerField()
    frames = serializers.IntegerField()
    stream_seconds = serializers.IntegerField()
    events = serializers.IntegerField()


class UsageConflictOut(serializers.Serializer):
    index = serializers.IntegerField(help_text="The record's index in records.")
    period_start = serializers.IntegerField()
    period_end = serializers.IntegerField()
    held = UsageCountsOut(help_text="The counts the service holds (and bills) for the period.")


class UsageRefusedOut(serializers.Serializer):
    index = serializers.IntegerField(help_text="The record's index in records.")
    period_start = serializers.IntegerField()
    period_end = serializers.IntegerField()
    detail = serializers.CharField(help_text="Why: before the licence's life, or in the future.")


class UsageUploadOut(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Records stored by this call.")
    duplicates = serializers.IntegerField(
        help_text="Records already held with the same counts, or repeated within this call."
    )
    conflicts = UsageConflictOut(
        many=True,
        help_text="Records whose licence, device and period the service already holds with "
        "other counts: refused, the counts held kept, the conflict kept for review.",
    )
    refused = UsageRefusedOut(
        many=True,
        help_text="Records outside the licence's life (starting over an hour before it was "
        "issued, or ending over five minutes after now): refused; the rest is stored.",
    )
    deferred = serializers.IntegerField(
        required=False, help_text="Records past the first 1000: send them again."
    )
    receipt = serializers.CharField(
        help_text="Signed usage receipt (SVCU1) naming each processed record's period with "
        "the counts the service holds, and the records refused for good."
    )
    certificates = serializers.ListField(
        child=serializers.CharField(), help_text="The receipt key's certificate, if it has one."
    )


# --- invoices ---------------------------------------------------------------------------


class InvoiceLineOut(serializers.Serializer):
    """A line of a rated (dict) or issued (``InvoiceLine``) invoice: the quantity exact
    without trailing zeros (``3``, ``12.345``), price and amount with the currency's
    decimals."""

    kind = serializers.ChoiceField(choices=InvoiceLine.Kind.choices)
    sku = serializers.CharField()
    description = serializers.CharField()
    quantity = ExactDecimalField(max_digits=18, decimal_places=3)
    unit = serializers.CharField()
    unit_price = MoneyField(max_digits=14, decimal_places=4)
    amount = MoneyField(max_digits=16, decimal_places=2)
    batch_id = serializers.CharField(
        required=False,
        help_text="On unit activation lines, a batch's renewal line and a trial conversion line.",
    )
    license_id = serializers.CharField(
        required=False, help_text="On a direct licence's renewal line."
    )
    position = serializers.IntegerField(
        required=False,
        help_text="On an issued document: the line's number as printed (1-based); a "
        "partial credit note names the invoice's lines by it.",
    )
    credited_line = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="On a credit note: the position of the invoice line it credits.",
    )

    def to_representation(self, instance):
        answer = super().to_representation(instance)
        if answer.get("credited_line", 0) is None:
            if getattr(instance, "invoice_id", None) and instance.invoice.credits_id:
                answer["credited_line"] = instance.position  # before partial credits
            else:
                del answer["credited_line"]
        for name in ("batch_id", "license_id"):
            if not answer.get(name, True):
                del answer[name]
        return answer


class InvoicePreviewOut(InCurrency):
    """A rated invoice (spec §2.7; ``billing.services.invoice_rate``) of the window of
    period_days ending now; not stored."""

    customer_id = serializers.CharField()
    period_start = serializers.IntegerField(help_text="Unix seconds.")
    period_end = serializers.IntegerField(help_text="Unix seconds.")
    currency = serializers.CharField()
    lines = InvoiceLineOut(many=True)
    total = MoneyField(max_digits=16, decimal_places=2)


class TaxRowOut(serializers.Serializer):
    """One row of a document's VAT breakdown (EN 16931 BG-23)."""

    category = serializers.ChoiceField(
        choices=VatCategory.choices,
        help_text="EN 16931 VAT category: S standard, AE reverse charge, E exempt, O not "
        "subject to VAT.",
    )
    rate = ExactDecimalField(max_digits=5, decimal_places=2, help_text="Percent.")
    taxable_amount = MoneyField(max_digits=16, decimal_places=2)
    tax_amount = MoneyField(max_digits=16, decimal_places=2)
    exemption_reason = serializers.CharField(
        allow_blank=True, help_text="The legal note of AE, E and O (empty for S)."
    )


class _TaxOut(serializers.Serializer):
    """VAT on top of the net ``total`` (contract §6), fixed when the document was issued."""

    tax_total = MoneyField(max_digits=16, decimal_places=2)
    gross_total = MoneyField(
        max_digits=16, decimal_places=2, help_text="total + tax_total: what is paid."
    )
    tax_breakdown = TaxRowOut(
        many=True, source="taxes.all", help_text="Empty on documents issued before VAT."
    )


def _credit_notes(document) -> list[str]:
    """The credit notes of an invoice, oldest first (several when credited in part)."""
    return [note.number for note in sorted(document.credit_notes.all(), key=lambda n: n.pk)]


def _credited_by(document) -> str | None:
    notes = _credit_notes(document)
    return notes[-1] if notes else None


class _DocumentOut(InCurrency):
    """What every answer about an issued invoice or credit note holds, before its total."""

    number = serializers.CharField()
    kind = serializers.ChoiceField(choices=Invoice.Kind.choices)
    customer_id = serializers.CharField()
    customer_name = serializers.CharField(source="customer.name")
    period_start = UnixField(help_text="Unix seconds.")
    period_end = UnixField(help_text="Unix seconds.")
    period_days = serializers.IntegerField()
    issued_at = UnixField(help_text="Unix seconds.")
    due_at = serializers.SerializerMethodField(
        help_text="Unix seconds: issued_at plus the payment terms; null on a credit note."
    )
    credits = serializers.CharField(
        source="credits.number",
        allow_null=True,
        help_text="The invoice a credit note credits; null on an invoice.",
    )
    credited_by = serializers.SerializerMethodField(
        help_text="The latest credit note of this invoice; null if none."
    )
    credit_notes = serializers.SerializerMethodField(
        help_text="Every credit note of this invoice, oldest first (several when it is "
        "credited in part); empty on a credit note."
    )
    partial = serializers.BooleanField(
        help_text="A credit note of chosen lines or quantities, or of what earlier credit "
        "notes left (the invoice's period stands); false on an invoice."
    )
    rebill = serializers.SerializerMethodField(
        help_text="A credit note whose credited events wait again for the next invoice; "
        "null on an invoice."
    )
    reason = serializers.CharField(allow_blank=True, help_text="A credit note's reason.")
    currency = serializers.CharField()
    buyer_country = serializers.CharField(
        allow_blank=True, help_text="The customer's country the VAT was decided on."
    )
    buyer_vat_id = serializers.CharField(allow_blank=True)
    state = serializers.SerializerMethodField(
        help_text="open, partly_paid, paid, overdue or void (fully credited); null on a "
        "credit note (billing.balances)."
    )
    balance = serializers.SerializerMethodField(
        help_text="What is left to pay: the gross total, plus credit notes (negative), minus "
        "payments; negative: overpaid. Null on a credit note."
    )

    @extend_schema_field(serializers.ChoiceField(choices=STATES, allow_null=True))
    def get_state(self, document) -> str | None:
        standing = standing_of(document)
        return standing.state if standing else None

    @extend_schema_field({"type": "number", "nullable": True})
    def get_balance(self, document) -> Decimal | None:
        standing = standing_of(document)
        return money.amount(standing.balance, document.currency) if standing else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_due_at(self, document) -> int | None:
        due = due_date(document)
        return unix(due) if due else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_credited_by(self, document) -> str | None:
        return _credited_by(document)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_credit_notes(self, document) -> list[str]:
        return _credit_notes(document)

    @extend_schema_field(serializers.BooleanField(allow_null=True))
    def get_rebill(self, document) -> bool | None:
        return None if document.kind == Invoice.Kind.INVOICE else not document.price_only


class InvoiceSummaryOut(_DocumentOut, _TaxOut):
    """An issued invoice or credit note without its lines (the list)."""

    total = MoneyField(max_digits=16, decimal_places=2, help_text="Net (contract §6).")


class InvoiceOut(_DocumentOut, _TaxOut):
    """An issued invoice or credit note with its lines: spec §2.7 plus its number and
    ledger facts."""

    lines = InvoiceLineOut(many=True, source="lines.all")
    total = MoneyField(max_digits=16, decimal_places=2, help_text="Net (contract §6).")


class EInvoiceQuery(serializers.Serializer):
    syntax = serializers.ChoiceField(
        choices=["cii", "ubl"],
        default="cii",
        help_text="cii: UN/CEFACT CII (the XML inside Factur-X / ZUGFeRD); ubl: OASIS UBL 2.1. "
        "Both EN 16931.",
    )


class InvoiceListQuery(serializers.Serializer):
    customer_id = IdField(required=False, help_text="Only this customer's (404 if unknown).")
    kind = serializers.ChoiceField(choices=Invoice.Kind.choices, required=False)
    issued_after = QueryIntegerField(
        required=False, min_value=0, max_value=MAX_TIMESTAMP,
        help_text="Unix seconds: only documents issued after it.",
    )  # fmt: skip
    cursor = serializers.RegexField(
        r"^[0-9]{1,19}$",
        required=False,
        error_messages={"invalid": "cursor must be a next_cursor this API gave"},
        help_text="next_cursor of the page before.",
    )
    limit = QueryIntegerField(required=False, default=100, min_value=1, max_value=INVOICE_PAGE_MAX)

    def validate_issued_after(self, value: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)


class InvoicePageOut(serializers.Serializer):
    invoices = InvoiceSummaryOut(many=True, help_text="Newest first.")
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as cursor for older documents; null: none older."
    )


class UsageConflictQuery(serializers.Serializer):
    customer_id = IdField(required=False, help_text="Only this customer's (404 if unknown).")
    license_id = IdField(required=False, help_text="Only this licence's (404 if unknown).")
    cursor = serializers.RegexField(
        r"^[0-9]{1,19}$",
        required=False,
        error_messages={"invalid": "cursor must be a next_cursor this API gave"},
        help_text="next_cursor of the page before.",
    )
    limit = QueryIntegerField(required=False, default=100, min_value=1, max_value=CONFLICT_PAGE_MAX)


class UsageConflictRowOut(serializers.Serializer):
    """A usage conflict kept for review: the record a device sent and the counts the
    service holds (and bills) for the same licence, device and period."""

    license_id = serializers.CharField()
    customer_id = serializers.CharField()
    sku = serializers.CharField()
    device_id = serializers.CharField()
    period_start = serializers.IntegerField(help_text="Unix seconds.")
    period_end = serializers.IntegerField(help_text="Unix seconds.")
    held = serializers.SerializerMethodField(help_text="Counts the service holds (billed).")
    sent = serializers.SerializerMethodField(help_text="Counts the device sent (refused).")
    seen_at = UnixField(help_text="Unix seconds: when the record first arrived.")

    @extend_schema_field(UsageCountsOut)
    def get_held(self, conflict) -> dict[str, int]:
        return {name: getattr(conflict, f"held_{name}") for name in COUNTS}

    @extend_schema_field(UsageCountsOut)
    def get_sent(self, conflict) -> dict[str, int]:
        return {name: getattr(conflict, f"sent_{name}") for name in COUNTS}


class UsageConflictPageOut(serializers.Serializer):
    conflicts = UsageConflictRowOut(many=True, help_text="Newest first.")
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as cursor for older conflicts; null: none older."
    )


# The view renders through this class, which is also its OpenAPI schema.
class LicenseUsageOut(serializers.Serializer):
    license_id = serializers.CharField()
    inferences = serializers.IntegerField()
    frames = serializers.IntegerField()
    stream_seconds = serializers.IntegerField()
    events = serializers.IntegerField()
    records = serializers.IntegerField(help_text="Number of usage records.")


class OfflineUsageOut(serializers.Serializer):
    """The answer to a usage export file (issue 44): what ``POST /v1/usage`` answers
    for its records, and the signed answer file holding the receipt and the status."""

    answer = serializers.CharField(
        help_text="The signed answer file's text (SVCA1): save it as a .svcrcpt file for "
        "`python -m devices offline-install`."
    )
    license_id = serializers.CharField()
    device_id = serializers.CharField()
    accepted = serializers.IntegerField(help_text="Records stored by this file.")
    duplicates = serializers.IntegerField(help_text="Records already held with the same counts.")
    conflicts = UsageConflictOut(many=True, help_text="As POST /v1/usage answers them.")
    refused = UsageRefusedOut(many=True, help_text="As POST /v1/usage answers them.")
    deferred = serializers.IntegerField(
        required=False, help_text="Records past the first 1000: export again."
    )
    revoked = serializers.BooleanField(
        help_text="The licence is revoked: nothing was stored; the answer carries the status "
        "that tells the camera."
    )


class DemoOut(serializers.Serializer):
    created = serializers.BooleanField(
        help_text="True when this call wrote the demo; false when it was already there."
    )
    customers = serializers.ListField(child=serializers.CharField(), help_text="Demo customer ids.")
    invoices = serializers.ListField(child=serializers.CharField(), help_text="Invoice numbers.")
    credit_notes = serializers.ListField(
        child=serializers.CharField(), help_text="Credit note numbers."
    )
    seconds = serializers.FloatField(help_text="How long the call took on the server.")
