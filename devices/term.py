"""A licence's state at a moment (spec §3): the one function that decides it.

The engine, the server's admin and ``svcctl inspect`` all call :func:`license_state`;
each turns the machine name into its own words in one place. Pure: claims and a Unix
time in, a name out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .bounds import is_real, shown
from .errors import InvalidArgument

DAY = 86400
NBF_LEEWAY_SECONDS = 300  # device clocks run a little behind the service's

# Machine names. ACTIVE and GRACE are what Engine.start returns (contract §8), GRACE and
# EXPIRED are the spec's names (§3), REVOKED is the code of devices.Revoked.
NOT_YET_VALID = "LICENSE_NOT_YET_VALID"
ACTIVE = "active"
GRACE = "SVC_LIC_GRACE"
EXPIRED = "LICENSE_EXPIRED"
REVOKED = "LICENSE_REVOKED"
STATES = (NOT_YET_VALID, ACTIVE, GRACE, EXPIRED, REVOKED)


def grace_end(claims: Mapping[str, Any]) -> float:
    """The last second of grace, ``exp`` + ``grace_days`` days; infinity when ``exp`` is 0
    (perpetual)."""
    exp = claims["exp"]
    return exp + claims["grace_days"] * DAY if exp else math.inf


def term_state(exp: float, grace_days: int, now: float) -> str:
    """Where ``now`` falls in a term ending at ``exp`` (spec §3): :data:`ACTIVE` up to and
    including ``exp`` (always, when ``exp`` is 0: perpetual), :data:`GRACE` after it up
    to and including ``exp`` + ``grace_days`` days, :data:`EXPIRED` after. The one
    boundary rule: the device, the console, ``svcctl``, the expiring list and renewals
    all decide by it (the server through ``svccore.timeunits.term_state_at``)."""
    if not exp or now <= exp:
        return ACTIVE
    if now <= exp + grace_days * DAY:
        return GRACE
    return EXPIRED


def license_state(
    claims: Mapping[str, Any],
    now: float,
    *,
    revoked: bool = False,
    nbf_leeway: float = 0,
) -> str:
    """State of the licence with ``claims`` at Unix time ``now`` (spec §3).

    :data:`REVOKED` when ``revoked``; :data:`NOT_YET_VALID` before ``nbf`` less
    ``nbf_leeway`` (the engine allows :data:`NBF_LEEWAY_SECONDS`); :data:`ACTIVE` up to
    and including ``exp`` (always, when ``exp`` is 0: perpetual); :data:`GRACE` after
    ``exp`` up to and including ``exp`` + ``grace_days`` days; :data:`EXPIRED` after.
    Arguments of the wrong type or value raise :class:`~devices.errors.InvalidArgument`.
    """
    _check_arguments(claims, now, revoked, nbf_leeway)
    if revoked:
        return REVOKED
    if now < claims["nbf"] - nbf_leeway:
        return NOT_YET_VALID
    return term_state(claims["exp"], claims["grace_days"], now)


def _check_arguments(claims: Any, now: Any, revoked: Any, nbf_leeway: Any) -> None:
    if not isinstance(claims, Mapping):
        raise InvalidArgument(f"claims must be a mapping, not {type(claims).__name__}")
    for name in ("nbf", "exp", "grace_days"):
        value = claims.get(name)
        if type(value) is not int or value < 0:
            raise InvalidArgument(f"claim {name!r} must be a whole number >= 0, not {shown(value)}")
    if not is_real(now):
        raise InvalidArgument(f"now must be a finite number of Unix seconds, not {shown(now)}")
    if type(revoked) is not bool:
        raise InvalidArgument(f"revoked must be True or False, not {shown(revoked)}")
    if not is_real(nbf_leeway) or nbf_leeway < 0:
        raise InvalidArgument(
            f"nbf_leeway must be a number of seconds >= 0, not {shown(nbf_leeway)}"
        )
