"""A unit's state as people see it, in the console and the portal alike (issue 41):
active, in grace, expired, revoked (with its reason), seat released or suspended (issue
42), on trial (issue 42: a trial unit within its term), with its check-in lease end when
a lease applies and its trial's end when it is on trial.

The term's part is :func:`svccore.timeunits.term_state_at`, the rule a camera applies to
the same licence; a revocation and a seat release (which revokes) come first. The one
template that shows a state is ``templates/_unit_state.html``, its colours
``static/svc/states.css``: the same words and colours on every page."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from config import clock
from devices import term as devices_term
from licensing import leases
from licensing.models import License
from svccore import dates
from svccore.timeunits import term_state_at

# code (the CSS class's suffix, svc-state-<code>) -> the words shown
WORDS = {
    "active": "active",
    "grace": "in grace",
    "expired": "expired",
    "revoked": "revoked",
    "released": "seat released",
    "suspended": "suspended",
    "trial": "on trial",
}
_TERM_CODES = {
    devices_term.ACTIVE: "active",
    devices_term.GRACE: "grace",
    devices_term.EXPIRED: "expired",
}


@dataclass(frozen=True)
class UnitState:
    code: str  # a key of WORDS
    why: str = ""  # revoked or released: the reason given
    lease_end: dt.datetime | None = None  # its check-in lease's end (None: no lease)
    lease_lapsed: bool = False  # the lease ended: the camera refuses analytics until it syncs
    trial_end: dt.datetime | None = None  # on trial (licensing.trials): the trial's end
    trial_over: bool = False  # the trial ended: analytics stopped unless it is converted

    @property
    def word(self) -> str:
        return WORDS[self.code]

    @property
    def trial(self) -> str:
        """The trial's end in words ("" when not on trial)."""
        if self.trial_end is None:
            return ""
        when = dates.moment(self.trial_end)
        return f"trial ended {when}: not bought" if self.trial_over else f"trial to {when}"

    @property
    def lease(self) -> str:
        """The lease end in words ("" without a lease)."""
        if self.lease_end is None:
            return ""
        when = dates.moment(self.lease_end)
        return f"lease ended {when}: sync needed" if self.lease_lapsed else f"lease to {when}"


def unit_state(
    *,
    expires_at: dt.datetime | None,
    grace_days: int,
    revoked_at: dt.datetime | None,
    revoke_reason: str = "",
    released: bool = False,
    now: dt.datetime | None = None,
    suspended: bool = False,
    lease_end: dt.datetime | None = None,
    trial: bool = False,
) -> UnitState:
    """The state of a licence with these facts at ``now`` (the service's clock);
    ``trial``: its licence is a trial's, ``expires_at`` the trial's end."""
    if released:
        return UnitState("released", revoke_reason)
    if revoked_at is not None:
        return UnitState("revoked", revoke_reason or "no reason given")
    moment = now or clock.now()
    lapsed = lease_end is not None and moment > lease_end
    trial_end = expires_at if trial else None
    term = term_state_at(expires_at, grace_days, moment)
    over = trial and term == devices_term.EXPIRED
    if suspended:
        return UnitState("suspended", "", lease_end, lapsed, trial_end, over)
    code = "trial" if trial and term == devices_term.ACTIVE else _TERM_CODES[term]
    return UnitState(code, "", lease_end, lapsed, trial_end, over)


def unit_state_of(lic: License, now: dt.datetime | None = None, *, source=None) -> UnitState:
    """:func:`unit_state` of a licence row (its ``seat_release`` selected with it, or one
    more query). The hold and the lease come from the annotations of
    :mod:`licensing.leases` on ``source`` (default: the row itself; an activation row of
    the fleet annotated with them): without them, neither is shown."""
    source = lic if source is None else source
    return unit_state(
        expires_at=lic.expires_at,
        grace_days=lic.grace_days,
        revoked_at=lic.revoked_at,
        revoke_reason=lic.revoke_reason,
        released=hasattr(lic, "seat_release"),
        now=now,
        suspended=bool(getattr(source, "held", False)),
        lease_end=leases.lease_end_at(
            getattr(source, "checked_in", None), getattr(source, "lease_days", None)
        ),
        trial=lic.trial,
    )


def unit_states(license_ids: Iterable[str], now: dt.datetime | None = None) -> dict[str, UnitState]:
    """{licence id: state} of these licences, read in one query (a page of units)."""
    moment = now or clock.now()
    rows = (
        License.objects.filter(pk__in=set(license_ids))
        .annotate(**leases.license_annotations())
        .values_list(
            "pk",
            "expires_at",
            "grace_days",
            "revoked_at",
            "revoke_reason",
            "seat_release__id",
            "held",
            "checked_in",
            "lease_days",
            "trial",
        )
    )
    return {
        pk: unit_state(
            expires_at=expires_at,
            grace_days=grace_days,
            revoked_at=revoked_at,
            revoke_reason=reason,
            released=release is not None,
            now=moment,
            suspended=bool(held),
            lease_end=leases.lease_end_at(checked_in, days),
            trial=trial,
        )
        for (
            pk,
            expires_at,
            grace_days,
            revoked_at,
            reason,
            release,
            held,
            checked_in,
            days,
            trial,
        ) in rows  # fmt: skip
    }
