"""What the OpenAPI schema of billing's query and issue serializers adds (period_days, a
period_end at 00:00 UTC); registered by ``BillingConfig.ready``."""

from __future__ import annotations

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)

from billing.limits import DAY, PERIOD_DAYS_MAX


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
