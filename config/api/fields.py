"""Serializer fields shared by the API. In: fields stricter than DRF's defaults ("10" or
true is not an integer), and :func:`validated`, which checks a body against a serializer
without building its fields anew for every request. Out: Unix seconds, and exact numbers
(money with its currency's decimals, contract §6) that the renderer writes digit for
digit (``config.api.renderers``)."""

from __future__ import annotations

import contextvars
import functools
import re
import threading
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from config.api.schema import url_pattern
from svccore import money
from svccore.claims import control_character_problem, device_id_problem
from svccore.timeunits import unix

_prototypes: dict[type[serializers.Serializer], serializers.Serializer] = {}
_prototypes_lock = threading.Lock()


def _prototype(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    prototype = _prototypes.get(serializer_class)
    if prototype is None:
        with _prototypes_lock:
            prototype = _prototypes.setdefault(serializer_class, serializer_class())
            prototype.fields  # noqa: B018 - build the bound fields once, under the lock
    return prototype


def rendered(serializer_class: type[serializers.Serializer], instance: Any) -> Any:
    """``instance`` as ``serializer_class`` renders it (``Serializer(instance).data``
    without its cost): making a serializer deep-copies its fields, 110-150 µs for an
    activation's answer against 7 µs to render through one shared instance, which keeps
    no state while it renders (a price's currency travels in a context variable)."""
    return _prototype(serializer_class).to_representation(instance)


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """``data`` checked by ``serializer_class``: its validated data, or the
    ValidationError (400) of ``is_valid(raise_exception=True)``.

    A serializer deep-copies its declared fields each time one is made, which costs more
    than validating a small body, so one instance per class validates every request.
    Validation keeps no state on the instance (``run_validation`` only reads its fields),
    so sharing it across threads is safe."""
    prototype = _prototype(serializer_class)
    try:
        return prototype.run_validation(data)
    except ValidationError:
        pass
    # Refused: the usual path, for exactly the usual error body.
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class BodyIn(serializers.Serializer):
    """An operator's request body: a field the endpoint does not take is a 400 naming it
    and the fields it does take, not silently dropped (``customer_id`` for ``id`` would
    otherwise create a customer with a random id). Checked before the fields, so the
    answer names the misspelling rather than the field it stood for."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = [str(name) for name in data if name not in self.fields]
            if unknown:
                names = ", ".join(repr(name[:40]) for name in sorted(unknown)[:10])
                taken = ", ".join(name for name, field in self.fields.items()
                                  if not field.read_only)  # fmt: skip
                noun = "field" if len(unknown) == 1 else "fields"
                raise ValidationError(
                    {"non_field_errors": [f"unknown {noun} {names}: this endpoint takes {taken}"]}
                )
        return super().to_internal_value(data)


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


class PatternCharField(StrictCharField):
    """A string the service checks against a pattern (``content``, a regular expression
    of the trimmed string, as the service's own rule writes it): the schema states it
    (``config.api.schema.PatternCharFieldExtension``); the service refuses what does not
    match, with its own words."""

    def __init__(self, *, content: str, **kwargs) -> None:
        self.content = content
        super().__init__(**kwargs)


class UrlField(StrictCharField):
    """An absolute http(s) URL (:func:`config.api.schema.url_pattern`, which the schema
    states): white space around it is refused, not trimmed, and so is a URL that
    ``urlsplit`` would misread or fail on (a bracketed host that is no IPv6 address, a
    port that is no number, user info). Where it may point is the service's check."""

    default_error_messages = {
        "url": "must be https://host[:port][/path] (or http:// where allowed), with no "
        "user name or password, no white space around it and no control or format character"
    }

    def __init__(self, **kwargs) -> None:
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not _url().fullmatch(value):
            self.fail("url")
        return value


@functools.cache
def _url() -> re.Pattern[str]:
    return re.compile(url_pattern())


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


# --- out -------------------------------------------------------------------------------


class UnixField(serializers.Field):
    """Aware datetime out as Unix seconds; None (perpetual) as 0. Its schema is an
    integer (``config.api.schema.UnixFieldExtension``)."""

    def get_attribute(self, instance):
        # DRF renders None without calling to_representation; perpetual must be 0.
        value = super().get_attribute(instance)
        return 0 if value is None else value

    def to_representation(self, value) -> int:
        return value if isinstance(value, int) else unix(value)


class ExactDecimalField(serializers.DecimalField):
    """A number out exact, never rounded (:func:`svccore.money.exact`): at least
    ``places`` decimals and none of its trailing zeros beyond them (a quantity ``3`` or
    ``12.345``, a rate ``0.2``). ``max_digits`` and ``decimal_places`` only describe it in
    the schema."""

    def __init__(self, *, places: int = 0, **kwargs) -> None:
        self.places = places
        kwargs.setdefault("max_digits", 12)
        kwargs.setdefault("decimal_places", 2)
        super().__init__(coerce_to_string=False, read_only=True, **kwargs)

    def to_representation(self, value) -> Decimal:
        return money.exact(value, self.places)


def _currency_of(instance: Any) -> str | None:
    if isinstance(instance, Mapping):
        return instance.get("currency")
    return getattr(instance, "currency", None)


class MoneyField(ExactDecimalField):
    """An amount or price out with the decimals of its currency (:func:`svccore.money.amount`:
    ``630.00`` EUR, ``630`` JPY, ``0.0125`` EUR). The currency is the object's own, or,
    in a price nested in one (a tier, an invoice line), that of the :class:`InCurrency`
    object it is nested in."""

    def get_attribute(self, instance) -> Decimal | None:
        value = super().get_attribute(instance)
        if value is None:
            return None
        currency = _currency_of(instance) or _currency.get()
        if not currency:
            raise LookupError(f"{self.field_name}: no currency on the object or around it")
        return money.amount(value, currency)

    def to_representation(self, value: Decimal) -> Decimal:
        return value


_currency: contextvars.ContextVar[str | None] = contextvars.ContextVar("currency", default=None)


class InCurrency(serializers.Serializer):
    """An object with a ``currency`` whose nested prices are in it (a catalogue entry and
    its tiers, an invoice and its lines): the :class:`MoneyField` of a serializer nested in
    it reads the currency from here, through a context variable (per thread, so one
    shared serializer renders for every request)."""

    def to_representation(self, instance):
        token = _currency.set(_currency_of(instance))
        try:
            return super().to_representation(instance)
        finally:
            _currency.reset(token)
