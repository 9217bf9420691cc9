"""What the OpenAPI schema (drf-spectacular; ``/openapi.json`` with ``SVC_PUBLIC_DOCS=1``)
shares across the API: the error body, the error answers of every endpoint, the
credentials, and the rules of the strings the API accepts.

The views are plain ``APIView``s, so each method states its request and answers with
``extend_schema``; the pieces they repeat live here. The string rules are derived from
the very checks the API runs (:func:`svccore.claims.device_id_problem` for device ids,
DRF's NUL, trimming, blank and length checks) and written as patterns, so that a string
the schema admits is one the API accepts, and the other way round, as far as a pattern
can say it; ids (``str.isprintable``) are the format ``printable``, described in words.
``tests/test_fuzz_api.py`` holds the API to all of it.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from svccore.claims import DEVICE_ID_MAX, DEVICE_ID_REFUSED_CATEGORIES

UNIT_TOKEN_AUTH = [{"UnitToken": []}]
NO_AUTH: list[dict[str, list[str]]] = []

# The operator key's scheme (AdminKey) comes from its authentication class
# (operators.schema); the unit token is checked by the device views themselves.
SECURITY_SCHEMES = {
    "UnitToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "SVC1 unit licence token",
        "description": "The unit token a camera got from POST /v1/activate.",
    },
}


class UnixFieldExtension(OpenApiSerializerFieldExtension):
    """``config.api.fields.UnixField``: an integer."""

    target_class = "config.api.fields.UnixField"

    def map_serializer_field(self, auto_schema, direction):
        description = self.target.help_text or "Unix seconds; 0: never."
        return {"type": "integer", "minimum": 0, "description": str(description)}


class ErrorOut(serializers.Serializer):
    """Every error of the API (spec §7), including malformed JSON, wrong types, unknown
    /v1 routes, 405 and 500."""

    detail = serializers.CharField(
        help_text="What went wrong, for a human operator, with the ids and numbers needed to act."
    )
    code = serializers.CharField(
        required=False,
        help_text="A stable code to branch on, on the refusals that have one (e.g. "
        "TRIAL_USED at activation); absent otherwise.",
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
    415: "The body is not JSON (Content-Type other than application/json).",
}
QUERY_ERRORS = {400: "A query parameter out of its bounds (the detail names it)."}
ADMIN_ERRORS = {
    401: "X-Admin-Key header missing.",
    403: "X-Admin-Key is not valid.",
    429: "Too many wrong X-Admin-Key attempts from this address; retry after Retry-After seconds.",
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
    """An id in a path (``config.api.converters``): printable, else no route (404)."""
    return OpenApiParameter(
        name, ID_SCHEMA, OpenApiParameter.PATH, required=True, description=description
    )


# --- the rules of strings ----------------------------------------------------------------
#
# Patterns name code points as \uXXXX, which Python's re, the Rust regex crate and
# ECMA-262 read alike; none of them writes a code point outside the BMP the same way, so
# the few refused ones there (format characters such as U+E0001) are only in the words,
# as are lone surrogates (a JSON \uD800 escape), which DRF refuses in any string and
# which a class range of surrogates would make generators stumble on.

PRINTABLE = "printable"  # the format of ids: Python's str.isprintable, see Id below


def _ranges(refused: Callable[[str], bool]) -> str:
    """The BMP code points ``refused`` is true for, as the ranges of a character class."""
    parts, start = [], None
    for code in range(0x10001):
        inside = code <= 0xFFFF and refused(chr(code))
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            last = code - 1
            first = f"\\u{start:04X}"
            parts.append(first if start == last else f"{first}-\\u{last:04X}")
            start = None
    return "".join(parts)


def _device_id_refused(char: str) -> bool:
    return unicodedata.category(char) in DEVICE_ID_REFUSED_CATEGORIES


@functools.cache
def _classes() -> dict[str, str]:
    return {
        "space": _ranges(str.isspace),
        "device_refused": _ranges(_device_id_refused),
    }


@functools.cache
def trimmed_pattern(refused: str, max_length: int | None, allow_blank: bool) -> str:
    """A string DRF trims (``str.strip``) and then checks: what is left holds none of the
    code points of the class ``refused`` and is at most ``max_length`` long; blank (only
    whitespace) only when ``allow_blank``. The length is in the pattern because DRF
    measures the trimmed string; the empty string is left out, since drf-spectacular
    adds it beside the pattern of a field that allows blanks."""
    space = _classes()["space"]
    edge, inside = f"[^{refused}{space}]", f"[^{refused}]"
    if max_length == 1:
        content = edge
    elif max_length:
        content = f"{edge}(?:{inside}{{0,{max_length - 2}}}{edge})?"
    else:
        content = f"{edge}(?:{inside}*{edge})?"
    around = f"[{space}]*"
    if allow_blank:
        return f"^(?:[{space}]+|{around}{content}{around})$"
    return f"^{around}{content}{around}$"


def surrounded_by_space(content: str) -> str:
    """A pattern for ``content`` with any whitespace around it (which DRF trims)."""
    space = _classes()["space"]
    return f"^[{space}]*{content}[{space}]*$"


# Components referenced by the fields below and by path parameters; added to the schema
# by :func:`add_components` (a postprocessing hook, SPECTACULAR_SETTINGS).
ID_SCHEMA = {"$ref": "#/components/schemas/Id"}
DEVICE_ID_SCHEMA = {"$ref": "#/components/schemas/DeviceId"}
TRIMMED_DEVICE_ID_SCHEMA = {"$ref": "#/components/schemas/TrimmedDeviceId"}


def _ipv6() -> str:
    """An IPv6 address as RFC 3986 writes one (hex groups, "::", a trailing IPv4 address
    without leading zeros), which Python's ipaddress reads too."""
    h16 = "[0-9A-Fa-f]{1,4}"
    octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
    ls32 = f"(?:{h16}:{h16}|{octet}(?:\\.{octet}){{3}})"
    after = [
        *(f"(?:{h16}:){{{n}}}{ls32}" for n in (5, 4, 3, 2, 1)),
        ls32,
        h16,
        "",
    ]
    forms = [f"(?:{h16}:){{6}}{ls32}"]
    for before, tail in enumerate(after):
        head = f"(?:(?:{h16}:){{0,{before - 1}}}{h16})?" if before else ""
        forms.append(f"{head}::{tail}")
    return "(?:" + "|".join(forms) + ")"


_PORT = "(?:0*(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))"


@functools.cache
def url_pattern() -> str:
    """An absolute http(s) URL (``config.api.fields.UrlField``): the scheme in any case, a
    host (no white space, control or format character, nor any of ``/?#@:[]``, or an
    IPv6 address in brackets), an optional port 0-65535, then an optional path, query or
    fragment without control or format characters; nothing around it. What
    ``urllib.parse.urlsplit`` reads without an error, with no user info."""
    refused, space = _classes()["device_refused"], _classes()["space"]
    host = f"(?:[^{refused}{space}/?#@:\\[\\]]+|\\[{_ipv6()}\\])"
    rest = f"(?:[/?#](?:[^{refused}]*[^{refused}{space}])?)?"
    return f"^[Hh][Tt][Tt][Pp][Ss]?://{host}(?::{_PORT}?)?{rest}$"


def components() -> dict[str, dict[str, Any]]:
    refused = _classes()["device_refused"]
    return {
        "Id": {
            "type": "string",
            "minLength": 1,
            "format": PRINTABLE,
            "description": "An identifier (customer, batch, licence, SKU, invoice number): "
            "printable characters (format 'printable': Python's str.isprintable, so no "
            "control, format, private-use or unassigned code point and no separator but "
            "the space), not only whitespace, which is trimmed in a body.",
        },
        "DeviceId": {
            "type": "string",
            "minLength": 1,
            "maxLength": DEVICE_ID_MAX,
            "pattern": f"^[^{refused}]+$",
            "description": f"A device id: 1-{DEVICE_ID_MAX} characters, none of them a "
            "control or format character (Unicode Cc, Cf: NUL, ESC, the bidi overrides, "
            "zero-width characters, also those outside the BMP) or a surrogate.",
        },
        "TrimmedDeviceId": {
            "type": "string",
            "pattern": trimmed_pattern(refused, DEVICE_ID_MAX, False),
            "description": f"A device id (see DeviceId) after surrounding whitespace is "
            f"trimmed: 1-{DEVICE_ID_MAX} characters, no control or format character.",
        },
    }


TRIMMED = "x-trimmed"  # marks a string whose length is in its pattern (DRF trims it)


def _drop_raw_lengths(node: Any) -> None:
    # drf-spectacular adds maxLength from the field after the extension ran; of a trimmed
    # string it would bound the whitespace DRF drops too.
    if isinstance(node, dict):
        if node.pop(TRIMMED, False):
            node.pop("maxLength", None)
            node.pop("minLength", None)
        for value in node.values():
            _drop_raw_lengths(value)
    elif isinstance(node, list):
        for value in node:
            _drop_raw_lengths(value)


def add_components(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: the string components and the security schemes; lengths of
    trimmed strings only in their patterns."""
    _drop_raw_lengths(result)
    found = result.setdefault("components", {})
    found.setdefault("schemas", {}).update(components())
    found.setdefault("securitySchemes", {}).update(SECURITY_SCHEMES)
    return result


class BodyInExtension(OpenApiSerializerExtension):
    """An operator's request body (``config.api.fields.BodyIn``) takes no field it does not
    name: ``additionalProperties: false``, as the service answers (400 naming them). A
    body whose service takes one of several sets of fields states them as ``one_of``
    (JSON Schema ``oneOf`` branches, e.g. ``{"required": [...]}``)."""

    target_class = "config.api.fields.BodyIn"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        one_of = getattr(self.target, "one_of", None)
        if one_of and direction == "request":
            schema["oneOf"] = one_of
        return schema


# --- fields ------------------------------------------------------------------------------


class StrictCharFieldExtension(OpenApiSerializerFieldExtension):
    """A string field of a request: DRF refuses NUL in it, and trims it before it checks
    that it is not blank and not too long (:func:`trimmed_pattern`)."""

    target_class = "config.api.fields.StrictCharField"
    match_subclasses = True
    priority = 0

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        schema = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        if direction == "request" and field.trim_whitespace:
            schema[TRIMMED] = True
            schema["pattern"] = trimmed_pattern("\\u0000", field.max_length, field.allow_blank)
        elif direction == "request":
            schema["pattern"] = "^[^\\u0000]+$"
        return schema


class ReportedTextFieldExtension(OpenApiSerializerFieldExtension):
    """Text a device reports: trimmed like any string, and after trimming no control or
    format character (the device id's rule)."""

    target_class = "config.api.fields.ReportedTextField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        schema = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        if direction == "request":
            refused = _classes()["device_refused"]
            schema[TRIMMED] = True
            schema["pattern"] = trimmed_pattern(refused, field.max_length, field.allow_blank)
        return schema


class IdFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "config.api.fields.IdField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        if direction == "request" and field.max_length:
            # An id of the client's choosing with a bound: printable, the bound on the
            # trimmed string (in the pattern, with the NUL DRF refuses).
            return {
                "type": "string",
                "format": PRINTABLE,
                "pattern": trimmed_pattern("\\u0000", field.max_length, False),
                TRIMMED: True,
            }
        return dict(ID_SCHEMA)


class PatternCharFieldExtension(OpenApiSerializerFieldExtension):
    """``config.api.fields.PatternCharField``: the pattern the service checks the trimmed
    string against, with the white space DRF trims around it."""

    target_class = "config.api.fields.PatternCharField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        schema = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        if direction == "request":
            schema[TRIMMED] = True
            schema["pattern"] = surrounded_by_space(field.content)
        return schema


class UrlFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "config.api.fields.UrlField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["pattern"] = url_pattern()
        return schema


class DeviceIdFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "config.api.fields.DeviceIdField"
    match_subclasses = True
    priority = 1

    def map_serializer_field(self, auto_schema, direction):
        return dict(TRIMMED_DEVICE_ID_SCHEMA if self.target.trim_whitespace else DEVICE_ID_SCHEMA)
