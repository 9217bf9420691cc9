"""Seat release: an operator gives the seat of a dead or replaced camera back to its batch.

The camera's unit licence is revoked (on the signed list like any revocation), the batch
counts one unit fewer activated and one more *released seat*, and the next activation
on the batch takes that seat as a **transfer**: its activation row points at the release
(``Activation.transfer_of``) and billing never counts it, because the customer already
paid for the seat when the first camera took it.

Releases are bounded per batch (``SVC_SEAT_RELEASE_POLICY``, default ``5%/30d``: 5 % of
the batch's purchased units, at least one, per rolling 30 days), so releasing cannot turn
one paid seat into a pool shared by a whole fleet.

Every write here holds the batch row's lock (the release's UPDATE, or the activation's
seat UPDATE), so releases and transfers on one batch happen one at a time: a release is
taken by exactly one replacement, and the policy's count cannot be raced past.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from audit.services import audited
from config import clock
from config.errors import Conflict, InvalidInput, NotFound
from events.models import Event
from events.services import event_emit
from licensing.models import Activation, Batch, License, SeatRelease
from licensing.services.licenses import license_data, license_revoke
from svccore import dates
from svccore.timeunits import unix

# The release a transfer takes: the oldest of the batch's releases that no activation
# has taken yet. Run only while the batch row is locked by the seat UPDATE.
PENDING_RELEASE_SQL = """
SELECT r.id FROM licensing_seatrelease r
WHERE r.batch_id = %s
    AND NOT EXISTS (SELECT 1 FROM licensing_activation a WHERE a.transfer_of_id = r.id)
ORDER BY r.id
LIMIT 1
"""
TAKE_RELEASED_SEAT_SQL = """
UPDATE licensing_batch SET released_seats = released_seats - 1
WHERE id = %s AND released_seats > 0
"""


@dataclass(frozen=True)
class ReleasePolicy:
    """How many seats one batch may release in a rolling window."""

    percent: float
    days: int

    @classmethod
    def configured(cls) -> ReleasePolicy:
        percent, days = settings.SVC_SEAT_RELEASE_POLICY
        return cls(percent=percent, days=days)

    def limit(self, units_purchased: int) -> int:
        return max(1, math.floor(units_purchased * self.percent / 100))

    def describe(self, units_purchased: int) -> str:
        return (
            f"{self.limit(units_purchased)} per {self.days} days "
            f"({self.percent:g}% of {units_purchased} units, at least 1)"
        )


@dataclass(frozen=True)
class ReleaseResult:
    release: SeatRelease
    already_released: bool
    batch_units_remaining: int
    releases_in_window: int
    release_limit: int
    window_days: int


def _unit_license(*, license_id: str | None, batch_id: str | None, device_id: str | None) -> str:
    """The licence id a release names: given, or found by batch and device."""
    if license_id:
        if batch_id or device_id:
            raise InvalidInput(
                "name the seat by license_id, or by batch_id and device_id, not both"
            )
        return license_id
    if not (batch_id and device_id):
        raise InvalidInput("name the seat to release: license_id, or batch_id and device_id")
    found = (
        Activation.objects.filter(batch_id=batch_id, device_id=device_id)
        .values_list("license_id", flat=True)
        .first()
    )
    if found is None:
        if not Batch.objects.filter(pk=batch_id).exists():
            raise NotFound(f"batch {batch_id} does not exist")
        raise NotFound(f"device {device_id} has no activation on batch {batch_id}")
    return found


def _window_count(batch: Batch, policy: ReleasePolicy, now: dt.datetime) -> tuple[int, list]:
    since = now - dt.timedelta(days=policy.days)
    times = list(
        SeatRelease.objects.filter(batch=batch, released_at__gt=since)
        .order_by("released_at")
        .values_list("released_at", flat=True)
    )
    return len(times), times


@audited(
    "seat.release",
    target=lambda result, arguments: result.release.license_id,
)
@transaction.atomic
def seat_release(
    *,
    reason: str,
    license_id: str | None = None,
    batch_id: str | None = None,
    device_id: str | None = None,
) -> ReleaseResult:
    """Give the seat of a dead or replaced camera back to its batch: revoke the unit
    licence (keeping an earlier revocation's time and reason) and free its seat for a
    replacement, whose activation is a transfer, not billed again.

    Idempotent per licence: releasing it again answers the first release and frees
    nothing more. Refused (409) past the batch's release policy, naming the count, the
    limit and when the next release becomes possible."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("a reason is required to release a seat (e.g. 'camera replaced')")
    license_id = _unit_license(license_id=license_id, batch_id=batch_id, device_id=device_id)
    lic = License.objects.filter(pk=license_id).first()
    if lic is None:
        raise NotFound(f"licence {license_id} does not exist")
    if lic.kind != License.Kind.UNIT or lic.batch_id is None:
        raise InvalidInput(
            f"licence {license_id} is a {lic.get_kind_display().lower()}; only a unit licence "
            "activated from a batch holds a seat (revoke it instead)"
        )
    # The batch row first: every seat change on this batch waits here in turn.
    batch = Batch.objects.select_for_update().get(pk=lic.batch_id)
    if batch.is_trial:
        # A released seat is one already paid for (its next activation is not billed):
        # a trial seat never was, so it is not released (licensing.trials).
        raise Conflict(
            f"batch {batch.id} is a trial: the seat of {lic.device_id} was never paid for, so "
            "it cannot be released for another camera; revoke the licence if the camera must "
            "stop, or convert the batch first"
        )
    policy = ReleasePolicy.configured()
    now = clock.now()
    count, times = _window_count(batch, policy, now)
    limit = policy.limit(batch.units_purchased)
    earlier = SeatRelease.objects.filter(license_id=license_id).first()
    if earlier is not None:
        return ReleaseResult(earlier, True, batch.units_remaining, count, limit, policy.days)
    if count >= limit:
        reopens = times[count - limit] + dt.timedelta(days=policy.days)
        raise Conflict(
            f"batch {batch.id} has released {count} seats in the last {policy.days} days; "
            f"its release policy allows {policy.describe(batch.units_purchased)}. The next "
            f"release is possible at {dates.moment(reopens)} ({unix(reopens)}); "
            "revoke the licence meanwhile if the camera must stop"
        )
    license_revoke(license_id=license_id, reason=reason)
    Batch.objects.filter(pk=batch.pk).update(
        units_activated=F("units_activated") - 1, released_seats=F("released_seats") + 1
    )
    release = SeatRelease.objects.create(
        batch=batch, license=lic, device_id=lic.device_id, released_at=now, reason=reason[:500]
    )
    event_emit(
        Event.Type.SEAT_RELEASED,
        customer_id=lic.customer_id,
        data=license_data(lic) | {"reason": release.reason},
    )
    return ReleaseResult(release, False, batch.units_remaining + 1, count + 1, limit, policy.days)


def released_seat_take(batch_id: str) -> int:
    """Inside an activation's transaction, after its seat UPDATE found a released seat on
    ``batch_id`` (whose row it now holds locked): take the oldest release not yet taken
    and return its id, for the new activation's ``transfer_of``."""
    with connection.cursor() as cursor:
        cursor.execute(PENDING_RELEASE_SQL, [batch_id])
        (release_id,) = cursor.fetchone()
        cursor.execute(TAKE_RELEASED_SEAT_SQL, [batch_id])
    return release_id
