"""What the customer endpoints read and answer: one class per shape, which the view
validates or renders with and which is the OpenAPI schema (no hand-built twin)."""

from __future__ import annotations

from rest_framework import serializers

from config.fields import StrictCharField
from customers.models import Customer

# The choices of ``kind`` as CustomerIn states them (values only), for ENUM_NAME_OVERRIDES.
CUSTOMER_KINDS = Customer.Kind.values


class CustomerIn(serializers.Serializer):
    name = StrictCharField(max_length=200)
    kind = serializers.ChoiceField(choices=CUSTOMER_KINDS)
    contact = StrictCharField(max_length=254, required=False, default="", allow_blank=True)
    id = StrictCharField(max_length=64, required=False, allow_null=True)


class CustomerOut(serializers.ModelSerializer):
    """A customer as the API answers it (create and detail)."""

    customer_id = serializers.CharField(source="id")
    kind = serializers.ChoiceField(choices=CUSTOMER_KINDS)
    contact = serializers.CharField(allow_blank=True)

    class Meta:
        model = Customer
        fields = ["customer_id", "name", "kind", "contact"]
