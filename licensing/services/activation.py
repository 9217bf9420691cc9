"""Exchanging a batch key for a unit licence bound to one device (spec §2.3): the billing
event of the per-camera model, and the hot path of a fleet's first boot and of every
re-activation after it.

What a request costs, on the database:

- a device already on file: one indexed lookup (:data:`LOOKUP_SQL`) that reads just the
  columns needed: the batch key's revocation and current end (a renewal moves it) and
  the device's licence and token (the revocation list's head, handed out with the
  licence, is the one this process holds, ``licensing.revocations.head_get``); once
  after each renewal of its batch, the device's licence is re-signed to the batch's new
  end first (``licensing.services.renewals.unit_token_current``);
- a new device: that lookup, then on PostgreSQL one statement that commits alone: the
  seat taken by a conditional UPDATE and, only if it took one, the licence, its
  activation and its event inserted (:data:`FRESH_SEAT_SQL`; the floor's hand-written
  activation needs BEGIN, two statements and COMMIT). When that took no seat (the batch
  is exhausted, its key revoked, or it has a seat an operator released), and on SQLite,
  one transaction with the seat taken by :data:`SEAT_SQL` and the rows inserted; a
  released seat (``licensing.services.seats``) costs two statements more and makes the
  activation a transfer of that release, not billed again.

A trial batch's new device (:mod:`licensing.trials`) costs one query more, whether it
already had its trial of the SKU; its unit is signed to its own trial's end, and its
rows include its :class:`~licensing.models.TrialUse`, whose unique key settles a race
for two trials. The seat's UPDATE takes a seat only in the trial state the unit was
signed for: a conversion committed meanwhile makes the activation start again as a paid
one.

A batch key outlives the signing key that signed it: after that key is revoked, the
token is checked under the revoked key and counts only if it is byte for byte the one
issued for its batch (the exact-token check every batch key passes); the unit licences
answered are signed by the active key, whatever signed the batch key (:func:`_signed_claims`).

What a batch key says never changes but for its end, and proving it is the costly part
(an Ed25519 verification, the batch row, the exact-token check), so a verified key is
kept per process, keyed by the token's hash, for as long as this process's signing-key
registry (``signing.keyring``, re-read every few seconds and at once after a key
change here). Its revocation and its end are columns of a licence row that the lookup
reads on every request, so a revoked batch key is refused at once and a renewed one
activates at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from audit.services import audit_refusal
from config import clock
from config.errors import Forbidden, InvalidInput, MisconfiguredService, PaymentRequired
from config.rows import insert_rows, insert_rows_after
from devices import identity as identity_rules
from devices.errors import BadSignature
from events.models import Event
from events.services import event_row
from licensing import addons, identity, leases, trials
from licensing.exact_tokens import TokenNotIssued, issued_check, not_issued
from licensing.models import (
    Activation,
    AddOnGrant,
    Batch,
    License,
    Sku,
    Suspension,
    TrialUse,
    token_digest,
)
from licensing.revocations import ListPosition, list_position
from licensing.services import renewals, seats, seen
from licensing.services.licenses import license_claims
from signing import keyring
from svccore import ids
from svccore.addons import sold_part, with_addons
from svccore.claims import device_id_problem
from svccore.timeunits import unix

# Plain SQL: compiling the ORM's equivalent costs more than running it, and an UPDATE
# with RETURNING has no ORM form. Both run on PostgreSQL and SQLite (3.35+).
LOOKUP_SQL = f"""
SELECT k.revoked_at IS NOT NULL, k.expires_at, a.license_id, u.token, u.revoked_at IS NOT NULL,
    u.expires_at, u.token_sha256, {leases.LEASE_DAYS_SQL}, {leases.HELD_SQL}, b.trial_days,
    u.trial, b.addons_version, u.addons_version, a.id, a.components_sha256, b.identity_policy,
    s.identity_policy, COALESCE(a.last_ip, a.client_ip)
FROM licensing_license k
JOIN licensing_batch b ON b.license_id = k.id
LEFT JOIN licensing_sku s ON s.code = b.sku
LEFT JOIN licensing_activation a ON a.batch_id = %s AND a.device_id = %s
LEFT JOIN licensing_license u ON u.id = a.license_id
WHERE k.id = %s
"""  # noqa: S608 - the interpolated parts are constants of licensing.leases
# The seat: one statement that can neither oversell nor lose a count under concurrency,
# and that sees a revocation of the batch key committed before it started. The last
# parameter is whether the unit was signed as a trial: a conversion committed since
# (licensing.services.trials, under the batch row's lock) makes it take no seat, and the
# activation is made again as a paid one (never a trial unit that no conversion bills).
SEAT_SQL = """
UPDATE licensing_batch SET units_activated = units_activated + 1
WHERE id = %s AND units_activated < units_purchased
    AND NOT EXISTS (
        SELECT 1 FROM licensing_license WHERE id = %s AND revoked_at IS NOT NULL
    )
    AND (trial_days IS NOT NULL) = %s
RETURNING units_purchased - units_activated, released_seats
"""
# PostgreSQL, a batch with no released seat (nearly always): the seat, the licence, its
# activation record and event in one statement (config.rows.insert_rows_after) that
# commits alone. Anything else (no seat, the key revoked, a released seat to transfer)
# takes no seat here and goes the transaction's way (SEAT_SQL), which says why.
FRESH_SEAT_SQL = """
UPDATE licensing_batch SET units_activated = units_activated + 1
WHERE id = %s AND units_activated < units_purchased AND released_seats = 0
    AND NOT EXISTS (
        SELECT 1 FROM licensing_license WHERE id = %s AND revoked_at IS NOT NULL
    )
    AND (trial_days IS NOT NULL) = %s
RETURNING units_purchased - units_activated AS remaining
"""
# The event reports the units left, which only the seat's UPDATE knows.
REMAINING_IN_EVENT = {
    (Event, "data"): "jsonb_set(%s, '{units_remaining}', to_jsonb(guard.remaining))"
}
KEYS_HELD = 4096  # verified batch keys kept per process; beyond, the cache starts over


@dataclass(frozen=True)
class ActivationResult:
    license_id: str
    token: str
    reactivated: bool
    batch_units_remaining: int | None = None
    # With ``positioned=True``: the list position the device is handed with its licence,
    # built before the seat was taken (licensing.revocations.list_position).
    position: ListPosition | None = None


@dataclass(frozen=True)
class BatchKey:
    """A verified batch key and the batch it sells: facts that never change (its end
    does, with a renewal: the lookup reads it on every request)."""

    license_id: str
    batch_id: str
    customer_id: str
    sku: str
    claims: dict[str, Any]
    unit_price: Decimal
    currency: str


_keys: dict[str, tuple[object, BatchKey]] = {}  # token SHA-256 -> (registry, key)
_keys_lock = threading.Lock()


def _verified(batch_token: str) -> BatchKey:
    """The batch a presented key sells, or Forbidden. A key counts only when this
    authority issued it: its batch row exists, names this very licence, and the token is
    byte for byte the one issued (:class:`TokenNotIssued` otherwise, not yet recorded)."""
    digest = token_digest(batch_token)
    registry = keyring.registry()
    held = _keys.get(digest)
    if held is not None and held[0] is registry:
        return held[1]
    key = _verify(batch_token, digest)
    with _keys_lock:
        if len(_keys) >= KEYS_HELD:
            _keys.clear()
        _keys[digest] = (registry, key)
    return key


def batch_key_customer(batch_token: str) -> str:
    """The customer a presented batch key sells to (Forbidden as :func:`unit_activate`
    refuses a key): the portal and the customer API take a seat only for their own
    customer's batch (the offline file exchange, issue 44)."""
    try:
        return _verified(batch_token).customer_id
    except TokenNotIssued as refusal:
        refusal.record()
        raise


def _signed_claims(batch_token: str) -> dict[str, Any]:
    """Claims of a presented batch key, its signature checked; Forbidden otherwise.

    A batch key outlives its signing key: batch keys are flashed into firmware images on
    shelves, so revoking the key that signed them must not end their batches. When the
    only fault is that the signing key was revoked since, the token is checked under that
    key. Such a signature proves nothing by itself (the key may have leaked): the token
    then counts, like every batch key, only if it is byte for byte the one issued for
    its batch (:func:`_verify`), and a variant is refused and recorded as a possible
    compromise. The normal case (a key not revoked) costs what it did: one verification."""
    try:
        return keyring.verify(batch_token)
    except BadSignature as exc:
        try:
            return keyring.verify_under_revoked_key(batch_token)
        except BadSignature:
            raise Forbidden(f"batch key rejected: {exc}") from None


def _verify(batch_token: str, digest: str) -> BatchKey:
    claims = _signed_claims(batch_token)
    batch_claim = claims.get("batch")
    if claims["dev"] != "*" or claims["act"] != "required" or batch_claim is None:
        raise Forbidden(f"licence {claims['lic']} is not a batch key (dev '*', act 'required')")
    batch = Batch.objects.select_related("license").filter(pk=batch_claim["id"]).first()
    what = f"batch key {claims['lic']} for batch {batch_claim['id']}"
    if batch is None or batch.license_id != claims["lic"] or batch.customer_id != claims["sub"]:
        raise not_issued(
            what=what,
            license_id=claims["lic"],
            claims=claims,
            issued=None if batch is None else batch.license.claims,
            why="not issued by this authority: no such batch key is on file",
        )
    refusal = issued_check(
        license_id=batch.license_id,
        token_sha256=digest,
        stored_sha256=batch.license.token_sha256,
        claims=claims,
        stored_claims=batch.license.claims,
        what=what,
    )
    if refusal is not None:
        raise refusal
    if not Sku.objects.filter(pk=batch.sku).exists():
        raise MisconfiguredService(
            f"batch {batch.id} references SKU {batch.sku}, which is not in the catalogue; "
            "restore the catalogue entry to resume activations"
        )
    return BatchKey(
        license_id=batch.license_id,
        batch_id=batch.id,
        customer_id=batch.customer_id,
        sku=batch.sku,
        claims=batch.license.claims,
        unit_price=batch.unit_price,
        currency=batch.currency,
    )


def _key_revoked(key: BatchKey) -> Forbidden:
    revoked_at, reason = License.objects.values_list("revoked_at", "revoke_reason").get(
        pk=key.license_id
    )
    return Forbidden(
        f"batch key {key.license_id} of batch {key.batch_id} was revoked at "
        f"{unix(revoked_at)} ({reason or 'no reason given'})"
    )


def _unit_revoked(key: BatchKey, device_id: str, license_id: str) -> Forbidden:
    revoked_at = License.objects.values_list("revoked_at", flat=True).get(pk=license_id)
    return Forbidden(
        f"device {device_id} is on file for batch {key.batch_id} with licence "
        f"{license_id}, which was revoked at {unix(revoked_at)}"
    )


def _aware(value: Any) -> dt.datetime | None:
    """A datetime column read by plain SQL: aware on PostgreSQL, naive UTC (or text) on
    SQLite."""
    if value is None or isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class Found:
    """What the one lookup found: the batch key's current end, the batch's trial days
    (None: not a trial now), the device's licence when it is on file (else None) and
    the check-in lease and hold its status carries, and the batch's add-ons version."""

    ends: dt.datetime | None
    trial_days: int | None
    existing: ActivationResult | None
    terms: leases.LeaseAndHold
    addons_version: int = 0  # the batch's (licensing.addons)
    # Issue 45 (licensing.identity): the unit's activation record and the hash of the
    # component set it is bound to, and the batch's matching policy.
    activation_id: int | None = None
    components_sha256: str = ""
    policy: str = identity_rules.DEFAULT_POLICY
    last_ip: str | None = None  # where the unit's set was last seen from


class _TrialStateChanged(Exception):
    """The batch was converted (or not) since the unit was signed: sign it again."""


def _lookup(key: BatchKey, device_id: str, now: dt.datetime) -> Found:
    """:class:`Found` for ``device_id`` on the batch (:mod:`licensing.leases` for the
    lease and hold); Forbidden when the batch key has expired (past its end, whatever
    renewal set it to) or it or that licence is revoked. A licence signed before its
    batch was renewed is re-signed to the batch's end (once per renewal); a unit on
    trial keeps its own end (:mod:`licensing.trials`; a conversion re-signed its units
    itself)."""
    with connection.cursor() as cursor:
        cursor.execute(LOOKUP_SQL, [key.batch_id, device_id, key.license_id])
        (key_revoked, ends, license_id, token, unit_revoked, unit_ends, sha, days, held,
         trial_days, unit_trial, version, unit_version, activation_id, components_sha256,
         batch_policy, sku_policy, last_ip) = cursor.fetchone()  # fmt: skip
    version = version or 0
    policy = identity.policy_effective(batch_policy, sku_policy)
    terms = leases.from_values(days, None, None, held)
    if key_revoked:
        raise _key_revoked(key)
    ends = _aware(ends)
    if ends is not None and now > ends:
        raise Forbidden(
            f"batch key {key.license_id} of batch {key.batch_id} expired at {unix(ends)}"
        )
    if license_id is None:
        return Found(ends, trial_days, None, terms, version, policy=policy)
    if unit_revoked:
        raise _unit_revoked(key, device_id, license_id)
    unit_ends = _aware(unit_ends)
    follows = trials.batch_end_for_unit(unit_trial=bool(unit_trial), batch_expires_at=ends)
    rekey = keyring.key_stale(token)  # signed by a key retired or revoked since
    addons_stale = unit_version != version  # its batch's add-ons changed since it was signed
    if (
        rekey
        or addons_stale
        or (follows is not None and (unit_ends is None or unit_ends < follows))
    ):
        token = renewals.unit_token_current(
            license_id=license_id,
            token=token,
            token_sha256=sha,
            expires_at=unit_ends,
            batch_expires_at=follows,
            rekey=rekey,
            addons_stale=addons_stale,
        )
    existing = ActivationResult(license_id, token, reactivated=True)
    return Found(
        ends,
        trial_days,
        existing,
        terms,
        version,
        activation_id,
        components_sha256 or "",
        policy,
        last_ip,
    )


def _held(key: BatchKey, device_id: str) -> Forbidden:
    hold = (
        Suspension.objects.filter(
            Q(kind=Suspension.Kind.BATCH, target=key.batch_id)
            | Q(kind=Suspension.Kind.CUSTOMER, target=key.customer_id)
        )
        .order_by("suspended_at")
        .first()
    )
    what = (
        f"batch {key.batch_id}"
        if hold is None or hold.kind == "batch"
        else (f"customer {key.customer_id}")
    )
    reason = hold.reason if hold is not None else "no reason given"
    return Forbidden(
        f"{what} is suspended ({reason}): device {device_id} cannot take a seat of batch "
        f"{key.batch_id} until an operator reinstates it"
    )


def _seat_refused(key: BatchKey, device_id: str, trial: bool) -> Exception:
    """Why the seat UPDATE changed nothing: the batch was converted meanwhile (or the
    unit was signed for another trial state), the key was revoked meanwhile, or the
    batch is exhausted."""
    purchased, activated, trial_days = Batch.objects.values_list(
        "units_purchased", "units_activated", "trial_days"
    ).get(pk=key.batch_id)
    if (trial_days is not None) != trial:
        return _TrialStateChanged()
    if activated < purchased:
        return _key_revoked(key)
    return PaymentRequired(
        f"batch {key.batch_id} is exhausted: {activated} of {purchased} units activated; "
        f"buy more units to activate device {device_id}"
    )


def _unit_sign(
    key: BatchKey,
    device_id: str,
    expires_at: dt.datetime | None,
    trial_days: int | None,
    grants: list[AddOnGrant],
    components: dict[str, str] | None = None,
    policy: str = identity_rules.DEFAULT_POLICY,
) -> tuple[dt.datetime, str, dict[str, Any]]:
    """Sign the unit licence for ``device_id``: (issue time, token, claims). The unit
    carries the batch key's entitlements, caps and grace, whatever the catalogue says
    today: the customer bought what the key says. A unit of a trial batch
    (``trial_days``) ends ``trial_days`` after now, without grace, marked as a trial
    (:mod:`licensing.trials`). It carries the add-ons ``grants`` of its batch
    (``licensing.addons``).

    Done before the seat is taken, outside the transaction: a signer that is slow or
    unreachable (an HSM) then holds no lock on the batch row, and its failure leaves
    nothing to roll back."""
    now = clock.now()
    sold = with_addons(sold_part(key.claims), grants)
    lim = sold["lim"]
    trial = trial_days is not None
    claims = license_claims(
        license_id=ids.license_id(),
        sku=key.sku,
        customer_id=key.customer_id,
        device_id=device_id,
        activation=License.Activation.OPTIONAL,
        issued_at=now,
        expires_at=trials.trial_end(now.replace(microsecond=0), trial_days)
        if trial
        else expires_at,
        entitlements=sold["ent"],
        max_streams=lim["max_streams"],
        max_fps=lim["max_fps"],
        api_calls=lim["api_calls"],
        grace_days=trials.TRIAL_GRACE_DAYS if trial else key.claims["grace_days"],
        trial=trial,
    )
    # The reported component set and policy, for the device's offline check (issue 45).
    token, signed = keyring.sign_claims(identity.bound_claims(claims, components, policy))
    return now, token, signed


def _unit_rows(
    key: BatchKey,
    *,
    device_id: str,
    fingerprint_source: str,
    weak_binding: bool,
    sdk_version: str,
    client_ip: str | None,
    transfer_of: int | None,
    signed_unit: tuple[dt.datetime, str, dict[str, Any]],
    units_remaining: int,
    leased: bool = False,
    addons_version: int = 0,
    grants: tuple[AddOnGrant, ...] = (),
    components: dict[str, str] | None = None,
) -> list[tuple[type, dict[str, Any]]]:
    """The rows of a new unit: its signed licence, its activation record, a trial's
    use of its SKU by the device (:class:`~licensing.models.TrialUse`), its event (the
    outbox: reported only if it happened) and the charges of the add-ons it carries
    (``licensing.addons``: for a transfer, beyond what its predecessors were charged),
    for ``config.rows``."""
    now, token, signed = signed_unit
    expires_at = dt.datetime.fromtimestamp(signed["exp"], dt.UTC) if signed["exp"] else None
    trial = bool(signed.get(trials.TRIAL_CLAIM))
    license_row = dict(
        id=signed["lic"],
        kind=License.Kind.UNIT,
        customer_id=key.customer_id,
        sku=key.sku,
        device_id=device_id,
        activation=License.Activation.OPTIONAL,
        batch_id=key.batch_id,
        issued_at=now,
        expires_at=expires_at,
        grace_days=signed["grace_days"],
        unit_price=key.unit_price,
        currency=key.currency,
        claims=signed,
        token=token,
        token_sha256=token_digest(token),
        revoked_at=None,
        revoke_reason="",
        # Under a check-in lease its status, handed out with it, starts the lease.
        checked_in_at=now if leased else None,
        trial=trial,
        addons_version=addons_version,
    )
    activation_row = dict(
        batch_id=key.batch_id,
        device_id=device_id,
        license_id=signed["lic"],
        fingerprint_source=fingerprint_source[:32],
        weak_binding=weak_binding,
        sdk_version=sdk_version[:64],
        activated_at=now,
        client_ip=client_ip,
        transfer_of_id=transfer_of,
        # Seen by its activation: a column of the row written anyway, no statement more.
        last_seen_at=now,
        trial=trial,
        components=components or None,
        components_sha256=identity.set_digest(components),
    )
    event = event_row(
        Event.Type.LICENSE_ACTIVATED,
        customer_id=key.customer_id,
        data={
            "license_id": signed["lic"],
            "customer_id": key.customer_id,
            "batch_id": key.batch_id,
            "device_id": device_id,
            "sku": key.sku,
            "expires_at": signed["exp"],
            "units_remaining": units_remaining,
            "transfer": transfer_of is not None,
            "trial": trial,
        },
    )
    rows = [
        (License, license_row),
        (Activation, activation_row),
        *identity.component_rows(
            license_id=signed["lic"], batch_id=key.batch_id, components=components
        ),
    ]
    if trial:
        use = dict(
            sku=key.sku,
            device_id=device_id,
            batch_id=key.batch_id,
            license_id=signed["lic"],
            used_at=now,
        )
        rows.append((TrialUse, use))
    charges = addons.charges_for(
        license_id=signed["lic"],
        grants=list(grants),
        ends_at=expires_at,
        now=now,
        new=True,
        transfer_of=transfer_of,
    )
    return [*rows, event, *addons.charge_rows(charges)]


def _seat_and_unit(
    key: BatchKey, position: ListPosition | None, **unit: Any
) -> ActivationResult | None:
    """PostgreSQL: the seat and the unit's rows in one statement (FRESH_SEAT_SQL); None,
    with nothing written, when it took no seat. Inside a caller's transaction it runs in
    a savepoint, so that losing a race for the device (IntegrityError) leaves the
    caller's transaction usable."""
    rows = _unit_rows(key, transfer_of=None, units_remaining=0, **unit)
    trial = bool(unit["signed_unit"][2].get(trials.TRIAL_CLAIM))
    within = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    with within:
        seat = insert_rows_after(
            FRESH_SEAT_SQL,
            [key.batch_id, key.license_id, trial],
            *rows,
            expressions=REMAINING_IN_EVENT,
        )
    if seat is None:
        return None
    now, token, signed = unit["signed_unit"]
    seen.unit_seen_noted(license_id=signed["lic"], device_id=signed["dev"], now=now)
    return ActivationResult(
        signed["lic"], token, reactivated=False, batch_units_remaining=seat[0], position=position
    )


def _positioned(
    result: ActivationResult, device_id: str, terms: leases.LeaseAndHold
) -> ActivationResult:
    """A device's licence on file, with its list position (read after the lookup: no
    seat is taken by this request, so a failure here leaves nothing behind)."""
    position = list_position(
        license_id=result.license_id, device_id=device_id, terms=terms, check_in=True
    )
    return dataclasses.replace(result, position=position)


def unit_activate(
    *,
    batch_token: str,
    device_id: str,
    fingerprint_source: str = "",
    weak_binding: bool = False,
    sdk_version: str = "",
    client_ip: str | None = None,
    positioned: bool = False,
    components: Any = None,
) -> ActivationResult:
    """Exchange a batch key for a licence bound to ``device_id``; a device already on
    file gets its licence again (``reactivated``), at no charge.

    The seat is taken by one conditional UPDATE, never read-modify-write, so concurrent
    requests can neither oversell a batch nor lose a count. The seat, the licence and the
    activation commit together: when a concurrent request for the same device wins the
    unique (batch, device_id) race, this transaction rolls back (returning the seat) and
    the winner's licence is returned.

    Nothing after the commit reads the database, signs or can raise: the answer is built
    from what the transaction returned and what was made before it. ``positioned=True``
    (the device API) adds the list position handed out with the licence
    (:class:`ListPosition`), built before the seat is taken, so that a database or signer
    failing just after the commit cannot turn a taken seat into an error answer.
    """
    problem = device_id_problem(device_id)
    if problem:
        raise InvalidInput(f"device_id {problem}")
    components = identity.components_checked(components)
    try:
        key = _verified(batch_token)
    except TokenNotIssued as refusal:
        refusal.record()
        raise
    now = clock.now()
    if key.claims["nbf"] > unix(now):
        raise Forbidden(f"batch key {key.license_id} is not valid before {key.claims['nbf']}")
    unit = dict(
        device_id=device_id,
        fingerprint_source=fingerprint_source,
        weak_binding=weak_binding,
        sdk_version=sdk_version,
        client_ip=client_ip,
        components=components,
    )
    try:
        return _activate(key, now, positioned=positioned, **unit)
    except _TrialStateChanged:
        # Converted while this unit was signed as a trial: a batch converts once, so the
        # second time the unit is signed as the paid unit it now is.
        return _activate(key, now, positioned=positioned, **unit)


def _trial_use(key: BatchKey, device_id: str) -> str | None:
    """The batch on which ``device_id`` had its trial of the key's SKU, if it had one."""
    return (
        TrialUse.objects.filter(sku=key.sku, device_id=device_id)
        .values_list("batch_id", flat=True)
        .first()
    )


def _second_trial(key: BatchKey, device_id: str, used_on: str) -> trials.TrialUsed:
    """The refusal of a device's second trial of a SKU, on the audit log (a camera
    trying trial after trial is worth an operator's look)."""
    refusal = trials.trial_used(
        sku=key.sku, device_id=device_id, batch_id=key.batch_id, used_on=used_on
    )
    audit_refusal(
        action="license.activate",
        status=refusal.status_code,
        target=f"device {device_id}",
        detail={"batch_id": key.batch_id, "sku": key.sku, "trial_used_on": used_on},
        message=refusal.detail,
    )
    return refusal


def _identity_change(
    key: BatchKey,
    found: Found,
    device_id: str,
    components: dict[str, str],
    reported: dict[str, Any],
) -> ActivationResult | None:
    """The licence rebound to a reported component set (:mod:`licensing.identity`), or
    None: the set on file unchanged (no query), or not met (answered as without one)."""
    rebound = identity.activation_rebind(
        batch_id=key.batch_id,
        activation_id=found.activation_id if found.existing is not None else None,
        stored_sha256=found.components_sha256,
        device_id=device_id,
        components=components,
        client_ip=reported.get("client_ip"),
        last_ip=found.last_ip,
    )
    if rebound is None:
        return None
    return ActivationResult(rebound.license_id, rebound.token, reactivated=True)


def _activate(
    key: BatchKey, now: dt.datetime, *, positioned: bool, device_id: str, **reported: Any
) -> ActivationResult:
    found = _lookup(key, device_id, now)
    existing, terms = found.existing, found.terms
    components = reported.get("components")
    if components is not None:
        # Issue 45: a changed set on file is rebound (or a clone flagged); a new device id
        # whose set meets a unit's policy is that unit repaired (licensing.identity).
        rebound = _identity_change(key, found, device_id, components, reported)
        if rebound is not None:
            existing = rebound
    if existing is not None:
        result = _positioned(existing, device_id, terms) if positioned else existing
        # After the answer is built: no query when this process recorded the unit as
        # seen within SVC_LAST_SEEN_MINUTES, else one conditional UPDATE that cannot fail
        # the answer (licensing.services.seen).
        seen.unit_seen(license_id=existing.license_id, device_id=device_id)
        return result
    if terms.suspended:
        # Units already on file keep re-activating (their status says suspended); a held
        # batch or customer takes no new seat, so nothing is billed while it is held.
        raise _held(key, device_id)
    trial = found.trial_days is not None
    if trial:
        used_on = _trial_use(key, device_id)
        if used_on == key.batch_id:
            # This device's trial on this very batch, committed by a concurrent request
            # since the lookup: not a second trial but a re-activation of that unit.
            again = _lookup(key, device_id, now)
            if again.existing is not None:
                return (
                    _positioned(again.existing, device_id, again.terms)
                    if positioned
                    else (again.existing)
                )
        if used_on is not None:
            raise _second_trial(key, device_id, used_on)
    # The batch's add-ons (one query, only for a batch that ever had one).
    grants = addons.active_grants(license_id=key.license_id) if found.addons_version else []
    signed_unit = _unit_sign(
        key, device_id, found.ends, found.trial_days, grants, components, found.policy
    )
    position = None
    if positioned:
        position = list_position(license_id=signed_unit[2]["lic"], device_id=device_id, terms=terms)
    unit = dict(
        device_id=device_id,
        signed_unit=signed_unit,
        leased=terms.days is not None,
        addons_version=found.addons_version,
        grants=tuple(grants),
        **reported,
    )
    try:
        if connection.vendor == "postgresql":
            created = _seat_and_unit(key, position, **unit)
            if created is not None:
                return created
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(SEAT_SQL, [key.batch_id, key.license_id, trial])
                seat = cursor.fetchone()
            if seat is None:
                raise _seat_refused(key, device_id, trial)
            # A seat an operator released (a dead camera's) goes to this device as a
            # transfer, not billed again; the batch row stays locked until commit.
            transfer_of = seats.released_seat_take(key.batch_id) if seat[1] else None
            insert_rows(*_unit_rows(key, transfer_of=transfer_of, units_remaining=seat[0], **unit))
    except IntegrityError:
        # Another request for this device won: no seat taken here, the winner's licence.
        # Or, on a trial batch, another request for this device's trial of the SKU on
        # another batch won (the TrialUse row's unique key): refused as a second trial.
        found = _lookup(key, device_id, now)
        if found.existing is None:
            used_on = _trial_use(key, device_id) if trial else None
            if used_on is not None:
                raise _second_trial(key, device_id, used_on) from None
            raise
        existing = found.existing
        return _positioned(existing, device_id, found.terms) if positioned else existing
    signed_at, token, signed = signed_unit
    seen.unit_seen_noted(license_id=signed["lic"], device_id=device_id, now=signed_at)
    return ActivationResult(
        signed["lic"], token, reactivated=False, batch_units_remaining=seat[0], position=position
    )
