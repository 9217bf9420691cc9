"""The ``AdminKey`` security scheme in the OpenAPI schema, from the authentication class
itself (imported by ``OperatorsConfig.ready``, which registers it)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from operators.authentication import OperatorKeyAuthentication
from operators.identity import HEADER


class OperatorKeySchema(OpenApiAuthenticationExtension):
    """The ``AdminKey`` security scheme of every view this authentication guards."""

    target_class = OperatorKeyAuthentication
    name = "AdminKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": HEADER,
            "description": "Operator key of /v1/admin/*: missing 401, wrong 403, compared in "
            "constant time; an address with too many wrong keys in 60 s gets 429.",
        }
