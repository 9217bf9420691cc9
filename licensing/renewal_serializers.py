"""The renewal shapes (issue 16): renewing a batch or a direct licence, its quote, and
the list of terms expiring soon. :mod:`licensing.serializers` names them too, for the
views that import them from there."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from config.api.fields import BodyIn, IdField, QueryIntegerField, StrictIntegerField, UnixField
from licensing.models import Renewal
from licensing.selectors import EXPIRING_DAYS_DEFAULT, EXPIRING_DAYS_MAX
from licensing.services.renewals import IDEMPOTENCY_KEY_MAX
from svccore import money
from svccore.claims import TERM_DAYS_MAX


class RenewIn(BodyIn):
    one_of = [{"required": ["batch_id"]}, {"required": ["license_id"]}]  # 400 otherwise
    batch_id = IdField(required=False, help_text="The batch to renew (its units follow).")
    license_id = IdField(
        required=False, help_text="A direct licence to renew (a batch key: its batch)."
    )
    term_days = StrictIntegerField(
        min_value=1,
        max_value=TERM_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="Days to add; null or absent: the SKU's term.",
    )
    idempotency_key = IdField(
        required=False,
        max_length=IDEMPOTENCY_KEY_MAX,
        help_text="Unique per renewal you mean: a retry with the same key answers the first "
        "renewal. Or send it as the Idempotency-Key header; one of the two is required.",
    )


class RenewalOut(serializers.Serializer):
    renewal_id = serializers.IntegerField(source="renewal.id")
    batch_id = serializers.CharField(source="renewal.batch_id", allow_null=True)
    license_id = serializers.CharField(source="renewal.license_id")
    customer_id = serializers.CharField(source="renewal.customer_id")
    sku = serializers.CharField(source="renewal.sku")
    term_days = serializers.IntegerField(source="renewal.term_days")
    basis = serializers.CharField(
        source="renewal.basis",
        help_text="before_expiry or in_grace (the term runs from the old end), after_grace "
        "(from the renewal).",
    )
    previous_expires_at = UnixField(source="renewal.previous_expires_at")
    expires_at = UnixField(source="renewal.expires_at")
    renewed_at = UnixField(source="renewal.renewed_at")
    units = serializers.IntegerField(
        source="renewal.units",
        help_text="Billed: units activated on the batch when renewed (1 for a licence).",
    )
    unit_price = serializers.SerializerMethodField()
    amount = serializers.SerializerMethodField()
    currency = serializers.CharField(source="renewal.currency")
    idempotency_key = serializers.CharField(source="renewal.idempotency_key")
    replayed = serializers.BooleanField(
        help_text="True: this key's earlier renewal, answered again (nothing renewed now)."
    )

    def get_unit_price(self, result) -> Decimal:
        return money.amount(result.renewal.unit_price, result.renewal.currency)

    def get_amount(self, result) -> Decimal:
        renewal = result.renewal
        return money.amount(renewal.unit_price * renewal.units, renewal.currency)


class RenewQuoteIn(BodyIn):
    one_of = RenewIn.one_of
    batch_id = IdField(required=False, help_text="The batch whose renewal to quote.")
    license_id = IdField(required=False, help_text="A direct licence whose renewal to quote.")
    term_days = StrictIntegerField(
        min_value=1,
        max_value=TERM_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="Days to add; null or absent: the SKU's term.",
    )


class RenewalQuoteOut(serializers.Serializer):
    """What POST /v1/admin/renew would do now (nothing renewed, nothing billed)."""

    batch_id = serializers.CharField(allow_null=True)
    license_id = serializers.CharField()
    customer_id = serializers.CharField()
    customer_name = serializers.CharField()
    sku = serializers.CharField()
    term_days = serializers.IntegerField()
    basis = serializers.SerializerMethodField(help_text="before_expiry, in_grace or after_grace.")
    previous_expires_at = UnixField()
    expires_at = UnixField(help_text="The new end, were it renewed now.")
    units = serializers.IntegerField(help_text="Units that would be billed (1 for a licence).")
    unit_price = serializers.SerializerMethodField()
    amount = serializers.SerializerMethodField()
    currency = serializers.CharField()

    def get_basis(self, quote) -> str:
        # The quote carries the basis in words (the console's confirmation page).
        return {label: value for value, label in Renewal.Basis.choices}[quote.basis]

    def get_unit_price(self, quote) -> Decimal:
        return money.amount(quote.unit_price, quote.currency)

    def get_amount(self, quote) -> Decimal:
        return money.amount(quote.amount, quote.currency)


class ExpiringQuery(serializers.Serializer):
    days = QueryIntegerField(
        min_value=1,
        max_value=EXPIRING_DAYS_MAX,
        required=False,
        default=EXPIRING_DAYS_DEFAULT,
        error_messages={
            "min_value": "must be at least {min_value} day",
            "max_value": "must be at most {max_value} days (ten years)",
        },
        help_text=f"Ending within this many days, 1..{EXPIRING_DAYS_MAX} (default "
        f"{EXPIRING_DAYS_DEFAULT}); those in their grace period are listed too.",
    )


class ExpiringOut(serializers.Serializer):
    kind = serializers.CharField(help_text="batch or license.")
    batch_id = serializers.CharField(allow_null=True)
    license_id = serializers.CharField()
    customer_id = serializers.CharField()
    customer_name = serializers.CharField()
    sku = serializers.CharField()
    expires_at = UnixField()
    grace_ends_at = UnixField()
    in_grace = serializers.BooleanField(help_text="Ended; still running in its grace period.")
    units_activated = serializers.IntegerField()
    units_purchased = serializers.IntegerField()


# The view renders through this class, which is also its OpenAPI schema.
class ExpiringListOut(serializers.Serializer):
    """Batches and direct licences ending within the days asked, or in their grace."""

    days = serializers.IntegerField()
    as_of = serializers.IntegerField(help_text="Unix seconds of the listing.")
    count = serializers.IntegerField()
    items = ExpiringOut(many=True)
