"""Reads of the licensing authority that are more than a primary-key lookup."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import re
from dataclasses import dataclass

from django.db.models import Count, F, Max, Prefetch, Q, QuerySet
from django.db.models.fields.tuple_lookups import Tuple, TupleLessThan
from django.utils.crypto import salted_hmac

from config import clock
from config.api.paging import keyset_page
from config.errors import InvalidInput, NotFound
from customers.selectors import customer_check
from devices import term
from licensing import leases
from licensing.models import Activation, AddOn, AddOnGrant, Batch, License, OfflineExchange, Sku
from licensing.unit_states import UnitState
from signing.selectors import signing_keys_list
from svccore.claims import LAST_SECOND
from svccore.paging import FLEET_PAGE_MAX
from svccore.timeunits import term_state_at

FLEET_MAX = FLEET_PAGE_MAX
# A fleet cursor is the position of a record in the fleet's total order (-activated_at,
# -id), "<activated_at in Unix microseconds>:<activation id>", followed by a MAC of it
# under SVC_SECRET_KEY, all unpadded base64url: opaque, and refused when edited.
FLEET_CURSOR_MAX = 96  # characters; the longest real one is 67
_CURSOR_MAC_BYTES = 12
_CURSOR_MAC_SALT = "licensing.fleet-cursor"
_CURSOR_POSITION = re.compile(rb"(0|[1-9][0-9]{0,17}):([1-9][0-9]{0,18})")
_MICROSECONDS_MAX = (LAST_SECOND + 1) * 1_000_000 - 1
_ID_MAX = 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def batch_get(*, batch_id: str) -> Batch:
    try:
        return Batch.objects.select_related("trial_conversion").get(pk=batch_id)
    except Batch.DoesNotExist:
        raise NotFound(f"batch {batch_id} does not exist") from None


def catalogue_list() -> QuerySet[Sku]:
    return Sku.objects.order_by("code").prefetch_related(
        Prefetch("addons", queryset=AddOn.objects.order_by("code"))
    )


@dataclass(frozen=True)
class AddOnGrants:
    """The add-ons of a batch or a licence (issue 42): active first, newest first."""

    batch_id: str | None
    license_id: str  # the batch key of a batch, or the licence asked about
    addons: list[AddOnGrant]


def addon_grants(*, batch_id: str | None = None, license_id: str | None = None) -> AddOnGrants:
    """The add-ons granted to a batch, or to a licence: a direct licence's own, a batch
    key's or a unit's those of its batch. NotFound for an unknown one."""
    if license_id is not None:
        lic = License.objects.filter(pk=license_id).values("kind", "batch_id").first()
        if lic is None:
            raise NotFound(f"licence {license_id} does not exist")
        if lic["kind"] == License.Kind.BATCH_KEY:
            batch_id = Batch.objects.values_list("id", flat=True).get(license_id=license_id)
        elif lic["batch_id"]:
            batch_id = lic["batch_id"]
    if batch_id is not None:
        key = Batch.objects.filter(pk=batch_id).values_list("license_id", flat=True).first()
        if key is None:
            raise NotFound(f"batch {batch_id} does not exist")
        owner = key
    else:
        owner = license_id
    grants = AddOnGrant.objects.filter(license_id=owner).order_by(
        F("removed_at").desc(nulls_first=True), "-added_at", "-id"
    )
    return AddOnGrants(batch_id, license_id or owner, list(grants))


# A unit of the fleet as GET /v1/admin/fleet and its CSV export give it (documented by
# licensing.serializers.ActivationRecordOut): its name there, and what it is read from.
# Read as plain values in one query: no model instances, whose related rows would cost
# more than the query (and hold reference cycles that only the garbage collector frees).
FLEET_UNIT = {
    "device_id": "device_id",
    "license_id": "license_id",
    "batch_id": "batch_id",
    "fingerprint_source": "fingerprint_source",
    "weak_binding": "weak_binding",
    "sdk_version": "sdk_version",
    "activated_at": "activated_at",
    "sku": "batch__sku",
    "customer_id": "batch__customer_id",
    "revoked": "license__revoked_at",
    "seat_released": "license__seat_release__id",
    "transfer_of": "transfer_of__license_id",
    "last_seen_at": "last_seen_at",
    # Issue 42 (licensing.leases): annotations of fleet_page, made readable by _unit.
    "max_offline_days": "lease_days",
    "lease_end": "checked_in",
    "suspended": "held",
    # Trials (licensing.trials): the licence on file is a trial's, and its end.
    "trial": "license__trial",
    "trial_ends_at": "license__expires_at",
}


FLEET_ANNOTATIONS = leases.row_annotations(
    own_days="license__max_offline_days",
    batch_days="batch__max_offline_days",
    sku="batch__sku",
    license_ref="license_id",
    batch_ref="batch_id",
    customer_ref="batch__customer_id",
    checked_in="license__checked_in_at",
)


@dataclass(frozen=True)
class FleetPage:
    units: list[dict]  # FLEET_UNIT's names: Unix seconds, 0/1 flags
    next_cursor: str | None  # None: no unit after the last one of this page


def _unit(row: tuple) -> dict:
    unit = dict(zip(FLEET_UNIT, row, strict=False))
    unit["weak_binding"] = int(unit["weak_binding"])
    unit["activated_at"] = int(unit["activated_at"].timestamp())
    unit["revoked"] = int(unit["revoked"] is not None)
    unit["seat_released"] = int(unit["seat_released"] is not None)
    seen = unit["last_seen_at"]
    unit["last_seen_at"] = int(seen.timestamp()) if seen is not None else None
    end = leases.lease_end_at(unit["lease_end"], unit["max_offline_days"])
    unit["lease_end"] = int(end.timestamp()) if end is not None else None
    unit["suspended"] = int(bool(unit["suspended"]))
    unit["trial"] = int(bool(unit["trial"]))
    ends = unit["trial_ends_at"]
    unit["trial_ends_at"] = int(ends.timestamp()) if unit["trial"] and ends is not None else None
    return unit


def not_seen_since(days: int, *, now: dt.datetime | None = None) -> Q:
    """Units not seen for more than ``days`` days (issue 42): last seen before then, or
    never since last-seen times were recorded."""
    cutoff = (now or clock.now()) - dt.timedelta(days=days)
    return Q(last_seen_at__lt=cutoff) | Q(last_seen_at__isnull=True)


def silent_units_count(
    *, days: int, now: dt.datetime | None = None, up_to: int | None = None
) -> int:
    """Units whose licence is not revoked and that were not seen for more than ``days``
    days: the dashboard's count of silent units. ``up_to``: counted no further than that
    (the dashboard's bound; a fleet upgraded from before last-seen times has every unit
    silent, and counting 10^6 of them took 0.7 s)."""
    units = Activation.objects.filter(
        not_seen_since(days, now=now), license__revoked_at__isnull=True
    ).order_by()
    return (units[:up_to] if up_to is not None else units).count()


def past_lease_count(*, now: dt.datetime | None = None) -> int:
    """Units whose licence is not revoked and whose check-in lease ended (their camera
    stopped analytics until it syncs): the dashboard's count of units silent beyond
    their lease."""
    values = leases.lease_day_values()
    if not values:  # no lease anywhere: nothing to count
        return 0
    units = Activation.objects.filter(license__revoked_at__isnull=True).order_by()
    return leases.past_lease(units, now=now or clock.now(), values=values).count()


def _cursor_mac(position: bytes) -> bytes:
    return salted_hmac(_CURSOR_MAC_SALT, position, algorithm="sha256").digest()[:_CURSOR_MAC_BYTES]


def fleet_cursor(record: Activation) -> str:
    """The opaque cursor of ``record``'s position: the next page starts after it."""
    return _cursor_at(record.activated_at, record.pk)


def _cursor_at(activated_at: dt.datetime, record_id: int) -> str:
    microseconds = (activated_at - _EPOCH) // _MICROSECOND
    position = f"{microseconds}:{record_id}".encode("ascii")
    raw = position + _cursor_mac(position)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def fleet_cursor_position(cursor: str) -> tuple[dt.datetime, int]:
    """(activated_at, activation id) of a cursor :func:`fleet_cursor` made.

    Anything else is refused (400 naming the parameter): other characters, padding,
    non-canonical base64, a MAC that does not match (an edited cursor, or one made
    under another SVC_SECRET_KEY), a position that is not two integers in range."""
    refused = InvalidInput(
        f"cursor: not a cursor of this listing ({len(cursor)} characters); pass the "
        "next_cursor of a previous answer exactly as it was given"
    )
    if not 0 < len(cursor) <= FLEET_CURSOR_MAX or not cursor.isascii():
        raise refused
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise refused from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != cursor:
        raise refused
    position, mac = raw[:-_CURSOR_MAC_BYTES], raw[-_CURSOR_MAC_BYTES:]
    if not position or not hmac.compare_digest(mac, _cursor_mac(position)):
        raise refused
    match = _CURSOR_POSITION.fullmatch(position)
    if match is None:
        raise refused
    microseconds, record_id = int(match[1]), int(match[2])
    if microseconds > _MICROSECONDS_MAX or record_id > _ID_MAX:
        raise refused
    return _EPOCH + microseconds * _MICROSECOND, record_id


def fleet_records(
    *,
    customer_id: str | None = None,
    batch_id: str | None = None,
    weak_binding: bool | None = None,
    not_seen_days: int | None = None,
    before: int | None = None,
    after: tuple[dt.datetime, int] | None = None,
) -> QuerySet[Activation]:
    """The activations the fleet's filters select, in its total order (-activated_at,
    -id), from strictly after the position ``after`` (activated_at, activation id) when
    given: what :func:`fleet_page` pages through."""
    records = Activation.objects.order_by("-activated_at", "-id")
    if customer_id:
        records = records.filter(batch__customer_id=customer_id)
    if batch_id:
        records = records.filter(batch_id=batch_id)
    if weak_binding is not None:
        records = records.filter(weak_binding=weak_binding)
    if not_seen_days is not None:
        records = records.filter(not_seen_since(not_seen_days))
    if before is not None:
        records = records.filter(activated_at__lt=dt.datetime.fromtimestamp(before, tz=dt.UTC))
    if after is not None:
        activated_at, record_id = after
        # (activated_at, id) < (t, i): a row-value comparison on PostgreSQL, which the
        # index activation_recent_first serves as its start; Django writes it out as
        # "activated_at < t OR (activated_at = t AND id < i)" on SQLite. The redundant
        # "activated_at <= t" gives SQLite's planner the index range too.
        records = records.filter(
            TupleLessThan(Tuple(F("activated_at"), F("id")), (activated_at, record_id)),
            Q(activated_at__lte=activated_at),
        )
    return records


def filters_check(
    *, customer_id: str | None = None, batch_id: str | None = None, license_id: str | None = None
) -> None:
    """NotFound naming the first of ``customer_id``, ``batch_id``, ``license_id`` that
    names no customer, batch or licence: the one rule of every admin list filter (the
    fleet and its export, invoices, events, usage conflicts). An empty list would read
    as "nothing there" when the id is simply wrong."""
    customer_check(customer_id)
    for value, model, noun in (
        (batch_id, Batch, "batch"),
        (license_id, License, "licence"),
    ):
        if value and not model.objects.filter(pk=value).exists():
            raise NotFound(f"{noun} {value} does not exist")


def fleet_page(
    *,
    customer_id: str | None = None,
    batch_id: str | None = None,
    weak_binding: bool | None = None,
    not_seen_days: int | None = None,
    before: int | None = None,
    cursor: str | None = None,
    limit: int = FLEET_MAX,
) -> FleetPage:
    """Activation records in the fleet's total order, most recent first (activated_at,
    then activation id), at most ``limit`` (1..FLEET_MAX), with the cursor of the next
    page.

    ``cursor`` pages on strictly after the record it names: no record is skipped or
    repeated, however many share a second. ``before`` (Unix seconds, contract §4) pages
    back to records activated strictly before that second; paging by the last record's
    second skips the rest of that second, hence the cursor. Not both at once."""
    if cursor is not None and before is not None:
        raise InvalidInput(
            "cursor and before cannot be used together: cursor already names the position "
            "(pass the next_cursor of the previous answer alone)"
        )
    if not 1 <= limit <= FLEET_MAX:
        raise InvalidInput(f"limit: must be 1..{FLEET_MAX}, not {limit}")
    if cursor is None:  # the first page answers for the filters; later ones follow it
        filters_check(customer_id=customer_id, batch_id=batch_id)
    records = (
        fleet_records(
            customer_id=customer_id,
            batch_id=batch_id,
            weak_binding=weak_binding,
            not_seen_days=not_seen_days,
            before=before,
            after=None if cursor is None else fleet_cursor_position(cursor),
        )
        .annotate(**FLEET_ANNOTATIONS)
        .values_list(*FLEET_UNIT.values(), "id")
    )
    rows, next_cursor = keyset_page(
        records, limit=limit, cursor_of=lambda row: _cursor_at(row[6], row[-1])
    )
    return FleetPage(units=[_unit(row) for row in rows], next_cursor=next_cursor)


def signing_keys_published() -> tuple[list[str], list[str]]:
    """What the revocation list publishes about the signing keys, read fresh: the key
    certificates of every key not revoked (oldest first) and the revoked key ids
    (sorted)."""
    certificates, revoked = [], []
    for kid, certificate, revoked_at in signing_keys_list().values_list(
        "kid", "certificate", "revoked_at"
    ):
        if revoked_at is not None:
            revoked.append(kid)
        elif certificate:
            certificates.append(certificate)
    return certificates, sorted(revoked)


# --- what is about to end (issue 16) ---------------------------------------------------

EXPIRING_DAYS_DEFAULT = 30
EXPIRING_DAYS_MAX = 3660


@dataclass(frozen=True)
class Expiring:
    """A batch or a direct licence that ends within the window asked, or has ended and
    is still in its grace period (renewable from its old end)."""

    kind: str  # "batch" or "license"
    batch_id: str | None
    license_id: str
    customer_id: str
    customer_name: str
    sku: str
    expires_at: dt.datetime
    grace_ends_at: dt.datetime
    in_grace: bool
    units_activated: int
    units_purchased: int

    @property
    def state(self) -> UnitState:
        """Its state in the one component (templates/_unit_state.html): not revoked, so
        in grace or still active."""
        return UnitState("grace" if self.in_grace else "active")


def expiring_list(
    *,
    days: int = EXPIRING_DAYS_DEFAULT,
    now: dt.datetime | None = None,
    customer_id: str | None = None,
) -> list[Expiring]:
    """Batches (not trials) and direct licences, not revoked, ending within ``days`` of
    ``now`` or ended and still in their grace period (of one customer, if given), soonest
    end first
    (then id). Read through
    the partial indexes on their ends (batch_expires, license_direct_expires): the rows
    ending in a window, not the licences of a fleet."""
    if type(days) is not int or not 1 <= days <= EXPIRING_DAYS_MAX:
        raise InvalidInput(f"days must be an integer 1..{EXPIRING_DAYS_MAX}, not {days!r}")
    now = now or clock.now()
    until = now + dt.timedelta(days=days)
    # Grace is per licence; the longest in the catalogue bounds how far back to look.
    longest = max(Sku.objects.values_list("grace_days", flat=True), default=0)
    since = now - dt.timedelta(days=longest)
    found = []
    # A trial batch's end is the window its cameras may start their trials in, each
    # ending on its own (licensing.trials): it is converted, not renewed.
    batches = (
        Batch.objects.filter(expires_at__gte=since, expires_at__lte=until)
        .filter(license__revoked_at__isnull=True, trial_days__isnull=True)
        .select_related("customer", "license")
    )
    if customer_id:
        batches = batches.filter(customer_id=customer_id)
    for batch in batches:
        grace_days = batch.license.grace_days
        state = term_state_at(batch.expires_at, grace_days, now)
        if state != term.EXPIRED:
            grace_ends = batch.expires_at + dt.timedelta(days=grace_days)
            found.append(
                Expiring(
                    "batch",
                    batch.id,
                    batch.license_id,
                    batch.customer_id,
                    batch.customer.name,
                    batch.sku,
                    batch.expires_at,
                    grace_ends,
                    state == term.GRACE,
                    batch.units_activated,
                    batch.units_purchased,
                )
            )
    direct = License.objects.filter(
        kind=License.Kind.DIRECT,
        expires_at__gte=since,
        expires_at__lte=until,
        revoked_at__isnull=True,
    ).select_related("customer")
    if customer_id:
        direct = direct.filter(customer_id=customer_id)
    for lic in direct:
        grace_days = lic.grace_days
        state = term_state_at(lic.expires_at, grace_days, now)
        if state != term.EXPIRED:
            grace_ends = lic.expires_at + dt.timedelta(days=grace_days)
            found.append(
                Expiring(
                    "license",
                    None,
                    lic.id,
                    lic.customer_id,
                    lic.customer.name,
                    lic.sku,
                    lic.expires_at,
                    grace_ends,
                    state == term.GRACE,
                    1,
                    1,
                )
            )
    return sorted(found, key=lambda item: (item.expires_at, item.batch_id or item.license_id))


OFFLINE_UNITS_LISTED = 200


def offline_units(*, customer_id: str | None = None, limit: int = OFFLINE_UNITS_LISTED) -> list:
    """Units that exchanged files (issue 44), the latest exchange first: licence, device,
    customer, the date of their last file exchange, files read, and whether revoked."""
    rows = OfflineExchange.objects.all()
    if customer_id is not None:
        rows = rows.filter(customer_id=customer_id)
    return list(
        rows.values("license_id", "device_id", "customer_id", "license__revoked_at")
        .annotate(last_exchange=Max("exchanged_at"), files=Count("id"))
        .order_by("-last_exchange", "license_id")[:limit]
    )
