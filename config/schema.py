"""What the OpenAPI schema (drf-spectacular; ``/openapi.json`` with ``SVC_PUBLIC_DOCS=1``)
shares across the API: the error body, the error answers of every endpoint, the
credentials, and the rules of the strings the API accepts.

The views are plain ``APIView``s, so each method states its request and answers with
``extend_schema``; the pieces they repeat live here. The string rules are written as
patterns derived from the very checks the API runs (``str.isprintable`` for ids,
:func:`svccore.claims.device_id_problem` for device ids, DRF's blank and NUL checks),
so a string the schema admits is one the API accepts, and the other way round.
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from collections.abc import Callable
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from svccore.claims import DEVICE_ID_MAX, DEVICE_ID_REFUSED_CATEGORIES

ADMIN_AUTH = [{"AdminKey": []}]
UNIT_TOKEN_AUTH = [{"UnitToken": []}]
NO_AUTH: list[dict[str, list[str]]] = []

SECURITY_SCHEMES = {
    "AdminKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Admin-Key",
        "description": "Operator key of /v1/admin/*: missing 401, wrong 403, compared in "
        "constant time; an address with too many wrong keys in 60 s gets 429.",
    },
    "UnitToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "SVC1 unit licence token",
        "description": "The unit token a camera got from POST /v1/activate.",
    },
}


class ErrorOut(serializers.Serializer):
    """Every error of the API (spec §7), including malformed JSON, wrong types, unknown
    /v1 routes, 405 and 500."""

    detail = serializers.CharField(
        help_text="What went wrong, for a human operator, with the ids and numbers needed "
        "to act."
    )


# --- answers ---------------------------------------------------------------------------

RETRY_AFTER = "Retry-After"


def errors(described: dict[int, str]) -> dict[int, OpenApiResponse]:
    """``{status: description}`` as error answers, each with the body ``{"detail"}``."""
    return {code: OpenApiResponse(ErrorOut, description=text) for code, text in described.items()}


DATABASE_UNAVAILABLE = {503: "The database cannot be reached; retry after Retry-After seconds."}
BODY_ERRORS = {
    400: "Malformed JSON, JSON nested deeper than 32 levels, a field of the wrong type or "
    "out of its bounds (the detail names it), or a value the database refuses.",
    413: "The body is larger than 512 KiB.",
}
QUERY_ERRORS = {400: "A query parameter out of its bounds (the detail names it)."}
ADMIN_ERRORS = {
    401: "X-Admin-Key header missing.",
    403: "X-Admin-Key is not valid.",
    429: "Too many wrong X-Admin-Key attempts from this address; retry after Retry-After "
    "seconds.",
    503: "The admin API is disabled (no SVC_ADMIN_KEY on the server), or the database "
    "cannot be reached (retry after Retry-After seconds).",
}


def retry_after(*statuses: int) -> OpenApiParameter:
    """The ``Retry-After`` header of answers that ask the client to come back later."""
    return OpenApiParameter(
        RETRY_AFTER,
        OpenApiTypes.INT,
        OpenApiParameter.HEADER,
        description="Seconds to wait before retrying.",
        response=list(statuses),
    )


def id_path(name: str, description: str) -> OpenApiParameter:
    """An id in a path (``config.converters``): printable, else no route (404)."""
    return OpenApiParameter(
        name, ID_SCHEMA, OpenApiParameter.PATH, required=True, description=description
    )


# --- the rules of strings ----------------------------------------------------------------


def _escape(code: int) -> str:
    # \uXXXX and \UXXXXXXXX read the same in Python's re and the Rust regex crate; JSON
    # Schema validators of other languages see BMP escapes they know.
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def _ranges(refused: Callable[[str], bool]) -> str:
    """The code points ``refused`` is true for, as the ranges of a character class."""
    parts, start = [], None
    for code in range(sys.maxunicode + 2):
        inside = code <= sys.maxunicode and refused(chr(code))
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            last = code - 1
            parts.append(_escape(start) if start == last else f"{_escape(start)}-{_escape(last)}")
            start = None
    return "".join(parts)


def _device_id_refused(char: str) -> bool:
    # Surrogates too: DRF refuses them in any string field.
    return unicodedata.category(char) in (*DEVICE_ID_REFUSED_CATEGORIES, "Cs")


@functools.cache
def patterns() -> dict[str, str]:
    """The patterns of :data:`COMPONENTS`, built once (a scan of every code point)."""
    unprintable = _ranges(lambda char: not char.isprintable())
    refused = _ranges(_device_id_refused)
    refused_or_space = _ranges(lambda char: _device_id_refused(char) or char.isspace())
    return {
        # Printable (str.isprintable), and more than spaces, which DRF trims away.
        "Id": f"^ *[^{unprintable} ][^{unprintable}]*$",
        # svccore.claims.device_id_problem: no control or format character.
        "DeviceId": f"^[^{refused}]*$",
        # The same, where DRF trims whitespace first: something must be left.
        "TrimmedDeviceId": f"^[^{refused}]*[^{refused_or_space}][^{refused}]*$",
    }


# Components referenced by the fields below and by path parameters; added to the schema
# by :func:`add_components` (a postprocessing hook, SPECTACULAR_SETTINGS).
ID_SCHEMA = {"$ref": "#/components/schemas/Id"}
DEVICE_ID_SCHEMA = {"$ref": "#/components/schemas/DeviceId"}
TRIMMED_DEVICE_ID_SCHEMA = {"$ref": "#/components/schemas/TrimmedDeviceId"}


def components() -> dict[str, dict[str, Any]]:
    built = patterns()
    return {
        "Id": {
            "type": "string",
            "minLength": 1,
            "pattern": built["Id"],
            "description": "An identifier (customer, batch, licence, SKU, invoice): printable "
            "characters (Python's str.isprintable: no control, format, separator other "
            "than space, private-use or unassigned code point), not only spaces.",
        },
        "DeviceId": {
            "type": "string",
            "minLength": 1,
            "maxLength": DEVICE_ID_MAX,
            "pattern": built["DeviceId"],
            "description": f"A device id: 1-{DEVICE_ID_MAX} characters, none of them a "
            "control or format character (Unicode Cc, Cf: NUL, ESC, the bidi overrides, "
            "zero-width characters).",
        },
        "TrimmedDeviceId": {
            "type": "string",
            "minLength": 1,
            "maxLength": DEVICE_ID_MAX,
            "pattern": built["TrimmedDeviceId"],
            "description": "A device id (see DeviceId), surrounding whitespace trimmed; not "
            "only whitespace.",
        },
    }


def add_components(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: the string components and the security schemes."""
    found = result.setdefault("components", {})
    found.setdefault("schemas", {}).update(components())
    found.setdefault("securitySchemes", {}).update(SECURITY_SCHEMES)
    return result


# --- fields ------------------------------------------------------------------------------

# DRF's CharField refuses NUL anywhere (and surrogates, never drawn by a JSON encoder that
# writes UTF-8); one that refuses blanks trims whitespace first.
_NO_NUL = "^[^\\u0000]*$"
_NOT_BLANK = "^[^\\u0000]*[^\\u0000\\s][^\\u0000]*$"


class StrictCharFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "config.fields.StrictCharField"
    match_subclasses = True
    priority = 0

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "request":
            blank_refused = not self.target.allow_blank and self.target.trim_whitespace
            schema["pattern"] = _NOT_BLANK if blank_refused else _NO_NUL
        return schema


class IdFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "config.fields.IdField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        return dict(ID_SCHEMA)


class DeviceIdFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "config.fields.DeviceIdField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        return dict(TRIMMED_DEVICE_ID_SCHEMA if self.target.trim_whitespace else DEVICE_ID_SCHEMA)


class UnixFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "licensing.serializers.UnixField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "integer", "minimum": 0, "description": "Unix seconds; 0: never."}
