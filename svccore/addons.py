"""Add-on modules in the field (issue 42 item 4), the rules that need no database: what
makes an add-on valid, what a licence's claims become with its add-ons, and how an add-on
is billed pro rata. One home for the service, its console and the tests' oracle to agree
with (the oracle re-derives the billing rule on its own, from docs/finance.md).

A licence's **effective claims** are its claims as sold (``ent`` and ``lim``) with every
active add-on applied: its modules switched on, its extra streams, frames per second and
API calls added to the caps (an unmetered licence, ``api_calls`` 0, stays unmetered).
Removing an add-on gives back the claims as sold with the others applied.

**Pro rata**: a licence is billed for an add-on from the moment a token carrying it is
signed (``starts_at``) to that token's end (``ends_at``): :func:`days_between` days, a
started day counted whole. An invoice line sums a grant's days over its licences and
bills ``quantity`` = days / the term the price is for (:func:`line_quantity`, three
decimals half-up) at the unit price as quoted; a perpetual add-on bills 1 per licence.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from svccore.claims import API_QUOTA_MAX, MAX_STREAMS_MAX
from svccore.timeunits import DAY

CODE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MODULE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
MAX_FPS_MAX = 1000  # frames per second of one stream: far beyond any camera
QUANTITY = Decimal("0.001")  # an invoice line's quantity carries at most 3 decimals


class Terms(Protocol):
    """What an add-on grant adds to a licence's claims."""

    modules: list[str]
    extra_streams: int
    extra_fps: int
    extra_api_calls: int


def addon_problem(
    *, code: Any, modules: Any, extra_streams: int, extra_fps: int, extra_api_calls: int
) -> str:
    """What is wrong with an add-on's definition ("" when nothing): a code of lower case
    letters, digits, ``-`` and ``_`` (1-32), module names alike, and at least one module or
    cap it adds, each within the bounds a licence may carry."""
    if not isinstance(code, str) or not CODE.fullmatch(code):
        return (
            f"code must be 1-32 lower case letters, digits, - or _ (starting with a letter or "
            f"digit), not {code!r}"
        )
    if not isinstance(modules, list) or not all(
        isinstance(m, str) and MODULE.fullmatch(m) for m in modules
    ):
        return 'modules must be a list of module names like "anpr" (lower case, 1-32 characters)'
    if len(set(modules)) != len(modules):
        return "modules must not repeat a name"
    for name, value, high in (
        ("extra_streams", extra_streams, MAX_STREAMS_MAX),
        ("extra_fps", extra_fps, MAX_FPS_MAX),
        ("extra_api_calls", extra_api_calls, API_QUOTA_MAX),
    ):
        if value is not None and not 0 <= value <= high:
            return f"{name} must be 0-{high:,}, not {value:,}"
    if not modules and not (extra_streams or extra_fps or extra_api_calls):
        return "an add-on must switch on a module or raise a cap"
    return ""


def sold_part(claims: dict[str, Any]) -> dict[str, Any]:
    """The part of a licence's claims that add-ons change: ``{"ent", "lim"}``."""
    return {"ent": dict(claims["ent"]), "lim": dict(claims["lim"])}


def with_addons(sold: dict[str, Any], grants: Iterable[Terms]) -> dict[str, Any]:
    """``{"ent", "lim"}`` of a licence sold with ``sold`` (:func:`sold_part`) carrying the
    add-ons ``grants``: each one's modules switched on, its extras added to the caps,
    within the bounds a licence may carry. No grants: ``sold`` as it is."""
    ent = dict(sold["ent"])
    lim = dict(sold["lim"])
    for grant in grants:
        for module in grant.modules:
            ent[module] = True
        lim["max_streams"] = min(MAX_STREAMS_MAX, lim["max_streams"] + grant.extra_streams)
        lim["max_fps"] = min(MAX_FPS_MAX, lim["max_fps"] + grant.extra_fps)
        if lim["api_calls"]:  # 0 is unmetered: nothing to add to
            lim["api_calls"] = min(API_QUOTA_MAX, lim["api_calls"] + grant.extra_api_calls)
    return {"ent": dict(sorted(ent.items())), "lim": lim}


def days_between(starts_at: dt.datetime, ends_at: dt.datetime) -> int:
    """Days billed for an add-on carried from ``starts_at`` to ``ends_at``: whole days,
    a started day counted whole (0 when it ends first)."""
    seconds = int(ends_at.timestamp()) - int(starts_at.timestamp())
    return max(0, -(-seconds // DAY))


def line_quantity(*, charged: int, term_days: int) -> Decimal:
    """The quantity of an add-on's invoice line from what its charges hold, summed over
    its licences: days over the ``term_days`` its price is for, three decimals half-up;
    for a perpetual add-on (``term_days`` 0) one per licence, as charged."""
    if term_days == 0:
        return Decimal(charged)
    return (Decimal(charged) / Decimal(term_days)).quantize(QUANTITY, rounding=ROUND_HALF_UP)
