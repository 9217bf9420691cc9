"""The numbers a device and the service agree on, and the checks of what a device takes in
against them: one home for both.

The service refuses a usage record outside these bounds (contract §7), so the device
refuses to count past them and sets aside a spooled record beyond them instead of
sending it forever. Every time the device reads from its clock or a file must lie in
``0..LAST_SECOND``. Arguments are checked here before anything is counted, written or
sent; a bad one is :class:`~devices.errors.InvalidArgument` (``BAD_ARGUMENT``), with a
message that shows the value bounded (:func:`shown`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from .errors import InvalidArgument

LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z: the last Unix second a date holds
MAX_COUNTER = 10**12  # the largest value of one counter in one usage record
# The records the service processes per upload call (contract §7): the device sends at
# most this many at once, and the service answers the rest of a longer body ``deferred``.
MAX_RECORDS_PER_UPLOAD = 1000
# The longest a network call may be given: longer is a unit mix-up (ms for s), and a
# socket cannot wait past ~10^9 s anyway (OverflowError).
MAX_TIMEOUT_SECONDS = 86_400
_SHOWN_CHARS = 60  # the longest repr a message quotes


def is_real(value: Any) -> bool:
    """A finite ``int`` or ``float``, not a ``bool`` (an int of any size is finite:
    ``math.isfinite`` would raise OverflowError on one past the float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def shown(value: Any) -> str:
    """``value`` for a message, bounded: an integer past 64 bits by its number of digits
    (Python refuses to write out one of more than 4,300), anything else by a repr cut to
    a few dozen characters."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        magnitude = abs(value)
        digits = int((magnitude.bit_length() - 1) * math.log10(2)) + 1
        if magnitude >= 10**digits:
            digits += 1
        return f"a {'negative ' if value < 0 else ''}number of {digits} digits"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the real error
        return f"a {type(value).__name__}"
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def timeout_seconds(value: Any, name: str = "timeout") -> float:
    """``value`` as seconds to wait: a real number in ``(0, MAX_TIMEOUT_SECONDS]``."""
    if not is_real(value) or not 0 < value <= MAX_TIMEOUT_SECONDS:
        raise InvalidArgument(
            f"{name} must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS} "
            f"(one day), not {shown(value)}"
        )
    return float(value)


def path_argument(value: Any, name: str) -> Path:
    """``value`` as a path this system can open: text or a path object, not empty, no NUL
    character, encodable as a file name (checked here, so the OS call that would raise
    ValueError on it is never reached)."""
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidArgument(f"{name} must be a path, not {type(value).__name__}")
    try:
        text = os.fspath(value)
    except Exception:  # a path object whose __fspath__ fails
        raise InvalidArgument(f"{name} is a path object that gives no path") from None
    if not isinstance(text, str) or not text:
        raise InvalidArgument(f"{name} must be a non-empty text path, not {shown(text)}")
    if "\x00" in text:
        raise InvalidArgument(f"{name} holds a NUL character, which no file name can")
    try:
        os.fsencode(text)
    except UnicodeError:
        raise InvalidArgument(
            f"{name} holds characters this system cannot put in a file name"
        ) from None
    return Path(text)


def check_engine_arguments(
    *, device_id: Any, device_id_max: int, clock: Any, air_gapped: Any, clock_leeway: Any
) -> None:
    """The arguments of :class:`devices.Engine` beside its state directory."""
    if device_id is not None and (
        not isinstance(device_id, str) or not 0 < len(device_id) <= device_id_max
    ):
        raise InvalidArgument(
            f"device_id must be a string of 1-{device_id_max} characters or None, not "
            f"{shown(device_id)}"
        )
    if not callable(clock):
        raise InvalidArgument("clock must be a callable returning Unix seconds")
    if type(air_gapped) is not bool:  # "no" is truthy: it must not switch checks off
        raise InvalidArgument(f"air_gapped must be True or False, not {shown(air_gapped)}")
    if not is_real(clock_leeway) or not 0 <= clock_leeway <= LAST_SECOND:
        raise InvalidArgument(
            f"clock_leeway must be a number of seconds in 0..{LAST_SECOND}, not "
            f"{shown(clock_leeway)}"
        )
