from __future__ import annotations

from decimal import Decimal

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from config.api.fields import (
    BodyIn,
    DeviceIdField,
    ExactDecimalField,
    IdField,
    InCurrency,
    MoneyField,
    ReportedTextField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    UnixField,
)
from licensing import addon_serializers, fleet_serializers, renewal_serializers, trial_serializers
from licensing.addon_serializers import AddOnOut
from licensing.models import Batch, License
from svccore import money
from svccore.claims import (
    API_QUOTA_MAX,
    MAX_OFFLINE_DAYS_MAX,
    MAX_STREAMS_MAX,
    TERM_DAYS_MAX,
    TRIAL_DAYS_MAX,
    UNITS_MAX,
)
from svccore.timeunits import unix

# Every number an operator may sign into a licence is bounded (svccore.claims, the one
# home of the bounds; 400 naming the bound): units 1..UNITS_MAX, term_days
# 0..TERM_DAYS_MAX (0: perpetual), api_quota 0..API_QUOTA_MAX (0: unmetered),
# max_streams 1..MAX_STREAMS_MAX. Query parameters likewise (the fleet's ``before``:
# Unix seconds 0..LAST_SECOND, 9999-12-31T23:59:59Z).
#
# The fleet's shapes live in licensing.fleet_serializers, the renewals' and the expiring
# list's in licensing.renewal_serializers, the add-ons' in licensing.addon_serializers;
# they are named at the end of this module too.


# --- what a device gets ----------------------------------------------------------------
# The activation, licence refresh and status answers render through these classes. The
# revocation list goes out as bytes built once per change of the list
# (licensing.revocations); its two classes state that shape, and
# tests/test_answer_shapes.py holds the bytes to them, key for key.


def _certificates() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(),
        help_text="Key certificates (SVCK1) chaining the signing keys to the devices' roots.",
    )


class ActivateOut(serializers.Serializer):
    unit_token = serializers.CharField(help_text="The unit licence, bound to device_id.")
    license_id = serializers.CharField()
    reactivated = serializers.BooleanField(
        help_text="true: the device was on file; its licence again, no unit consumed."
    )
    batch_units_remaining = serializers.IntegerField(
        required=False, help_text="Units left on the batch; only on a new activation."
    )
    revocations = serializers.CharField(
        help_text="The signed revocation-list page at its head (SVCR1), for firmware "
        "that walks the list."
    )
    status = serializers.CharField(
        help_text="The signed status of the new licence for this device (SVCS1): not "
        "revoked, at the list's head. The device module decides from it."
    )
    certificates = _certificates()

    def to_representation(self, instance):
        answer = super().to_representation(instance)
        if answer.get("batch_units_remaining") is None:
            answer.pop("batch_units_remaining", None)
        return answer


class RevocationPageOut(serializers.Serializer):
    """``?since=N``: the signed page continuing a list held at N."""

    revocations = serializers.CharField(help_text="The signed page (SVCR1).")
    seq = serializers.IntegerField(min_value=0, help_text="Sequence number the page ends at.")
    more = serializers.BooleanField(help_text="true: fetch again with since=seq.")
    as_of = serializers.IntegerField(help_text="Unix seconds the page was built.")
    certificates = _certificates()


class RevocationFullOut(serializers.Serializer):
    """No ``since`` (older firmware): every listed licence id, and the signed first page."""

    revoked = serializers.ListField(child=serializers.CharField())
    as_of = serializers.IntegerField()
    seq = serializers.IntegerField(min_value=0)
    revocations = serializers.CharField(help_text="The signed first page (SVCR1).")
    certificates = _certificates()


RevocationListOut = PolymorphicProxySerializer(
    component_name="RevocationList",
    serializers=[RevocationPageOut, RevocationFullOut],
    resource_type_field_name=None,
)


class LicenseStatusOut(serializers.Serializer):
    """``GET /v1/revocations/status``: the signed status and, for display only, what it
    says."""

    status = serializers.CharField(
        help_text="The signed status (SVCS1: lic, dev, revoked, revoked_at, seq, iat, "
        "keys_revoked, kid, and when set lease_end and suspended); the only part a device "
        "believes."
    )
    license_id = serializers.CharField()
    device_id = serializers.CharField()
    revoked = serializers.BooleanField()
    revoked_at = serializers.IntegerField(help_text="Unix seconds; 0 when not revoked.")
    seq = serializers.IntegerField(help_text="The list's sequence number it was read at.")
    as_of = serializers.IntegerField(help_text="Unix seconds it was signed.")
    lease_end = serializers.IntegerField(
        help_text="Check-in lease end, Unix seconds (0: no lease); the signed status carries "
        "it as lease_end when set (issue 42)."
    )
    suspended = serializers.BooleanField(
        help_text="An operator suspended the licence (its own, its batch's or its customer's "
        "hold); the signed status carries suspended: true then (issue 42)."
    )
    certificates = _certificates()


class LicenseRefreshOut(serializers.Serializer):
    license_id = serializers.CharField()
    token = serializers.CharField(
        help_text="The licence's current token (renewed, or re-signed with its add-ons)."
    )
    expires_at = serializers.IntegerField(help_text="Its end, Unix seconds (0: perpetual).")
    certificates = _certificates()


# --- the catalogue ----------------------------------------------------------------------


class UnitPriceTierOut(serializers.Serializer):
    from_units = serializers.IntegerField()
    unit_price = MoneyField()


class OverageTierOut(serializers.Serializer):
    from_inferences = serializers.IntegerField()
    price_per_1000 = MoneyField(decimal_places=4)


class SkuOut(InCurrency):
    """A catalogue entry (contract §5; ``Sku.entry()``): tier prices with the currency's
    decimals and any more they carry (``90.00``, ``0.35``, ``0.0125``), the maintenance
    rate exact (``0.2``)."""

    sku = serializers.CharField()
    name = serializers.CharField()
    modules = serializers.ListField(child=serializers.CharField())
    max_streams = serializers.IntegerField()
    max_fps = serializers.IntegerField()
    api_calls = serializers.IntegerField(help_text="Device quota; 0 = unmetered.")
    term_days = serializers.IntegerField(help_text="Default term; 0 = perpetual.")
    grace_days = serializers.IntegerField()
    allowance_per_unit = serializers.IntegerField()
    currency = serializers.CharField()
    unit_price_tiers = UnitPriceTierOut(many=True)
    overage_tiers = OverageTierOut(many=True)
    maintenance_rate = ExactDecimalField(max_digits=6, decimal_places=4)
    max_offline_days = serializers.IntegerField(
        allow_null=True,
        help_text="Check-in lease of the SKU's batches and licences in days (issue 42; a "
        "batch or licence may override it), or null: no lease.",
    )
    addons = AddOnOut(
        many=True,
        help_text="Add-ons sold for the SKU's batches and licences after the sale (issue 42), "
        "in its currency.",
    )
    trial_days = serializers.IntegerField(
        allow_null=True,
        help_text="A trial SKU: its batches are trials of this many days per camera by "
        "default (issue 42); null: not a trial SKU.",
    )
    identity_policy = serializers.CharField(
        allow_blank=True,
        help_text="How a unit's identity components must match for its batches (issue 45): "
        "all, most, most:N or one:NAME; empty: most:2. A batch may override it.",
    )


class CatalogueOut(serializers.Serializer):
    skus = SkuOut(many=True)


# --- activation -------------------------------------------------------------------------


class ActivateIn(serializers.Serializer):
    batch_token = StrictCharField()
    device_id = DeviceIdField(
        error_messages={
            "required": "device_id is required",
            "blank": "device_id must not be empty",
        },
    )
    fingerprint_source = ReportedTextField(
        required=False, default="", allow_blank=True, max_length=32
    )
    weak_binding = StrictBooleanField(required=False, default=False)
    sdk_version = ReportedTextField(required=False, default="", allow_blank=True, max_length=64)
    components = serializers.DictField(
        child=StrictCharField(max_length=64),
        required=False,
        allow_null=True,
        help_text="Issue 45 (a contract addition, optional): the device's identity components, "
        '{name: lowercase SHA-256 hex}, e.g. {"soc_serial": "...", "emmc_cid": "..."}; at most '
        "16. The licence binds to the set under its batch's matching policy.",
    )


class BatchIn(BodyIn):
    customer_id = IdField()
    sku = IdField()
    units = StrictIntegerField(min_value=1, max_value=UNITS_MAX)
    identity_policy = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=40,
        help_text="Issue 45 (optional): how its units' identity components must match: all, "
        "most, most:N or one:NAME (empty: the SKU's, else most:2).",
    )
    term_days = StrictIntegerField(
        min_value=0, max_value=TERM_DAYS_MAX, required=False, allow_null=True
    )
    max_offline_days = StrictIntegerField(
        min_value=1,
        max_value=MAX_OFFLINE_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="Check-in lease: days a camera may run analytics without a sync (null: the "
        "SKU's).",
    )
    trial_days = StrictIntegerField(
        min_value=0,
        max_value=TRIAL_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="A trial batch: each camera's licence runs this many days from its first "
        "activation, unbilled until the batch is converted (null: the SKU's trial days, "
        "if it is a trial SKU; 0: sold, not a trial).",
    )


def _trial_days() -> serializers.IntegerField:
    return serializers.IntegerField(
        allow_null=True,
        help_text="Days each camera's trial runs from its activation while the batch is a "
        "trial; null: a paid batch (never a trial, or converted).",
    )


def _trial_converted_at() -> serializers.SerializerMethodField:
    return serializers.SerializerMethodField(
        help_text="Unix seconds the trial batch was converted to paid; null: not converted."
    )


def _converted_at(batch: Batch) -> int | None:
    conversion = getattr(batch, "trial_conversion", None)
    return unix(conversion.converted_at) if conversion is not None else None


class BatchOut(serializers.ModelSerializer):
    batch_id = serializers.CharField(source="id")
    license_id = serializers.CharField(source="license.id")
    batch_token = serializers.CharField(source="license.token")
    units = serializers.IntegerField(source="units_purchased")
    unit_price = MoneyField()
    order_value = serializers.SerializerMethodField()
    expires_at = UnixField()
    trial_days = _trial_days()

    class Meta:
        model = Batch
        fields = [
            "batch_id",
            "customer_id",
            "sku",
            "license_id",
            "batch_token",
            "units",
            "unit_price",
            "order_value",
            "currency",
            "expires_at",
            "max_offline_days",
            "trial_days",
        ]

    def get_order_value(self, batch: Batch) -> Decimal:
        return money.amount(batch.unit_price * batch.units_purchased, batch.currency)


class BatchStatusOut(serializers.ModelSerializer):
    batch_id = serializers.CharField(source="id")
    units_remaining = serializers.IntegerField()
    expires_at = UnixField()
    trial_days = _trial_days()
    trial_converted_at = _trial_converted_at()

    class Meta:
        model = Batch
        fields = [
            "batch_id",
            "customer_id",
            "sku",
            "units_purchased",
            "units_activated",
            "units_remaining",
            "expires_at",
            "max_offline_days",
            "trial_days",
            "trial_converted_at",
        ]

    def get_trial_converted_at(self, batch: Batch) -> int | None:
        return _converted_at(batch)


class LicenseIn(BodyIn):
    customer_id = IdField()
    sku = IdField()
    device_id = DeviceIdField(trim_whitespace=True)
    term_days = StrictIntegerField(
        min_value=0, max_value=TERM_DAYS_MAX, required=False, allow_null=True
    )
    api_quota = StrictIntegerField(
        min_value=0, max_value=API_QUOTA_MAX, required=False, allow_null=True
    )
    max_streams = StrictIntegerField(
        min_value=1, max_value=MAX_STREAMS_MAX, required=False, allow_null=True
    )
    activation = serializers.ChoiceField(
        choices=License.Activation.values, default=License.Activation.OPTIONAL
    )
    max_offline_days = StrictIntegerField(
        min_value=1,
        max_value=MAX_OFFLINE_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="Check-in lease: days a camera may run analytics without a sync (null: the "
        "SKU's).",
    )


class LicenseOut(serializers.ModelSerializer):
    license_id = serializers.CharField(source="id")
    expires_at = UnixField()
    unit_price = MoneyField(allow_null=True)

    class Meta:
        model = License
        fields = [
            "license_id",
            "token",
            "customer_id",
            "sku",
            "device_id",
            "activation",
            "expires_at",
            "unit_price",
            "currency",
            "max_offline_days",
        ]


class LicenseRegisterIn(BodyIn):
    token = StrictCharField(max_length=8192)


class LicenseRegisterOut(serializers.ModelSerializer):
    license_id = serializers.CharField(source="id")
    expires_at = UnixField()
    kid = serializers.SerializerMethodField()
    registered = serializers.SerializerMethodField()

    class Meta:
        model = License
        fields = [
            "license_id",
            "customer_id",
            "sku",
            "device_id",
            "expires_at",
            "kid",
            "registered",
        ]

    def get_kid(self, lic: License) -> str:
        return lic.claims.get("kid", "")

    def get_registered(self, lic: License) -> bool:
        return True


class RevokeIn(BodyIn):
    license_id = IdField()
    reason = StrictCharField(required=False, default="", allow_blank=True, max_length=500)


class HoldIn(BodyIn):
    """What a suspension or reinstatement names: exactly one of a licence, a batch (all
    its units) or a customer (all its licences)."""

    one_of = [
        {
            "required": [name],
            "not": {"anyOf": [{"required": [other]} for other in names if other != name]},
        }
        for names in [("license_id", "batch_id", "customer_id")]
        for name in names
    ]
    license_id = IdField(required=False)
    batch_id = IdField(required=False)
    customer_id = IdField(required=False)


class SuspendIn(HoldIn):
    one_of = HoldIn.one_of
    reason = StrictCharField(max_length=500, help_text="Why (an unpaid invoice, a dispute).")


class ReinstateIn(HoldIn):
    one_of = HoldIn.one_of
    # Required (blank allowed) so that the body is: an empty request names nothing.
    reason = StrictCharField(
        allow_blank=True, max_length=500, help_text="Why, for the audit log (may be blank)."
    )


class HoldOut(serializers.Serializer):
    scope = serializers.CharField(source="kind", help_text="license, batch or customer.")
    target = serializers.CharField(help_text="The licence, batch or customer id named.")
    customer_id = serializers.CharField()
    suspended = serializers.BooleanField(help_text="Whether this hold now stands.")
    reason = serializers.CharField(allow_blank=True)
    suspended_at = serializers.IntegerField(help_text="Unix seconds; 0 when not suspended.")
    changed = serializers.BooleanField(
        help_text="False when it already was so (suspending again keeps the first time and "
        "reason; reinstating what is not suspended changes nothing)."
    )


class SeatReleaseIn(BodyIn):
    # The seat by its licence, or by batch and device: one way, not both (400 otherwise).
    one_of = [
        {
            "required": ["license_id"],
            "not": {"anyOf": [{"required": ["batch_id"]}, {"required": ["device_id"]}]},
        },
        {"required": ["batch_id", "device_id"], "not": {"required": ["license_id"]}},
    ]
    license_id = IdField(required=False)
    batch_id = IdField(required=False)
    device_id = DeviceIdField(required=False)
    reason = StrictCharField(max_length=500)


class SeatReleaseOut(serializers.Serializer):
    license_id = serializers.CharField(source="release.license_id")
    batch_id = serializers.CharField(source="release.batch_id")
    device_id = serializers.CharField(source="release.device_id")
    released_at = UnixField(source="release.released_at")
    reason = serializers.CharField(source="release.reason")
    already_released = serializers.BooleanField()
    batch_units_remaining = serializers.IntegerField()
    releases_in_window = serializers.IntegerField(
        help_text="Seats this batch released in the policy's window, this one included."
    )
    release_limit = serializers.IntegerField(help_text="Releases the policy allows per window.")
    window_days = serializers.IntegerField()


class RevokeOut(serializers.ModelSerializer):
    license_id = serializers.CharField(source="id")
    revoked = serializers.SerializerMethodField()
    revoked_at = UnixField()
    reason = serializers.CharField(source="revoke_reason")

    class Meta:
        model = License
        fields = ["license_id", "revoked", "revoked_at", "reason"]

    def get_revoked(self, lic: License) -> bool:
        return lic.revoked


class LicenseStatusQuery(serializers.Serializer):
    license_id = IdField(max_length=64, help_text="The licence the device holds.")
    device_id = DeviceIdField(help_text="The device asking (named in the signed status).")


# Named here too, for the views that read every licensing shape from this module.
FleetQuery = fleet_serializers.FleetQuery
FleetExportQuery = fleet_serializers.FleetExportQuery
FleetUnitOut = fleet_serializers.FleetUnitOut
FleetOut = fleet_serializers.FleetOut
RenewIn = renewal_serializers.RenewIn
RenewalOut = renewal_serializers.RenewalOut
RenewQuoteIn = renewal_serializers.RenewQuoteIn
RenewalQuoteOut = renewal_serializers.RenewalQuoteOut
ExpiringQuery = renewal_serializers.ExpiringQuery
ExpiringOut = renewal_serializers.ExpiringOut
ExpiringListOut = renewal_serializers.ExpiringListOut
AddOnIn = addon_serializers.AddOnIn
AddOnRemoveQuery = addon_serializers.AddOnRemoveQuery
AddOnGrantOut = addon_serializers.AddOnGrantOut
AddOnChangeOut = addon_serializers.AddOnChangeOut
AddOnListOut = addon_serializers.AddOnListOut
TrialConvertIn = trial_serializers.TrialConvertIn
TrialConversionOut = trial_serializers.TrialConversionOut
TrialConversionQuoteOut = trial_serializers.TrialConversionQuoteOut
