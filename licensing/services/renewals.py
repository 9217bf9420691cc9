"""Renewal: a batch or a direct licence runs for another term, in place (issue 16).

Where the new term starts (``renewal_end``): renewed before it ends, from the current
end (no day lost); after the end but within the grace period, from the old end; after
grace, from the renewal. A perpetual licence has nothing to renew; a revoked one cannot
be renewed.

What changes at once, in one transaction holding the batch's (or the licence's) row lock:
the batch's and its batch key's ``expires_at``, the batch key (or direct licence)
re-signed with the new ``exp`` (same ``nbf``), and a :class:`~licensing.models.Renewal`
row that billing attributes to exactly one invoice: its units are those activated and
not revoked at the renewal (:func:`units_in_service`). The token it replaces is kept as a
:class:`~licensing.models.SupersededToken`, so the batch key flashed into cameras and a
direct licence not yet refreshed still count as issued.

Unit licences of a renewed batch are re-signed lazily (:func:`unit_token_current`): when
their device asks (``GET /v1/license`` during ``sync``, or re-activation), never a
million signatures in the renewal request. The unit's row then holds the token handed
out; a conditional UPDATE on the token's hash makes concurrent refreshes of one unit
store one token and answer it to both.

Renewal is idempotent per request: ``idempotency_key`` is unique among renewals, so a
retried request answers the first renewal (``replayed``), and the same key with another
request is refused (409). Two different keys are two renewals: that is what was asked.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction

from audit.services import audited
from config import clock
from config.admin.display import utc_time
from config.drafts import drafted
from config.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from devices.errors import BadSignature
from devices.term import ACTIVE, GRACE
from events.models import Event
from events.services import event_emit
from licensing import addons, identity, trials
from licensing.held import license_held
from licensing.models import (
    Activation,
    AddOnCharge,
    Batch,
    License,
    Renewal,
    SupersededToken,
    token_digest,
)
from licensing.services.licenses import license_data, sku_get
from signing import keyring
from svccore.claims import LAST_SECOND, TERM_DAYS_MAX
from svccore.timeunits import term_state_at, unix

IDEMPOTENCY_KEY_MAX = 200


@dataclass(frozen=True)
class RenewalResult:
    renewal: Renewal
    replayed: bool


def renewal_end(
    *, expires_at: dt.datetime, grace_days: int, term_days: int, now: dt.datetime
) -> tuple[str, dt.datetime]:
    """(basis, new end) of renewing a licence ending at ``expires_at`` at ``now``."""
    term = dt.timedelta(days=term_days)
    state = term_state_at(expires_at, grace_days, now)
    if state == ACTIVE:
        return Renewal.Basis.BEFORE_EXPIRY, expires_at + term
    if state == GRACE:
        return Renewal.Basis.IN_GRACE, expires_at + term
    return Renewal.Basis.AFTER_GRACE, now + term


def _request_digest(*, batch_id: str | None, license_id: str | None, term_days: int | None) -> str:
    asked = {"batch_id": batch_id, "license_id": license_id, "term_days": term_days}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()


def _checked_key(idempotency_key: Any) -> str:
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise InvalidInput(
            "idempotency_key is required: a string of your choosing, unique per renewal you "
            "mean (a retry with the same key answers the first renewal instead of renewing "
            "twice)"
        )
    key = idempotency_key.strip()
    if len(key) > IDEMPOTENCY_KEY_MAX or not key.isprintable():
        raise InvalidInput(
            f"idempotency_key must be 1-{IDEMPOTENCY_KEY_MAX} printable characters, not {len(key)}"
        )
    return key


def _replay(key: str, digest: str) -> RenewalResult | None:
    """The renewal made earlier under ``key``; Conflict when that was another request."""
    earlier = Renewal.objects.select_related("license").filter(idempotency_key=key).first()
    if earlier is None:
        return None
    if earlier.request_digest != digest:
        target = earlier.batch_id or earlier.license_id
        raise Conflict(
            f"idempotency_key {key!r} was already used at {unix(earlier.renewed_at)} to renew "
            f"{target} (term {earlier.term_days} days) with another request; use a new key "
            "for a new renewal"
        )
    return RenewalResult(earlier, replayed=True)


def resign(claims: dict[str, Any], *, expires_at: dt.datetime | None, now: dt.datetime):
    """(token, signed claims) of ``claims`` signed again by the active key, with a new
    end (None: the end it has): ``exp`` moves and ``iat`` is the signing time;
    everything else, ``nbf`` included, stays as issued (a device whose clock lags a little
    must not find its renewed licence not yet valid)."""
    renewed = {name: value for name, value in claims.items() if name != "kid"}
    if expires_at is not None:
        renewed["exp"] = unix(expires_at)
    renewed["iat"] = unix(now)
    return keyring.sign_claims(renewed)


def _replace_token(lic: License, *, expires_at: dt.datetime, now: dt.datetime) -> None:
    """Re-sign a locked licence row with a new end; its token so far stays issued."""
    token, signed = resign(lic.claims, expires_at=expires_at, now=now)
    # The current token: never superseded before (a replaced token never comes back).
    SupersededToken.objects.create(
        license_id=lic.id, token_sha256=lic.token_sha256, superseded_at=now
    )
    lic.token, lic.claims, lic.token_sha256 = token, signed, token_digest(token)
    lic.expires_at = expires_at
    lic.save(update_fields=["token", "claims", "token_sha256", "expires_at"])


def units_in_service(batch: Batch) -> int:
    """The units a batch renewal bills (contract §6.5): activated and not revoked now
    (the caller holds the batch's row lock). A stolen or released camera's revoked unit
    is not renewed, so it is not billed."""
    return Activation.objects.filter(batch=batch, license__revoked_at__isnull=True).count()


def _target(batch_id: str | None, license_id: str | None) -> tuple[Batch | None, License]:
    """The batch (None for a direct licence) and the licence to re-sign, both locked
    (batch row first, the order every seat change takes)."""
    if bool(batch_id) == bool(license_id):
        raise InvalidInput(
            "name what to renew: batch_id (a batch and its units) or license_id (a direct "
            "licence), one of them"
        )
    if license_id:
        lic = License.objects.filter(pk=license_id).first()
        if lic is None:
            raise NotFound(f"licence {license_id} does not exist")
        if lic.kind == License.Kind.UNIT:
            raise InvalidInput(
                f"licence {license_id} is a unit licence of batch {lic.batch_id}: renew the "
                f"batch (batch_id {lic.batch_id}); its cameras fetch their renewed licences "
                "at their next sync"
            )
        if lic.kind == License.Kind.OFFLINE:
            raise InvalidInput(
                f"licence {license_id} was minted offline; mint a new one on the air-gapped "
                "machine (svcctl mint) to extend it"
            )
        if lic.kind == License.Kind.BATCH_KEY:
            batch_id = Batch.objects.values_list("id", flat=True).get(license_id=license_id)
        else:
            return None, License.objects.select_for_update().get(pk=license_id)
    batch = Batch.objects.select_for_update().filter(pk=batch_id).first()
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    return batch, License.objects.select_for_update().get(pk=batch.license_id)


@transaction.atomic
def _renew(
    *, key: str, digest: str, batch_id: str | None, license_id: str | None, term_days: int | None
) -> RenewalResult:
    earlier = _replay(key, digest)
    if earlier is not None:
        return earlier
    batch, lic = _target(batch_id, license_id)
    # A concurrent request with this key may have committed while this one waited for
    # the lock: it is the renewal asked for.
    earlier = _replay(key, digest)
    if earlier is not None:
        return earlier
    what = f"batch {batch.id}" if batch else f"licence {lic.id}"
    if lic.revoked_at is not None:
        raise Conflict(
            f"{what} cannot be renewed: its licence {lic.id} was revoked at "
            f"{utc_time(lic.revoked_at)} ({lic.revoke_reason or 'no reason given'})"
        )
    if batch is not None and batch.is_trial:
        raise InvalidInput(
            f"{what} is a trial ({batch.trial_days} days per camera from its activation): "
            "a trial is not renewed; convert it to paid (its cameras then run the paid term)"
        )
    if lic.expires_at is None:
        raise InvalidInput(f"{what} is perpetual: it never ends, so there is nothing to renew")
    if term_days is None:
        term_days = sku_get(code=lic.sku).term_days
        if term_days == 0:
            raise InvalidInput(
                f"{what} is of SKU {lic.sku}, which has no default term (perpetual); give term_days"
            )
    if type(term_days) is not int or not 1 <= term_days <= TERM_DAYS_MAX:
        raise InvalidInput(f"term_days must be an integer 1-{TERM_DAYS_MAX:,}, not {term_days!r}")
    now = clock.now().replace(microsecond=0)
    basis, expires_at = renewal_end(
        expires_at=lic.expires_at, grace_days=lic.grace_days, term_days=term_days, now=now
    )
    if expires_at <= now:
        short = (now - lic.expires_at).days + 1
        raise InvalidInput(
            f"{what} ended at {unix(lic.expires_at)} and is in its grace period, so a renewal "
            f"runs from that end: {term_days} days would end at {unix(expires_at)}, already "
            f"past (now {unix(now)}); give term_days of at least {short}"
        )
    if unix(expires_at) > LAST_SECOND:
        raise InvalidInput(
            f"{what} would end after the year 9999 ({term_days} days from "
            f"{unix(lic.expires_at if basis != Renewal.Basis.AFTER_GRACE else now)}); "
            "give a shorter term"
        )
    previous = lic.expires_at
    _replace_token(lic, expires_at=expires_at, now=now)
    if batch is not None:
        Batch.objects.filter(pk=batch.pk).update(expires_at=expires_at)
    else:
        # A direct licence's add-ons run on with it: the new term is charged now (a
        # batch's units are, each as it fetches its renewed licence).
        AddOnCharge.objects.bulk_create(
            addons.charges_for(
                license_id=lic.id,
                grants=addons.active_grants(license_id=lic.id),
                ends_at=expires_at,
                now=now,
            )
        )
    event_emit(
        Event.Type.LICENSE_RENEWED,
        customer_id=lic.customer_id,
        data=license_data(lic)
        | {"expires_at": unix(expires_at), "term_days": term_days}
        | ({"batch_id": batch.id} if batch is not None else {}),
    )
    return RenewalResult(
        Renewal.objects.create(
            idempotency_key=key,
            request_digest=digest,
            customer_id=lic.customer_id,
            sku=lic.sku,
            batch=batch,
            license=lic,
            term_days=term_days,
            basis=basis,
            previous_expires_at=previous,
            expires_at=expires_at,
            renewed_at=now,
            units=units_in_service(batch) if batch is not None else 1,
            unit_price=batch.unit_price if batch is not None else lic.unit_price,
            currency=batch.currency if batch is not None else lic.currency,
        ),
        replayed=False,
    )


@audited(
    "license.renew",
    target=lambda result, arguments: result.renewal.batch_id or result.renewal.license_id,
)
def license_renew(
    *,
    idempotency_key: str,
    batch_id: str | None = None,
    license_id: str | None = None,
    term_days: int | None = None,
) -> RenewalResult:
    """Renew a batch (its batch key and, lazily, its units) or a direct licence for
    ``term_days`` more (default: the SKU's term); see the module's docstring for where
    the term starts. Idempotent per ``idempotency_key``.

    Refused: neither or both of ``batch_id`` and ``license_id``, a unit, offline-minted
    or perpetual licence, a term outside 1..36600 days or one that would end in the past
    or after 9999 (InvalidInput); unknown (NotFound); revoked, or the key used for
    another request (Conflict)."""
    key = _checked_key(idempotency_key)
    digest = _request_digest(batch_id=batch_id, license_id=license_id, term_days=term_days)
    try:
        return _renew(
            key=key, digest=digest, batch_id=batch_id, license_id=license_id, term_days=term_days
        )
    except IntegrityError:
        # Two requests with one key on two targets (no shared lock): the unique key let
        # one through; this one rolled back whole and answers it, or is refused.
        earlier = _replay(key, digest)
        if earlier is None:
            raise
        return earlier


@dataclass(frozen=True)
class RenewalQuote:
    """What renewing would do now: the confirmation page's row."""

    customer_id: str
    customer_name: str
    sku: str
    batch_id: str | None
    license_id: str
    term_days: int
    basis: str
    previous_expires_at: dt.datetime
    expires_at: dt.datetime
    units: int
    unit_price: Decimal
    currency: str

    @property
    def amount(self) -> Decimal:
        return self.units * self.unit_price


def renewal_quote(
    *, batch_id: str | None = None, license_id: str | None = None, term_days: int | None = None
) -> RenewalQuote:
    """The new end, units and amount :func:`license_renew` would give now, computed by
    renewing and rolling back (:func:`config.drafts.drafted`), so they are the
    renewal's own. Raises what renewing would (revoked, perpetual, a bad term)."""

    def read(result: RenewalResult) -> RenewalQuote:
        renewal = result.renewal
        return RenewalQuote(
            customer_id=renewal.customer_id,
            customer_name=renewal.customer.name,
            sku=renewal.sku,
            batch_id=renewal.batch_id,
            license_id=renewal.license_id,
            term_days=renewal.term_days,
            basis=renewal.get_basis_display(),
            previous_expires_at=renewal.previous_expires_at,
            expires_at=renewal.expires_at,
            units=renewal.units,
            unit_price=renewal.unit_price,
            currency=renewal.currency,
        )

    return drafted(
        lambda: _renew(
            key=f"quote-{uuid.uuid4().hex}",
            digest="quote",
            batch_id=batch_id,
            license_id=license_id,
            term_days=term_days,
        ),
        read,
    )


# --- unit licences of a renewed batch: re-signed when their device asks ---------------


def unit_token_current(
    *,
    license_id: str,
    token: str,
    token_sha256: str,
    expires_at: dt.datetime | None,
    batch_expires_at: dt.datetime | None,
    rekey: bool = False,
    addons_stale: bool = False,
) -> str:
    """The current token of a licence whose row holds ``token`` (with its hash and end):
    the same token while its end is its batch's (a unit's), its key is in use and it
    carries its batch's add-ons of now, else the licence re-signed by the active key, to
    end with its renewed batch, with its batch's add-ons (``licensing.addons``), and
    stored (the row's token, claims, end, hash and add-ons version are then the token
    answered, and the token it replaces stays issued). ``rekey``: ``token``'s key is
    retired or revoked (``keyring.key_stale``), so it is re-signed whatever its end;
    ``addons_stale``: its batch's add-ons changed since it was signed.

    Whatever a re-signed token carries for time not yet charged is charged in the same
    transaction (:func:`licensing.addons.charges_for`). Concurrent refreshes of one
    licence each sign, but one conditional UPDATE wins (and charges); the others answer
    the winner's token. Forbidden if the licence was revoked meanwhile."""
    extends = batch_expires_at is not None and (expires_at is None or expires_at < batch_expires_at)
    if not (extends or rekey or addons_stale):
        return token
    end = batch_expires_at if extends else expires_at
    signing = addons.unit_signing(license_id)
    now = clock.now().replace(microsecond=0)
    renewed, signed = resign(signing.claims, expires_at=end, now=now)
    with transaction.atomic():
        stored = License.objects.filter(
            pk=license_id, token_sha256=token_sha256, revoked_at__isnull=True
        ).update(
            token=renewed,
            claims=signed,
            token_sha256=token_digest(renewed),
            expires_at=end,
            addons_version=signing.version,
        )
        if stored:
            SupersededToken.objects.create(
                license_id=license_id, token_sha256=token_sha256, superseded_at=now
            )
            AddOnCharge.objects.bulk_create(
                addons.charges_for(
                    license_id=license_id, grants=signing.grants, ends_at=end, now=now
                )
            )
            return renewed
    current, revoked_at = License.objects.values_list("token", "revoked_at").get(pk=license_id)
    if revoked_at is not None:
        raise Forbidden(f"licence {license_id} was revoked at {unix(revoked_at)}")
    return current


@dataclass(frozen=True)
class RefreshResult:
    license_id: str
    token: str
    changed: bool
    expires_at: dt.datetime | None


def license_refresh(
    *, token: str | None, device_id: Any, components: Any = None, client_ip: str | None = None
) -> RefreshResult:
    """The current token of the licence a device holds, authenticated by the token it
    holds (``GET /v1/license``): ``changed`` False when that is the current one.

    The presented token must verify (Unauthorized), be bound to ``device_id``, be a
    unit, direct or offline licence on file and one this authority issued (the current
    token or one a renewal replaced), and not be revoked (Forbidden)."""
    if not token:
        raise Unauthorized("a licence refresh needs the header Authorization: Bearer <licence>")
    try:
        claims = keyring.verify(token)
    except BadSignature as exc:
        try:
            # Signed by a key revoked since: answered only if it is the very token
            # issued (license_held), and then with the licence re-signed.
            claims = keyring.verify_under_revoked_key(token)
        except BadSignature:
            raise Unauthorized(f"licence rejected: {exc}") from None
    reported = identity.components_parsed(components)
    if reported is not None and isinstance(device_id, str) and device_id != claims.get("dev"):
        # A repaired camera whose device id changed (issue 45): the token authenticates
        # for the device it names; the licence then follows the reported set if it
        # meets the policy (licensing.identity), else the refusal is as before.
        license_held(claims=claims, token=token, device_id=claims["dev"])
        rebound = identity.sync_rebind(
            license_id=claims["lic"], device_id=device_id, components=reported, client_ip=client_ip
        )
        if rebound is not None:
            lic = License.objects.only("expires_at").get(pk=rebound.license_id)
            return RefreshResult(rebound.license_id, rebound.token, True, lic.expires_at)
    held = license_held(claims=claims, token=token, device_id=device_id)
    if reported is not None:
        rebound = identity.sync_rebind(
            license_id=held.license_id, device_id=device_id, components=reported,
            client_ip=client_ip,
        )  # fmt: skip
        if rebound is not None:
            changed = token_digest(rebound.token) != token_digest(token)
            return RefreshResult(held.license_id, rebound.token, changed, held.expires_at)
    license_id, kind, current = held.license_id, held.kind, held.token
    expires_at, batch_end, stored_sha256 = held.expires_at, held.batch_expires_at, held.token_sha256
    presented = token_digest(token)
    rekey = keyring.key_stale(current)
    if kind != License.Kind.UNIT:
        batch_end = None
    # A unit whose batch's add-ons changed since its token was signed (issue 42).
    addons_stale = kind == License.Kind.UNIT and held.addons_version != held.batch_addons_version
    # A unit on trial ends at its own end, not its batch's (licensing.trials).
    batch_end = trials.batch_end_for_unit(unit_trial=held.trial, batch_expires_at=batch_end)
    if rekey or addons_stale or (batch_end is not None and batch_end != expires_at):
        current = unit_token_current(
            license_id=license_id,
            token=current,
            token_sha256=stored_sha256,
            expires_at=expires_at,
            batch_expires_at=batch_end,
            rekey=rekey,
            addons_stale=addons_stale,
        )
        if batch_end is not None:
            expires_at = max(expires_at, batch_end) if expires_at else batch_end
    changed = token_digest(current) != presented
    return RefreshResult(license_id, current, changed, expires_at)
