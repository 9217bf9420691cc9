"""JSON parsing with its size and nesting bounded before the parser runs.

Everything a device parses before (or without) verifying a signature comes from someone
who may be hostile: an answer on the network path, a file the camera's owner edited, the
payload of a token whose key is looked up from that very payload. Python's parser
recurses once per level of nesting, so ``"[" * 100_000`` raises ``RecursionError``; a
few megabytes of JSON cost memory in proportion. :func:`loads` refuses both first,
without recursion and in linear time. ``NaN`` and ``Infinity``, which no document of the
authority holds, are refused too. Every refusal is a :class:`JSONRefused` (a
``ValueError``), which each caller turns into its coded ``LicenseError``.

The nesting is measured on the UTF-8 bytes, where no byte of a multi-byte character can
be a quote, a backslash or a bracket: escape pairs (``\\x``) are dropped, the text
between quotes (the strings) is dropped, every other byte but a bracket is dropped and
``{}`` are folded onto ``[]``. What remains is the bracket skeleton of the document; each
``bytes.replace(b"[]", b"")`` removes exactly one level of it. A document nesting at most
``max_depth`` levels is then empty after ``max_depth`` rounds; anything left over nests
deeper or does not pair up (unclosed brackets count: the parser recurses into them before
it finds the end missing). All of it runs in C: a 2 MiB revocation page costs a few
milliseconds beside the ten ``json.loads`` takes, and no input costs more than its
length times ``max_depth``. Where the text is not valid JSON, the skeleton can differ
from the parser's view only past the point where the parser stops with an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 32  # the deepest document of the authority nests 3 levels

_KEPT = b'"[]{}'
_NOT_KEPT = bytes(b for b in range(256) if b not in _KEPT)
_FOLD_BRACES = bytes.maketrans(b"{}", b"[]")


class JSONRefused(ValueError):
    """Input that is not bounded, well-formed JSON."""


def _no_constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a number any document holds")


def _nesting_problem(raw: bytes, max_depth: int) -> str:
    """Why ``raw`` (UTF-8) could make the parser recurse past ``max_depth``; "" if not."""
    if b"\\" in raw:
        # Backslashes pair up from the left within a run; a lone one left over escapes the
        # next byte, which matters here only when it is a quote.
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Two adjacent quotes hold no bracket between them, whether they open and close one
    # string or close one and open the next: dropping them changes neither what lies
    # outside the strings nor the parity of the quotes after them.
    quotes_and_brackets = raw.translate(_FOLD_BRACES, _NOT_KEPT).replace(b'""', b"")
    skeleton = b"".join(quotes_and_brackets.split(b'"')[::2])
    for _ in range(max_depth):
        if not skeleton:
            return ""
        inner_removed = skeleton.replace(b"[]", b"")
        if len(inner_removed) == len(skeleton):
            return "brackets that are not closed or do not pair up"
        skeleton = inner_removed
    return f"nested deeper than {max_depth} levels" if skeleton else ""


def loads(
    data: bytes | bytearray | str,
    *,
    max_bytes: int,
    max_depth: int = MAX_DEPTH,
    what: str = "document",
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """The value of ``data`` (UTF-8 bytes or text) when it is at most ``max_bytes`` long,
    nests at most ``max_depth`` levels and is valid JSON; JSONRefused, whose message
    names ``what``, otherwise."""
    if isinstance(data, str):
        if len(data) > max_bytes:
            raise JSONRefused(f"{what} is {len(data)} characters; at most {max_bytes} bytes")
        text, raw = data, data.encode("utf-8", "surrogatepass")
    elif isinstance(data, (bytes, bytearray)):
        text, raw = None, bytes(data)
    else:
        raise JSONRefused(f"{what} is not text but {type(data).__name__}")
    if len(raw) > max_bytes:
        raise JSONRefused(f"{what} is {len(raw)} bytes; at most {max_bytes}")
    if text is None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONRefused(f"{what} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    problem = _nesting_problem(raw, max_depth)
    if problem:
        raise JSONRefused(f"{what} holds {problem}")
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=object_pairs_hook)
    except (ValueError, RecursionError) as exc:
        raise JSONRefused(f"{what} is not valid JSON: {exc}") from None
