"""The rule of a chosen customer id stated in the OpenAPI schema of ``CustomerIn`` (the
shapes themselves are ``customers.serializers``)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiSerializerExtension

from config.api.schema import TRIMMED, surrounded_by_space

# The ids customers.services.customer_create accepts (whitespace trimmed, upper-cased).
CUSTOMER_ID = "(?:[Cc][Uu][Ss][Tt]-)?[A-Za-z0-9_-]{1,59}"


class CustomerInExtension(OpenApiSerializerExtension):
    """``customers.serializers.CustomerIn`` with the rule ``customer_create`` applies to a chosen
    id: trimmed and upper-cased, A-Z, 0-9, '-' and '_', at most 59 after the ``CUST-``
    prefix (added when missing)."""

    target_class = "customers.serializers.CustomerIn"

    def map_serializer(self, auto_schema, direction):
        schema = super().map_serializer(auto_schema, direction)
        schema["properties"]["id"][TRIMMED] = True  # its length is in the pattern
        schema["properties"]["id"]["pattern"] = surrounded_by_space(CUSTOMER_ID)
        schema["properties"]["id"]["description"] = (
            "Optional operator-chosen id: 1-59 characters of A-Z, 0-9, '-' or '_' (lower "
            "case is upper-cased), stored as CUST-<id>; a CUST- prefix may be given. "
            "Absent or null: one is generated."
        )
        return schema
