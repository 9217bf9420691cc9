"""The OpenAPI schema of billing's endpoints: schema-only serializers for the bodies that
are validated or built without one (the usage upload, checked in plain Python for speed;
usage totals, invoices), nothing validates or renders with them; and what the schema of
the query and issue serializers adds (period_days, a period_end at 00:00 UTC)."""

from __future__ import annotations

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from rest_framework import serializers

from billing.limits import DAY, MAX_COUNTER, MAX_TIMESTAMP, PERIOD_DAYS_MAX
from billing.models import Invoice, InvoiceLine
from config.fields import DeviceIdField
from devices.documents import NONCE_MAX_CHARS


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


class UsageUploadOut(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Records stored by this call.")
    duplicates = serializers.IntegerField(
        help_text="Records already stored, or repeated within this call."
    )
    deferred = serializers.IntegerField(
        required=False, help_text="Records past the first 1000: send them again."
    )
    receipt = serializers.CharField(
        help_text="Signed usage receipt (SVCU1) naming the processed record keys."
    )
    certificates = serializers.ListField(
        child=serializers.CharField(), help_text="The receipt key's certificate, if it has one."
    )


class InvoiceLineOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=InvoiceLine.Kind.choices)
    sku = serializers.CharField()
    description = serializers.CharField()
    quantity = serializers.DecimalField(max_digits=18, decimal_places=3, coerce_to_string=False)
    unit = serializers.CharField()
    unit_price = serializers.DecimalField(max_digits=14, decimal_places=4, coerce_to_string=False)
    amount = serializers.DecimalField(max_digits=16, decimal_places=2, coerce_to_string=False)
    batch_id = serializers.CharField(
        required=False, help_text="On unit activation lines and a batch's renewal line."
    )
    license_id = serializers.CharField(
        required=False, help_text="On a direct licence's renewal line."
    )


class InvoicePreviewOut(serializers.Serializer):
    """A rated invoice (spec §2.7) of the window of period_days ending now; not stored."""

    customer_id = serializers.CharField()
    period_start = serializers.IntegerField(help_text="Unix seconds.")
    period_end = serializers.IntegerField(help_text="Unix seconds.")
    currency = serializers.CharField()
    lines = InvoiceLineOut(many=True)
    total = serializers.DecimalField(max_digits=16, decimal_places=2, coerce_to_string=False)


class InvoiceOut(serializers.Serializer):
    """An issued invoice or credit note (``billing.serializers.invoice_out``)."""

    number = serializers.CharField()
    kind = serializers.ChoiceField(choices=Invoice.Kind.choices)
    customer_id = serializers.CharField()
    period_start = serializers.IntegerField(help_text="Unix seconds.")
    period_end = serializers.IntegerField(help_text="Unix seconds.")
    period_days = serializers.IntegerField()
    issued_at = serializers.IntegerField(help_text="Unix seconds.")
    credits = serializers.CharField(
        allow_null=True, help_text="The invoice a credit note credits; null on an invoice."
    )
    reason = serializers.CharField(allow_blank=True)
    currency = serializers.CharField()
    lines = InvoiceLineOut(many=True)
    total = serializers.DecimalField(max_digits=16, decimal_places=2, coerce_to_string=False)


class PeriodDaysFieldExtension(OpenApiSerializerFieldExtension):
    """``billing.serializers.PeriodDaysField``: a query-string integer."""

    target_class = "billing.serializers.PeriodDaysField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "integer", "minimum": 1, "maximum": PERIOD_DAYS_MAX}


class InvoiceIssueInExtension(OpenApiSerializerExtension):
    """``billing.serializers.InvoiceIssueIn``, its ``period_end`` a 00:00 UTC as the
    service requires: a whole number of days since the epoch."""

    target_class = "billing.serializers.InvoiceIssueIn"

    def map_serializer(self, auto_schema, direction):
        schema = super().map_serializer(auto_schema, direction)
        schema["properties"]["period_end"]["multipleOf"] = DAY
        return schema
