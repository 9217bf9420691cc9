"""Serializer fields stricter than DRF's defaults: "10" or true is not an integer."""

from __future__ import annotations

from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"strict": "must be an integer, not {kind}."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("strict", kind=type(data).__name__)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"strict": "must be true or false, not {kind}."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("strict", kind=type(data).__name__)
        return data


class StrictCharField(serializers.CharField):
    default_error_messages = {"strict": "must be a string, not {kind}."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("strict", kind=type(data).__name__)
        return super().to_internal_value(data)
