"""What the customer endpoints read and answer: one class per shape, which the view
validates or renders with and which is the OpenAPI schema (no hand-built twin)."""

from __future__ import annotations

from rest_framework import serializers

from config.api.fields import BodyIn, PatternCharField, StrictCharField
from customers.models import Customer
from customers.services import CHOSEN_ID

# The choices of ``kind`` as CustomerIn states them (values only), for ENUM_NAME_OVERRIDES.
CUSTOMER_KINDS = Customer.Kind.values


class CustomerIn(BodyIn):
    name = StrictCharField(max_length=200)
    kind = serializers.ChoiceField(choices=CUSTOMER_KINDS)
    contact = StrictCharField(max_length=254, required=False, default="", allow_blank=True)
    billing_address = StrictCharField(
        max_length=500, required=False, default="", allow_blank=True, trim_whitespace=False,
        help_text="Postal address printed on invoices; lines separated by newlines.",
    )  # fmt: skip
    tax_id = StrictCharField(max_length=64, required=False, default="", allow_blank=True)
    country = StrictCharField(
        max_length=2, required=False, default="", allow_blank=True,
        help_text="ISO 3166 alpha-2 code of the country the customer is established in "
        "(empty: the seller's); decides the VAT category of its invoices.",
    )  # fmt: skip
    vat_id = StrictCharField(
        max_length=32, required=False, default="", allow_blank=True,
        help_text="VAT id; an EU one is checked (check digits, of the country).",
    )  # fmt: skip
    tax_exemption = StrictCharField(
        max_length=200, required=False, default="", allow_blank=True,
        help_text="Why the customer's invoices are VAT-exempt (empty: not exempt).",
    )  # fmt: skip
    id = PatternCharField(
        content=CHOSEN_ID.pattern,
        max_length=64,
        required=False,
        allow_null=True,
        help_text="Choose the id (1-59 of A-Z, 0-9, '-', '_'); stored with the CUST- prefix. "
        "Default: generated.",
    )


class CustomerPatchIn(BodyIn):
    """The fields an operator may change; those left out keep their value."""

    name = StrictCharField(max_length=200, required=False)
    contact = StrictCharField(max_length=254, required=False, allow_blank=True)
    billing_address = StrictCharField(
        max_length=500, required=False, allow_blank=True, trim_whitespace=False
    )
    tax_id = StrictCharField(max_length=64, required=False, allow_blank=True)
    country = StrictCharField(max_length=2, required=False, allow_blank=True)
    vat_id = StrictCharField(max_length=32, required=False, allow_blank=True)
    tax_exemption = StrictCharField(max_length=200, required=False, allow_blank=True)


class CustomerOut(serializers.ModelSerializer):
    """A customer as the API answers it (create and detail)."""

    customer_id = serializers.CharField(source="id")
    kind = serializers.ChoiceField(choices=CUSTOMER_KINDS)
    contact = serializers.CharField(allow_blank=True)

    class Meta:
        model = Customer
        fields = [
            "customer_id",
            "name",
            "kind",
            "contact",
            "billing_address",
            "tax_id",
            "country",
            "vat_id",
            "tax_exemption",
        ]
