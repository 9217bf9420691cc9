"""The API's JSON renderer: DRF's, except that a ``Decimal`` goes out as the exact JSON
number it holds (``630.00``, ``0.0125``), never through a float.

Money is a JSON number on the wire (spec §2.7, contract §6) and written with its
currency's decimals: the serializers shape each amount with :mod:`svccore.money`, this
renderer writes its digits as they are. A client that reads numbers as decimals
(``json.loads(..., parse_float=Decimal)``, as ``svcctl`` does) gets the amount exactly;
one that reads floats gets the same value it always did.

Python's ``json`` cannot write a raw number, so an answer holding a Decimal is written by
:func:`encode`, a small encoder of the same output (separators, indent, escaping, strict
floats) that also knows Decimal. Every other answer (the device hot paths among them)
takes DRF's C-accelerated path as before: its encoder stops at the first Decimal it
meets, and only then is the answer written again by :func:`encode`. Written here rather
than by simplejson's ``use_decimal``: no new dependency for about forty lines, output
byte-identical to DRF's for everything else, and a non-finite Decimal refused instead of
written as an invalid ``NaN``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

from rest_framework.compat import INDENT_SEPARATORS, LONG_SEPARATORS, SHORT_SEPARATORS
from rest_framework.renderers import JSONRenderer
from rest_framework.utils import encoders


class _DecimalMet(Exception):
    """The fast encoder met a Decimal: the answer needs the exact one."""


class _FloatFreeEncoder(encoders.JSONEncoder):
    """DRF's encoder, except that it refuses to turn a Decimal into a float."""

    def default(self, obj: Any) -> Any:
        if isinstance(obj, Decimal):
            raise _DecimalMet
        return super().default(obj)


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
    separators: tuple[str, str] = SHORT_SEPARATORS,
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
            items = obj.items() if is_dict else obj
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


class ExactJSONRenderer(JSONRenderer):
    """DRF's JSONRenderer with Decimals written exactly (see the module's docstring)."""

    encoder_class = _FloatFreeEncoder

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except _DecimalMet:
            pass
        indent = self.get_indent(accepted_media_type, renderer_context or {})
        if indent is None:
            separators = SHORT_SEPARATORS if self.compact else LONG_SEPARATORS
        else:
            separators = INDENT_SEPARATORS
        text = encode(
            data,
            default=encoders.JSONEncoder().default,
            indent=indent,
            separators=separators,
            ensure_ascii=self.ensure_ascii,
            allow_nan=not self.strict,
        )
        # As DRF does: JSON that is also a strict JavaScript subset.
        return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()
