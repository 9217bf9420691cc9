"""The add-on shapes (issue 42 item 4): a catalogue add-on (in a catalogue entry's
``addons``), adding one to a batch or a direct licence, and the grants of a batch or
licence. :mod:`licensing.serializers` names them too, for the views that import them
from there."""

from __future__ import annotations

from rest_framework import serializers

from config.api.fields import BodyIn, MoneyField, PatternCharField, StrictCharField, UnixField
from svccore.addons import CODE


class AddOnOut(serializers.Serializer):
    """An add-on of a catalogue entry (contract §5 addition): priced in the entry's
    currency."""

    code = serializers.CharField(help_text="Its name in requests, e.g. anpr.")
    name = serializers.CharField()
    modules = serializers.ListField(
        child=serializers.CharField(), help_text="Modules it switches on in ent."
    )
    extra_streams = serializers.IntegerField(help_text="Added to lim.max_streams.")
    extra_fps = serializers.IntegerField(help_text="Added to lim.max_fps.")
    extra_api_calls = serializers.IntegerField(
        help_text="Added to lim.api_calls (an unmetered licence stays unmetered)."
    )
    unit_price = MoneyField(
        help_text="Per unit per term_days of the SKU, billed pro rata for the rest of the "
        "term; per unit, once, for a perpetual SKU."
    )
    available = serializers.BooleanField(help_text="Offered for sale now.")


class AddOnIn(BodyIn):
    addon = PatternCharField(
        content=CODE.pattern,
        max_length=32,
        help_text="The code of one of the SKU's add-ons (the catalogue's addons).",
    )

    def validate_addon(self, value: str) -> str:
        if not CODE.fullmatch(value):
            raise serializers.ValidationError(
                "must be an add-on code: 1-32 lower case letters, digits, - or _"
            )
        return value


class AddOnRemoveQuery(serializers.Serializer):
    reason = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=500,
        help_text="Why, for the audit log and the event (may be blank).",
    )


class AddOnGrantOut(serializers.Serializer):
    """An add-on sold for a batch or a direct licence: the terms sold and its time."""

    addon = serializers.CharField(source="code")
    name = serializers.CharField()
    customer_id = serializers.CharField()
    sku = serializers.CharField()
    batch_id = serializers.CharField(allow_null=True)
    license_id = serializers.CharField(
        help_text="The batch key of a batch's add-on, or the direct licence."
    )
    modules = serializers.ListField(child=serializers.CharField())
    extra_streams = serializers.IntegerField()
    extra_fps = serializers.IntegerField()
    extra_api_calls = serializers.IntegerField()
    unit_price = MoneyField(help_text="As sold, in currency.")
    currency = serializers.CharField()
    term_days = serializers.IntegerField(
        help_text="The term the unit price is for; 0: billed once per unit (a perpetual SKU "
        "or a licence without an end)."
    )
    active = serializers.BooleanField()
    added_at = UnixField()
    removed_at = UnixField(help_text="Unix seconds; 0 while active.")
    remove_reason = serializers.CharField(allow_blank=True)


class AddOnChangeOut(AddOnGrantOut):
    """``POST``/``DELETE`` of an add-on: the grant, and whether this request changed it."""

    changed = serializers.BooleanField(
        help_text="False: it was already so (added while active, removed again); nothing changed."
    )
    expires_at = UnixField(
        help_text="The end of the batch or licence: a term add-on is billed pro rata to here "
        "(0: perpetual)."
    )


class AddOnListOut(serializers.Serializer):
    batch_id = serializers.CharField(allow_null=True)
    license_id = serializers.CharField()
    addons = AddOnGrantOut(many=True, help_text="Active first, then removed; newest first.")
