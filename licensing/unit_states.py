"""A unit's state as people see it, in the console and the portal alike (issue 41):
active, in grace, expired, revoked (with its reason) or seat released.

The term's part is :func:`svccore.timeunits.term_state_at`, the rule a camera applies to
the same licence; a revocation and a seat release (which revokes) come first. The one
template that shows a state is ``templates/_unit_state.html``, its colours
``static/svc/states.css``: the same words and colours on every page."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from config import clock
from devices import term
from licensing.models import License
from svccore.timeunits import term_state_at

# code (the CSS class's suffix, svc-state-<code>) -> the words shown
WORDS = {
    "active": "active",
    "grace": "in grace",
    "expired": "expired",
    "revoked": "revoked",
    "released": "seat released",
}
_TERM_CODES = {term.ACTIVE: "active", term.GRACE: "grace", term.EXPIRED: "expired"}


@dataclass(frozen=True)
class UnitState:
    code: str  # a key of WORDS
    why: str = ""  # revoked or released: the reason given

    @property
    def word(self) -> str:
        return WORDS[self.code]


def unit_state(
    *,
    expires_at: dt.datetime | None,
    grace_days: int,
    revoked_at: dt.datetime | None,
    revoke_reason: str = "",
    released: bool = False,
    now: dt.datetime | None = None,
) -> UnitState:
    """The state of a licence with these facts at ``now`` (the service's clock)."""
    if released:
        return UnitState("released", revoke_reason)
    if revoked_at is not None:
        return UnitState("revoked", revoke_reason or "no reason given")
    term = term_state_at(expires_at, grace_days, now or clock.now())
    return UnitState(_TERM_CODES[term])


def unit_state_of(lic: License, now: dt.datetime | None = None) -> UnitState:
    """:func:`unit_state` of a licence row (its ``seat_release`` selected with it, or one
    more query)."""
    return unit_state(
        expires_at=lic.expires_at,
        grace_days=lic.grace_days,
        revoked_at=lic.revoked_at,
        revoke_reason=lic.revoke_reason,
        released=hasattr(lic, "seat_release"),
        now=now,
    )


def unit_states(license_ids: Iterable[str], now: dt.datetime | None = None) -> dict[str, UnitState]:
    """{licence id: state} of these licences, read in one query (a page of units)."""
    moment = now or clock.now()
    rows = License.objects.filter(pk__in=set(license_ids)).values_list(
        "pk", "expires_at", "grace_days", "revoked_at", "revoke_reason", "seat_release__id"
    )
    return {
        pk: unit_state(
            expires_at=expires_at,
            grace_days=grace_days,
            revoked_at=revoked_at,
            revoke_reason=reason,
            released=release is not None,
            now=moment,
        )
        for pk, expires_at, grace_days, revoked_at, reason, release in rows
    }
