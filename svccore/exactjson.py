"""JSON with every ``Decimal`` written as the exact number it holds (``630.00``,
``0.0125``), never through a float: the API's renderer (``config.api.renderers``) and
``svcctl --json`` write money with it. Standard library only.

Python's ``json`` cannot write a raw number, so :func:`encode` is a small encoder of the
same output as ``json.dumps`` with the same options (separators, indent, key order,
escaping, strict floats) that also knows Decimal; a non-finite Decimal is refused rather
than written as an invalid ``NaN``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any


def number(value: Decimal) -> str:
    """The JSON number ``value`` holds, in positional notation with all its digits:
    ``630.00``, ``0.0125``, ``1000`` for ``1E+3``. NaN and infinities are not JSON."""
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number")
    return format(value, "f")


def encode(
    value: Any,
    *,
    default: Callable[[Any], Any],
    indent: int | None = None,
    separators: tuple[str, str] = (",", ":"),
    sort_keys: bool = False,
    ensure_ascii: bool = False,
    allow_nan: bool = False,
) -> str:
    """``value`` as JSON text, as ``json.dumps`` would write it with these options, and a
    Decimal as its exact number (:func:`number`). ``default`` turns other objects into
    something JSON can hold, as ``JSONEncoder.default`` does."""
    item_separator, key_separator = separators
    string = encode_basestring_ascii if ensure_ascii else encode_basestring

    def scalar(obj: Any) -> str | None:
        if isinstance(obj, str):
            return string(obj)
        if obj is None:
            return "null"
        if obj is True:
            return "true"
        if obj is False:
            return "false"
        if isinstance(obj, int):
            return int.__repr__(obj)
        if isinstance(obj, float):
            if obj != obj or obj in (float("inf"), float("-inf")):
                if not allow_nan:
                    raise ValueError(f"Out of range float values are not JSON compliant: {obj}")
                return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
            return float.__repr__(obj)
        if isinstance(obj, Decimal):
            return number(obj)
        return None

    def key(obj: Any) -> str:
        if isinstance(obj, str):
            return obj
        text = scalar(obj)
        if text is None or isinstance(obj, Decimal):
            raise TypeError(f"keys must be str, int, float, bool or None, not {type(obj).__name__}")
        return text

    def chunks(obj: Any, level: int) -> Iterator[str]:
        text = scalar(obj)
        if text is not None:
            yield text
            return
        if isinstance(obj, dict | list | tuple):
            is_dict = isinstance(obj, dict)
            items = (sorted(obj.items()) if sort_keys else obj.items()) if is_dict else obj
            if not items:
                yield "{}" if is_dict else "[]"
                return
            if indent is None:
                newline = closing = ""
                between = item_separator
            else:
                newline = "\n" + " " * (indent * (level + 1))
                closing = "\n" + " " * (indent * level)
                between = item_separator + newline
            yield "{" if is_dict else "["
            yield newline
            for position, item in enumerate(items):
                if position:
                    yield between
                if is_dict:
                    name, item = item
                    yield string(key(name))
                    yield key_separator
                yield from chunks(item, level + 1)
            yield closing
            yield "}" if is_dict else "]"
            return
        yield from chunks(default(obj), level)

    return "".join(chunks(value, 0))
