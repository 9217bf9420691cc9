"""The API's JSON parser: DRF's, behind a check of how deeply the body nests.

Python's JSON decoder recurses once per level of nesting, so a body of 100,000 ``[``
ends in RecursionError (a 500) after the whole stack has been spent. The body is refused
before it is decoded when its arrays and objects nest deeper than :data:`JSON_MAX_DEPTH`
(400 ``JSON nested deeper than 32 levels``); no request of this API nests deeper than 4.

The body's size is bounded before this runs: DRF reads it through ``request.body``,
which raises RequestDataTooBig past ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (413, see
``config.errors``).
"""

from __future__ import annotations

import codecs
import functools
import re
from typing import Any

from rest_framework import exceptions, parsers
from rest_framework.utils import json

JSON_MAX_DEPTH = 32

# The nesting of a body, as bytes: its brackets as "(" and ")" and its quotes, the rest
# deleted, by one table and one C loop (bytes.translate).
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_NESTING = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_STRING = re.compile(rb'"[^"]*(?:"|\Z)')  # an unterminated string runs to the end


def _nesting(body: bytes) -> bytes:
    """The brackets and quotes of a UTF-8 JSON body, brackets as "(" and ")", with the
    escaped quotes dropped (an escaped quote neither opens nor closes a string)."""
    if b"\\" in body:
        # Escaped backslashes go first, escaped quotes second: a string that ends in
        # an escaped backslash still ends at the quote after it. Other escapes (n, t,
        # u...) hold no bracket or quote.
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return body.translate(_PARENS, _NOT_NESTING)


def _outside_strings(nesting: bytes) -> bytes:
    """``nesting`` without its strings: only the brackets outside them are left."""
    if b'"' in nesting:
        # Strings without a bracket are now two quotes in a row; dropping every pair of
        # adjacent quotes keeps the others paired, so only strings that hold a bracket
        # (rare) are left for the regular expression.
        nesting = nesting.replace(b'""', b"")
        if b'"' in nesting:
            nesting = _STRING.sub(b"", nesting)
    return nesting


def _prefix_depth_exceeds(nesting: bytes, limit: int) -> bool:
    depth = 0
    for byte in nesting:
        if byte == 40:  # "("
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def json_too_deep(body: bytes, limit: int = JSON_MAX_DEPTH) -> bool:
    """Whether the arrays and objects of a UTF-8 JSON ``body`` nest deeper than
    ``limit``, found without decoding it: brackets inside strings do not count.

    Every step is a C loop over bytes: one ``bytes.translate`` keeps the brackets and
    quotes, and a body with no more than ``limit`` opening brackets cannot nest deeper
    (an activation's 600 bytes: well under a microsecond). Otherwise the strings are
    dropped and the innermost pairs removed, one level per ``bytes.replace``: balanced
    brackets are gone after as many passes as they are deep. Unbalanced brackets (not
    JSON anyway) are measured exactly by a loop that stops at ``limit`` + 1."""
    nesting = _nesting(body)
    if nesting.count(b"(") <= limit:
        return False
    nesting = _outside_strings(nesting)
    if b"(" * (limit + 1) in nesting:
        return True
    remaining = nesting
    for _ in range(limit):
        if not remaining:
            return False
        shorter = remaining.replace(b"()", b"")
        if len(shorter) == len(remaining):
            return _prefix_depth_exceeds(nesting, limit)
        remaining = shorter
    return bool(remaining)


class NestedTooDeep(exceptions.APIException):
    # Not config.errors.InvalidInput: DRF imports this module while config.errors is
    # importing DRF's views.
    status_code = 400
    default_code = "nested_too_deep"


@functools.lru_cache(maxsize=16)
def _is_utf8(encoding: str) -> bool:
    return codecs.lookup(encoding).name == "utf-8"


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser after :func:`json_too_deep` (400 past :data:`JSON_MAX_DEPTH`);
    otherwise the same: the body's charset, NaN and Infinity refused, "JSON parse
    error - ..." for what does not decode."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})
        body = stream.read() if stream is not None else b""
        try:
            text = body.decode(encoding)
            # The scan reads UTF-8 (where no byte of a multi-byte character is ASCII);
            # a body in another charset is scanned re-encoded.
            scanned = body if _is_utf8(encoding) else text.encode("utf-8", "surrogatepass")
            if json_too_deep(scanned):
                raise NestedTooDeep(f"JSON nested deeper than {JSON_MAX_DEPTH} levels")
            parse_constant = json.strict_constant if self.strict else None
            return json.loads(text, parse_constant=parse_constant)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
            raise parsers.ParseError(f"JSON parse error - {exc}") from None
