from __future__ import annotations

from rest_framework import serializers

from billing.serializers import InvoiceListQuery, LicenseUsageOut
from config.api.fields import BodyIn, IdField, QueryIntegerField, StrictCharField, UnixField
from licensing.serializers import BatchStatusOut, FleetQuery
from portal.services import EMAIL

PAGE_MAX = 1000
KEYS_LISTED = 100


class InvitationIn(BodyIn):
    email = serializers.RegexField(
        EMAIL.pattern.removeprefix("\\A").removesuffix("\\Z").join("^$"),
        max_length=254,
        help_text="Where the invitation goes: an ASCII e-mail address.",
        error_messages={"invalid": "not an e-mail address"},
    )
    name = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


class InvitationOut(serializers.Serializer):
    invitation_id = serializers.IntegerField(source="pk")
    customer_id = serializers.CharField()
    email = serializers.CharField()
    name = serializers.CharField()
    state = serializers.CharField(help_text="pending, accepted, withdrawn or expired.")
    created_at = UnixField()
    expires_at = UnixField()
    invited_by = serializers.CharField()


class InvitationWithdrawnOut(InvitationOut):
    withdrawn_at = UnixField(help_text="When it was withdrawn.")
    withdrawn_by = serializers.CharField()


class CustomerKeyQuery(serializers.Serializer):
    customer_id = IdField(required=False, help_text="Only this customer's keys (404 if unknown).")
    state = serializers.ChoiceField(
        choices=["active", "revoked"], required=False, help_text="Only active or revoked keys."
    )
    limit = QueryIntegerField(
        required=False,
        default=KEYS_LISTED,
        min_value=1,
        max_value=PAGE_MAX,
        help_text=f"The newest keys, 1..{PAGE_MAX} (default {KEYS_LISTED}).",
    )


class CustomerKeyOut(serializers.Serializer):
    prefix = serializers.CharField(help_text="The key's id (not secret): svccu_<prefix>_...")
    name = serializers.CharField()
    customer_id = serializers.CharField()
    owner = serializers.CharField(
        source="owner_name",
        help_text="The portal user who created it (deactivating them revokes it); for a key "
        "made outside the portal, who created it, marked '(no portal user)'.",
    )
    created_by = serializers.CharField()
    created_at = UnixField()
    last_used_at = UnixField(help_text="Unix seconds (to the minute); 0: never used.")
    revoked_at = UnixField(help_text="Unix seconds; 0: active.")
    active = serializers.BooleanField()
    write = serializers.BooleanField(
        help_text="It may also upload air-gapped cameras' files (takes seats); else read-only."
    )


class CustomerKeyListOut(serializers.Serializer):
    keys = CustomerKeyOut(many=True, help_text="Newest first.")
    count = serializers.IntegerField()


class CustomerUsersOut(serializers.Serializer):
    users = serializers.ListField(
        child=serializers.DictField(), help_text="{email, name, created_at, active}"
    )
    invitations = InvitationOut(many=True)


class CustomerFleetQuery(FleetQuery):
    """The fleet's query without customer_id: a key reads its own customer's units."""

    customer_id = None


class PageQuery(serializers.Serializer):
    cursor = serializers.RegexField(
        r"^[A-Za-z0-9_-]{1,64}$", required=False, help_text="next_cursor of the page before."
    )
    limit = QueryIntegerField(required=False, default=100, min_value=1, max_value=PAGE_MAX)


class UsageQuery(PageQuery):
    license_id = IdField(required=False, help_text="One licence only.")


class CustomerInvoiceQuery(InvoiceListQuery):
    customer_id = None


class BatchPageOut(serializers.Serializer):
    batches = BatchStatusOut(many=True, help_text="Newest first.")
    next_cursor = serializers.CharField(allow_null=True)


class UsagePageOut(serializers.Serializer):
    licenses = LicenseUsageOut(many=True, help_text="Newest licence first.")
    next_cursor = serializers.CharField(allow_null=True)
