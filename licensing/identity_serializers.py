"""Shapes of the identity endpoints (issue 45): suspected clones and their evidence."""

from __future__ import annotations

from rest_framework import serializers

from config.api.fields import IdField


class ClonesQuery(serializers.Serializer):
    customer_id = IdField(required=False)


class OriginalOut(serializers.Serializer):
    device_id = serializers.CharField()
    activated_at = serializers.IntegerField(help_text="Its first activation: the original.")
    client_ip = serializers.CharField(allow_null=True)
    components = serializers.DictField(child=serializers.CharField())


class CloneOut(serializers.Serializer):
    suspicion_id = serializers.IntegerField()
    license_id = serializers.CharField()
    customer_id = serializers.CharField()
    batch_id = serializers.CharField()
    device_id = serializers.CharField(help_text="The device id the copy reported.")
    detected_at = serializers.IntegerField()
    client_ip = serializers.CharField(allow_null=True)
    components = serializers.DictField(
        child=serializers.CharField(), help_text="The copy's hashed components."
    )
    evidence = serializers.DictField(
        help_text="reason, and the component names matched, changed, missing and added; "
        "for the reason 'same components from two addresses' also first_address, "
        "second_address, moved_at, returned_at (Unix seconds), window_seconds and "
        "copy_client_ip."
    )
    evidence_text = serializers.CharField(help_text="The evidence in one line, for people.")
    addresses = serializers.ListField(
        child=serializers.CharField(),
        help_text="The two addresses the same components came from in turn (the copy's is "
        "client_ip); empty for components that diverge.",
    )
    original = OriginalOut()
    copy_revoked_at = serializers.IntegerField(allow_null=True)


class ClonesOut(serializers.Serializer):
    clones = CloneOut(many=True)
