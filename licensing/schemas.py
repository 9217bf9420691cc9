"""The OpenAPI schema of licensing's endpoints: schema-only serializers for the answers
the views build as dicts (activation, revocation list, catalogue, fleet), nothing
validates or renders with them; and Unix-second fields as integers."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from licensing.serializers import ActivationRecordOut


def _money(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=12, decimal_places=2, coerce_to_string=False, **kwargs
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
    certificates = serializers.ListField(
        child=serializers.CharField(),
        help_text="Key certificates (SVCK1) chaining the signing keys to the devices' roots.",
    )


class RevocationPageOut(serializers.Serializer):
    """``?since=N``: the signed page continuing a list held at N."""

    revocations = serializers.CharField(help_text="The signed page (SVCR1).")
    seq = serializers.IntegerField(min_value=0, help_text="Sequence number the page ends at.")
    more = serializers.BooleanField(help_text="true: fetch again with since=seq.")
    as_of = serializers.IntegerField(help_text="Unix seconds the page was built.")
    certificates = serializers.ListField(child=serializers.CharField())


class RevocationFullOut(serializers.Serializer):
    """No ``since`` (older firmware): every listed licence id, and the signed first page."""

    revoked = serializers.ListField(child=serializers.CharField())
    as_of = serializers.IntegerField()
    seq = serializers.IntegerField(min_value=0)
    revocations = serializers.CharField(help_text="The signed first page (SVCR1).")
    certificates = serializers.ListField(child=serializers.CharField())


RevocationListOut = PolymorphicProxySerializer(
    component_name="RevocationList",
    serializers=[RevocationPageOut, RevocationFullOut],
    resource_type_field_name=None,
)


class UnitPriceTierOut(serializers.Serializer):
    from_units = serializers.IntegerField()
    unit_price = _money()


class OverageTierOut(serializers.Serializer):
    from_inferences = serializers.IntegerField()
    price_per_1000 = serializers.DecimalField(
        max_digits=12, decimal_places=4, coerce_to_string=False
    )


class SkuOut(serializers.Serializer):
    """A catalogue entry (contract §5)."""

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
    maintenance_rate = serializers.DecimalField(
        max_digits=6, decimal_places=4, coerce_to_string=False
    )


class CatalogueOut(serializers.Serializer):
    skus = SkuOut(many=True)


class FleetOut(serializers.Serializer):
    units = ActivationRecordOut(
        many=True, help_text="Most recent first (activated_at, then activation id), at most limit."
    )
    count = serializers.IntegerField(help_text="Units in this answer.")
    next_cursor = serializers.CharField(
        allow_null=True,
        help_text="Pass as cursor for the next page; null: no unit after this answer's last.",
    )
    as_of = serializers.IntegerField(help_text="Unix seconds of the answer.")


class UnixFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "licensing.serializers.UnixField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "integer", "minimum": 0, "description": "Unix seconds; 0: never."}


class LicenseRefreshOut(serializers.Serializer):
    license_id = serializers.CharField()
    token = serializers.CharField(help_text="The licence's current token (renewed).")
    expires_at = serializers.IntegerField(help_text="Its end, Unix seconds (0: perpetual).")
    certificates = serializers.ListField(
        child=serializers.CharField(),
        help_text="Key certificates (SVCK1) chaining the signing keys to the devices' roots.",
    )


class LicenseStatusOut(serializers.Serializer):
    """``GET /v1/revocations/status``: the signed status and, for display only, what it
    says."""

    status = serializers.CharField(
        help_text="The signed status (SVCS1: lic, dev, revoked, revoked_at, seq, iat, "
        "keys_revoked, kid); the only part a device believes."
    )
    license_id = serializers.CharField()
    device_id = serializers.CharField()
    revoked = serializers.BooleanField()
    revoked_at = serializers.IntegerField(help_text="Unix seconds; 0 when not revoked.")
    seq = serializers.IntegerField(help_text="The list's sequence number it was read at.")
    as_of = serializers.IntegerField(help_text="Unix seconds it was signed.")
    certificates = serializers.ListField(child=serializers.CharField())
