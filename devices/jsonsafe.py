"""JSON parsing with its size and nesting bounded before the parser runs.

Everything a device parses before (or without) verifying a signature comes from someone
who may be hostile: an answer on the network path, a file the camera's owner edited, the
payload of a token whose key is looked up from that very payload. Python's parser
recurses once per level of nesting, so ``"[" * 100_000`` raises ``RecursionError``; a
few megabytes of JSON cost memory in proportion. :func:`loads` refuses both first,
without recursion: string literals are blanked out with one regular expression, then
only the bracket characters are scanned. ``NaN`` and ``Infinity``, which no document of
the authority holds, are refused too. Every refusal is a :class:`JSONRefused` (a
``ValueError``), which each caller turns into its coded ``LicenseError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 32  # the deepest document of the authority nests 3 levels

# A string literal, the loop unrolled (runs of plain characters, then one escape): three
# times faster than an alternation per character on a 0.5 MB page.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class JSONRefused(ValueError):
    """Input that is not bounded, well-formed JSON."""


def _no_constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a number any document holds")


def loads(
    data: bytes | bytearray | str,
    *,
    max_bytes: int,
    max_depth: int = MAX_DEPTH,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """The value of ``data`` (UTF-8 bytes or text) when it is at most ``max_bytes`` long,
    nests at most ``max_depth`` levels and is valid JSON; JSONRefused otherwise."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > max_bytes:
            raise JSONRefused(f"{len(data)} bytes; at most {max_bytes}")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONRefused(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    elif isinstance(data, str):
        if len(data) > max_bytes:
            raise JSONRefused(f"{len(data)} characters; at most {max_bytes}")
        text = data
    else:
        raise JSONRefused(f"not text but {type(data).__name__}")
    depth = 0
    for match in _BRACKETS.finditer(_STRINGS.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > max_depth:
                raise JSONRefused(f"nested deeper than {max_depth} levels")
        else:
            depth -= 1
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=object_pairs_hook)
    except (ValueError, RecursionError) as exc:
        raise JSONRefused(str(exc)) from None
