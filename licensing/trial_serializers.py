"""The trial shapes (issue 42): converting a trial batch to paid, and its quote.
:mod:`licensing.serializers` names them too, for the views that import them from there."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from config.api.fields import BodyIn, StrictIntegerField, UnixField
from svccore import money
from svccore.claims import TERM_DAYS_MAX


class TrialConvertIn(BodyIn):
    term_days = StrictIntegerField(
        min_value=1,
        max_value=TERM_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="The paid term from now, in days; null or absent: the batch's term as "
        "issued. A perpetual batch takes none (its units become perpetual).",
    )


class TrialConversionOut(serializers.Serializer):
    batch_id = serializers.CharField(source="conversion.batch_id")
    license_id = serializers.CharField(
        source="conversion.license_id", help_text="The batch key's licence."
    )
    customer_id = serializers.CharField(source="conversion.customer_id")
    sku = serializers.CharField(source="conversion.sku")
    trial_days = serializers.IntegerField(source="conversion.trial_days")
    term_days = serializers.IntegerField(
        source="conversion.term_days", help_text="The paid term from conversion; 0: perpetual."
    )
    previous_expires_at = UnixField(source="conversion.previous_expires_at")
    expires_at = UnixField(
        source="conversion.expires_at",
        help_text="The batch's and its converted units' end, Unix seconds (0: perpetual).",
    )
    converted_at = UnixField(source="conversion.converted_at")
    units = serializers.IntegerField(
        source="conversion.units",
        help_text="Billed: the trial units activated and not revoked when converted.",
    )
    unit_price = serializers.SerializerMethodField()
    amount = serializers.SerializerMethodField()
    currency = serializers.CharField(source="conversion.currency")
    replayed = serializers.BooleanField(
        help_text="True: the batch was converted before; that conversion, nothing done again."
    )

    def get_unit_price(self, result) -> Decimal:
        return money.amount(result.conversion.unit_price, result.conversion.currency)

    def get_amount(self, result) -> Decimal:
        conversion = result.conversion
        return money.amount(conversion.amount, conversion.currency)


class TrialConversionQuoteOut(serializers.Serializer):
    """What POST /v1/admin/batches/{batch_id}/convert would do now (nothing converted,
    nothing billed)."""

    batch_id = serializers.CharField()
    customer_id = serializers.CharField()
    customer_name = serializers.CharField()
    sku = serializers.CharField()
    trial_days = serializers.IntegerField()
    term_days = serializers.IntegerField(help_text="0: perpetual.")
    previous_expires_at = UnixField()
    expires_at = UnixField(help_text="The new end, were it converted now (0: perpetual).")
    units = serializers.IntegerField(help_text="Units that would be billed: on trial now.")
    unit_price = serializers.SerializerMethodField()
    amount = serializers.SerializerMethodField()
    currency = serializers.CharField()

    def get_unit_price(self, quote) -> Decimal:
        return money.amount(quote.unit_price, quote.currency)

    def get_amount(self, quote) -> Decimal:
        return money.amount(quote.amount, quote.currency)
