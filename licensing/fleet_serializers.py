"""The fleet's query and answer shapes (``GET /v1/admin/fleet``, its CSV export, and the
portal's ``GET /v1/customer/fleet``): an activated unit as
:func:`licensing.selectors.fleet_page` reads it. :mod:`licensing.serializers` names
them too, for the views that import them from there."""

from __future__ import annotations

from rest_framework import serializers

from config.api.fields import IdField, QueryIntegerField
from licensing.selectors import FLEET_CURSOR_MAX, FLEET_MAX
from svccore.claims import LAST_SECOND

NOT_SEEN_DAYS_MAX = 3660


def _not_seen_days() -> QueryIntegerField:
    return QueryIntegerField(
        required=False,
        min_value=0,
        max_value=NOT_SEEN_DAYS_MAX,
        help_text="Only units not seen for more than this many days (last status fetch, "
        "usage upload or activation before now minus the days), or never seen since "
        f"last-seen times were recorded; 0..{NOT_SEEN_DAYS_MAX}.",
    )


class FleetQuery(serializers.Serializer):
    customer_id = IdField(required=False, help_text="Only this customer's (404 if unknown).")
    batch_id = IdField(required=False, help_text="Only this batch's (404 if unknown).")
    weak_binding = serializers.ChoiceField(choices=["0", "1", "true", "false"], required=False)
    not_seen_days = _not_seen_days()
    before = QueryIntegerField(
        required=False,
        min_value=0,
        max_value=LAST_SECOND,
        help_text="Units activated before this Unix second. Whole seconds: paging by the "
        "last unit's activated_at skips the rest of its second; prefer cursor.",
    )
    cursor = serializers.RegexField(
        r"^[A-Za-z0-9_-]+$",
        required=False,
        max_length=FLEET_CURSOR_MAX,
        trim_whitespace=False,
        help_text="The next_cursor of a previous answer, as given: the units after its last "
        "one (order: activated_at, then activation id, newest first), none skipped or "
        "repeated. Opaque; not with before.",
    )
    limit = QueryIntegerField(
        required=False,
        min_value=1,
        max_value=FLEET_MAX,
        help_text=f"Units per answer, 1..{FLEET_MAX} (default {FLEET_MAX}).",
    )


class FleetExportQuery(serializers.Serializer):
    """The filters of ``GET /v1/admin/fleet.csv``: those of the fleet, without paging
    (the export is every unit they select)."""

    customer_id = IdField(required=False, help_text="Only this customer's (404 if unknown).")
    batch_id = IdField(required=False, help_text="Only this batch's (404 if unknown).")
    weak_binding = serializers.ChoiceField(choices=["0", "1", "true", "false"], required=False)
    not_seen_days = _not_seen_days()


def _flag(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=1, help_text=help_text)


class FleetUnitOut(serializers.Serializer):
    """An activated unit as ``licensing.selectors.fleet_page`` reads it (its fields are
    ``FLEET_UNIT``'s, in order: the CSV export's columns)."""

    device_id = serializers.CharField()
    license_id = serializers.CharField()
    batch_id = serializers.CharField()
    fingerprint_source = serializers.CharField(allow_blank=True)
    weak_binding = _flag("1 when the device reported a weak hardware binding.")
    sdk_version = serializers.CharField(allow_blank=True)
    activated_at = serializers.IntegerField(help_text="Unix seconds.")
    sku = serializers.CharField()
    customer_id = serializers.CharField()
    revoked = _flag("1 when the unit's licence is revoked.")
    seat_released = _flag("1 when an operator released this unit's seat (its licence is revoked).")
    transfer_of = serializers.CharField(
        allow_null=True,
        help_text="The released unit licence whose seat this activation took (a transfer, "
        "not billed), or null.",
    )
    last_seen_at = serializers.IntegerField(
        allow_null=True,
        help_text="Unix seconds of the unit's last status fetch, usage upload or activation, "
        "to within SVC_LAST_SEEN_MINUTES (default 15); null: never seen since last-seen "
        "times were recorded.",
    )
    max_offline_days = serializers.IntegerField(
        allow_null=True,
        help_text="The unit's check-in lease in days (its licence's, else its batch's, else "
        "its SKU's), or null: no lease (issue 42).",
    )
    lease_end = serializers.IntegerField(
        allow_null=True,
        help_text="Unix second its lease ends unless the camera syncs (its last check-in "
        "plus the lease), or null: no lease, or none handed out yet.",
    )
    suspended = _flag("1 while an operator suspends the unit's licence, batch or customer.")
    trial = _flag(
        "1 while the unit is on trial: activated from a trial batch not converted yet "
        "(issue 42); its term runs from its activation, unbilled."
    )
    trial_ends_at = serializers.IntegerField(
        allow_null=True,
        help_text="Unix second the unit's trial ends (its licence's end: analytics stop "
        "then unless the batch is converted), or null: not on trial.",
    )


class FleetOut(serializers.Serializer):
    units = FleetUnitOut(
        many=True, help_text="Most recent first (activated_at, then activation id), at most limit."
    )
    count = serializers.IntegerField(help_text="Units in this answer.")
    next_cursor = serializers.CharField(
        allow_null=True,
        help_text="Pass as cursor for the next page; null: no unit after this answer's last.",
    )
    as_of = serializers.IntegerField(help_text="Unix seconds of the answer.")
