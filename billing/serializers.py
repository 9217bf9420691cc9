"""Input of the billing admin endpoints. The usage upload is validated in
:func:`billing.services.usage_ingest` with plain Python: a serializer per record would
cost more than storing it."""

from __future__ import annotations

import re

from rest_framework import serializers

from billing.services import PERIOD_DAYS_MAX

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
