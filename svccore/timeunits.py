"""Time units and conversions of the server and svcctl, defined once.

``DAY`` itself lives in the device module (:mod:`devices.term`, which decides grace by
it and is vendored alone); it is imported from there, never written again.
"""

from __future__ import annotations

import datetime as dt

from devices.term import DAY, term_state
from svccore.csvformat import iso

__all__ = ["DAY", "day_number", "iso_utc", "term_state_at", "unix"]


def unix(moment: dt.datetime | None) -> int:
    """Unix seconds of an aware datetime (its whole second); 0 for None, which is how a
    perpetual licence's end is written in its claims."""
    return int(moment.timestamp()) if moment is not None else 0


def iso_utc(seconds: int | None, *, zero: str = "never") -> str:
    """Unix seconds as ISO 8601 UTC text for people (CSV cells, svcctl tables; the
    finance CSV's :func:`svccore.csvformat.iso`):
    ``2026-11-27T21:30:33Z``; 0 or None (a perpetual end) is ``zero``. JSON fields stay
    Unix seconds, as docs/api.md documents them."""
    if not seconds:
        return zero
    return iso(seconds)


def day_number(seconds: int) -> int:
    """The UTC day (days since 1970-01-01) that Unix second ``seconds`` falls on."""
    return seconds // DAY


def term_state_at(expires_at: dt.datetime | None, grace_days: int, now: dt.datetime) -> str:
    """:func:`devices.term.term_state` of a server row: ``ACTIVE``, ``GRACE`` or
    ``EXPIRED`` at ``now``, by the very rule a camera applies to the same licence (the
    end second is inside the term, the last second of grace inside grace)."""
    if expires_at is None:
        return term_state(0, grace_days, now.timestamp())
    return term_state(expires_at.timestamp(), grace_days, now.timestamp())
