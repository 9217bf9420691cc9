"""Input validation shared by the API: serializer fields stricter than DRF's defaults
("10" or true is not an integer), and :func:`validated`, which checks a body against a
serializer without building its fields anew for every request."""

from __future__ import annotations

import re
import threading
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from svccore.claims import control_character_problem, device_id_problem

_prototypes: dict[type[serializers.Serializer], serializers.Serializer] = {}
_prototypes_lock = threading.Lock()


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """``data`` checked by ``serializer_class``: its validated data, or the
    ValidationError (400) of ``is_valid(raise_exception=True)``.

    A serializer deep-copies its declared fields each time one is made, which costs more
    than validating a small body, so one instance per class validates every request.
    Validation keeps no state on the instance (``run_validation`` only reads its fields),
    so sharing it across threads is safe."""
    prototype = _prototypes.get(serializer_class)
    if prototype is None:
        with _prototypes_lock:
            prototype = _prototypes.setdefault(serializer_class, serializer_class())
            prototype.fields  # noqa: B018 - build the bound fields once, under the lock
    try:
        return prototype.run_validation(data)
    except ValidationError:
        pass
    # Refused: the usual path, for exactly the usual error body.
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"strict": "must be an integer, not {kind}."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("strict", kind=type(data).__name__)
        return super().to_internal_value(data)


class QueryIntegerField(serializers.IntegerField):
    """An integer from a query string, written in ASCII digits (an optional minus, then
    0-9): Python's ``int`` would also take "１２" or "٣", and DRF's field "12.0"."""

    _DIGITS = re.compile(r"\A-?[0-9]{1,40}\Z")

    def to_internal_value(self, data):
        if isinstance(data, bool) or not (
            isinstance(data, int) or (isinstance(data, str) and self._DIGITS.match(data))
        ):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"strict": "must be true or false, not {kind}."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("strict", kind=type(data).__name__)
        return data


class _NoSurrogates(ProhibitSurrogateCharactersValidator):
    """DRF's check, by the UTF-8 codec instead of a Python loop over every character
    (a batch key is hundreds of characters long, checked on every activation)."""

    def __call__(self, value) -> None:
        try:
            str(value).encode("utf-8")
        except UnicodeEncodeError as exc:
            super().__call__(exc.object[exc.start : exc.end])


class StrictCharField(serializers.CharField):
    default_error_messages = {"strict": "must be a string, not {kind}."}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.validators = [
            _NoSurrogates() if isinstance(v, ProhibitSurrogateCharactersValidator) else v
            for v in self.validators
        ]

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("strict", kind=type(data).__name__)
        return super().to_internal_value(data)


class IdField(StrictCharField):
    """An identifier (customer, batch, licence, SKU): a string of printable characters
    (``str.isprintable``). A control, format or separator character (NUL, ESC, U+202E,
    U+2028...) is refused, named by its code point: no id holds one, and PostgreSQL
    refuses NUL in any text."""

    default_error_messages = {
        "unprintable": "must not contain non-printable characters; it has {code} at "
        "position {position}"
    }

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not value.isprintable():
            position, char = next((i, c) for i, c in enumerate(value) if not c.isprintable())
            self.fail("unprintable", code=f"U+{ord(char):04X}", position=position)
        return value


class ReportedTextField(StrictCharField):
    """Text a device reports about itself (fingerprint source, SDK version): no control
    or format character, as a device id (:func:`svccore.claims.control_character_problem`).
    It reaches the console and exports, where such characters would hide or reorder what
    an operator reads."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problem = control_character_problem(value)
        if problem:
            raise ValidationError(problem, code="invalid")
        return value


class DeviceIdField(StrictCharField):
    """A device id, checked by :func:`svccore.claims.device_id_problem` (its length, and
    no control or format character such as U+202E), the check every entry shares."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problem = device_id_problem(value)
        if problem:
            raise ValidationError(problem, code="invalid")
        return value
