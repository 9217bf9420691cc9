"""Every write of the licensing authority: issuing batches and licences, exchanging batch
keys for unit licences (the billing event), registering offline-minted licences,
revocation, and the signing keys (install, retire, revoke)."""

from __future__ import annotations

import datetime as dt
import hmac
import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max

from audit.services import audited
from config import clock, metrics
from config.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
)
from customers.services import customer_get
from devices import token as codec
from devices.errors import BadSignature
from events.models import Event
from events.services import event_emit
from licensing import identity, revocations
from licensing.models import (
    AddOn,
    Batch,
    License,
    Revocation,
    RevocationHead,
    Sku,
    token_digest,
)
from signing import keyring
from svccore import catalogue, ids
from svccore.claims import (
    LAST_SECOND,
    bound_problem,
    build_claims,
    claims_from_entry,
    device_id_problem,
)
from svccore.timeunits import unix

log = logging.getLogger(__name__)


def sku_get(*, code: str) -> Sku:
    try:
        return Sku.objects.get(pk=code)
    except Sku.DoesNotExist:
        known = ", ".join(Sku.objects.values_list("code", flat=True))
        raise InvalidInput(f"unknown SKU {code!r}; the catalogue has {known}") from None


def _expiry(issued_at: dt.datetime, term_days: int) -> dt.datetime | None:
    return None if term_days == 0 else issued_at + dt.timedelta(days=term_days)


def license_claims(
    *,
    license_id: str,
    sku: str,
    customer_id: str,
    device_id: str,
    activation: str,
    issued_at: dt.datetime,
    expires_at: dt.datetime | None,
    entitlements: dict[str, bool],
    max_streams: int,
    max_fps: int,
    api_calls: int,
    grace_days: int,
    batch: dict[str, Any] | None = None,
    trial: bool = False,
) -> dict[str, Any]:
    """The claims of a licence this authority issues (spec §2.1), for batch keys, direct
    licences and unit licences: :func:`svccore.claims.build_claims` with this server's
    issuer (``SVC_ISSUER``) and the times in Unix seconds (``expires_at`` None: 0,
    perpetual)."""
    return build_claims(
        license_id=license_id,
        sku=sku,
        customer_id=customer_id,
        issuer=settings.SVC_ISSUER,
        device_id=device_id,
        activation=activation,
        issued_at=unix(issued_at),
        expires_at=unix(expires_at),
        entitlements=entitlements,
        max_streams=max_streams,
        max_fps=max_fps,
        api_calls=api_calls,
        grace_days=grace_days,
        batch=batch,
        trial=trial,
    )


def _issue_license(*, claims: dict[str, Any], **fields: Any) -> License:
    token, signed = keyring.sign_claims(claims)
    return License.objects.create(
        id=claims["lic"], claims=signed, token=token, token_sha256=token_digest(token), **fields
    )


def _check_bounds(**given: int | None) -> None:
    """Refuse a number outside its bounds (``svccore.claims.BOUNDS``; None: not given),
    naming them: every number signed into a licence has one."""
    for rule, value in given.items():
        problem = bound_problem(rule, value)
        if problem:
            raise InvalidInput(problem)


def _check_device_id(name: str, device_id: str) -> None:
    problem = device_id_problem(device_id)
    if problem:
        raise InvalidInput(f"{name} {problem}")


@audited("batch.issue")
@transaction.atomic
def batch_issue(
    *,
    customer_id: str,
    sku: str,
    units: int,
    term_days: int | None = None,
    max_offline_days: int | None = None,
    trial_days: int | None = None,
    identity_policy: str = "",
) -> Batch:
    """Sell ``units`` seats of ``sku``: a batch row plus its batch key (``dev`` = ``*``,
    ``act`` = ``required``). The unit price is fixed now from the volume tier.
    ``max_offline_days`` sets the units' check-in lease (None: the SKU's;
    :mod:`licensing.leases`). ``trial_days`` makes it a trial batch (:mod:`licensing.trials`:
    each unit's licence runs that many days from its activation, unbilled, until the batch
    is converted); None: the SKU's trial days (a trial SKU), 0: sold, not a trial.
    ``identity_policy`` is how its units' identity components must match (issue 45,
    :mod:`licensing.identity`; empty: the SKU's)."""
    identity_policy = identity.policy_checked(identity_policy)
    customer = customer_get(customer_id=customer_id)
    entry = sku_get(code=sku)
    _check_bounds(
        units=units, term_days=term_days, max_offline_days=max_offline_days, trial_days=trial_days
    )
    trial = entry.trial_days if trial_days is None else trial_days or None
    term = entry.term_days if term_days is None else term_days
    now = clock.now().replace(microsecond=0)
    expires_at = _expiry(now, term)
    batch_id = ids.batch_id(now.year)
    claims = claims_from_entry(
        entry=entry.entry(),
        license_id=ids.license_id(),
        customer_id=customer.id,
        issuer=settings.SVC_ISSUER,
        device_id="*",
        activation=License.Activation.REQUIRED,
        issued_at=unix(now),
        expires_at=unix(expires_at),
        batch={"id": batch_id, "units": units},
    )
    key = _issue_license(
        claims=claims,
        kind=License.Kind.BATCH_KEY,
        customer=customer,
        sku=entry.code,
        device_id="*",
        activation=License.Activation.REQUIRED,
        issued_at=now,
        expires_at=expires_at,
        grace_days=entry.grace_days,
        currency=entry.currency,
    )
    return Batch.objects.create(
        id=batch_id,
        customer=customer,
        sku=entry.code,
        units_purchased=units,
        unit_price=entry.unit_price_for(units),
        currency=entry.currency,
        issued_at=now,
        expires_at=expires_at,
        license=key,
        max_offline_days=max_offline_days,
        trial_days=trial,
        identity_policy=identity_policy,
    )


@audited("license.issue")
@transaction.atomic
def license_issue(
    *,
    customer_id: str,
    sku: str,
    device_id: str,
    term_days: int | None = None,
    api_quota: int | None = None,
    max_streams: int | None = None,
    activation: str = License.Activation.OPTIONAL,
    max_offline_days: int | None = None,
) -> License:
    """Issue a direct licence for one camera (the end-user path), priced at one unit.
    ``max_offline_days`` sets its check-in lease (None: the SKU's)."""
    customer = customer_get(customer_id=customer_id)
    entry = sku_get(code=sku)
    _check_device_id("device_id", device_id)
    if activation not in License.Activation.values:
        raise InvalidInput(f"activation must be 'required' or 'optional', not {activation!r}")
    if device_id == "*" and activation != License.Activation.REQUIRED:
        raise InvalidInput(
            "an unbound licence (device_id '*') must use activation 'required'; "
            "bind it to a device to use activation 'optional'"
        )
    _check_bounds(
        term_days=term_days,
        api_quota=api_quota,
        max_streams=max_streams,
        max_offline_days=max_offline_days,
    )
    now = clock.now().replace(microsecond=0)
    expires_at = _expiry(now, entry.term_days if term_days is None else term_days)
    claims = claims_from_entry(
        entry=entry.entry(),
        license_id=ids.license_id(),
        customer_id=customer.id,
        issuer=settings.SVC_ISSUER,
        device_id=device_id,
        activation=activation,
        issued_at=unix(now),
        expires_at=unix(expires_at),
        max_streams=max_streams,
        api_quota=api_quota,
    )
    return _issue_license(
        claims=claims,
        kind=License.Kind.DIRECT,
        customer=customer,
        sku=entry.code,
        device_id=device_id,
        activation=activation,
        issued_at=now,
        expires_at=expires_at,
        grace_days=entry.grace_days,
        unit_price=entry.unit_price_for(1),
        currency=entry.currency,
        max_offline_days=max_offline_days,
    )


@audited("license.revoke")
@transaction.atomic
def license_revoke(*, license_id: str, reason: str = "") -> License:
    """Revoke a licence. Idempotent: revoking again keeps the first time and reason."""
    try:
        lic = License.objects.select_for_update().get(pk=license_id)
    except License.DoesNotExist:
        raise NotFound(f"licence {license_id} does not exist") from None
    if lic.revoked_at is None:
        lic.revoked_at = clock.now()
        lic.revoke_reason = reason[:500]
        lic.save(update_fields=["revoked_at", "revoke_reason"])
        revocation_append(entry=lic.id, revoked_at=lic.revoked_at, until=usable_until(lic))
        transaction.on_commit(metrics.REVOCATIONS.inc)
        event_emit(
            Event.Type.LICENSE_REVOKED,
            customer_id=lic.customer_id,
            data=license_data(lic) | {"reason": lic.revoke_reason},
        )
    return lic


def license_data(lic: License) -> dict[str, Any]:
    """The ids an event about ``lic`` carries (contract §9)."""
    data: dict[str, Any] = {
        "license_id": lic.id,
        "customer_id": lic.customer_id,
        "sku": lic.sku,
        "device_id": lic.device_id,
        "expires_at": unix(lic.expires_at),
    }
    if lic.batch_id:
        data["batch_id"] = lic.batch_id
    return data


def usable_until(lic: License) -> int:
    """Unix second after which ``lic`` could not run anyway (expiry + grace); 0 when it
    is perpetual. A revocation-list entry past this second drops off the list.

    A unit licence runs as long as its batch: a renewal of the batch re-signs the unit
    to the batch's end when its device asks (``licensing.services.renewals``), so the unit's own
    end may be behind the one its device already holds. A unit on trial ends at its own end
    (``licensing.trials``)."""
    expires_at = lic.expires_at
    if lic.batch_id is not None and expires_at is not None and not lic.trial:
        batch_end = Batch.objects.values_list("expires_at", flat=True).get(pk=lic.batch_id)
        expires_at = None if batch_end is None else max(expires_at, batch_end)
    if expires_at is None:
        return 0
    return unix(expires_at + dt.timedelta(days=lic.grace_days))


def head_bump(**fields: Any) -> None:
    """Bump counters of the list's head row (``seq``, ``keys_version``) by one UPDATE,
    whose row lock is held until the caller's transaction commits."""
    head = RevocationHead.objects.filter(pk=1)
    bumps = {name: F(name) + 1 for name in fields}
    # This process reads the new head at once, and again once it is committed.
    revocations.head_forget()
    transaction.on_commit(revocations.head_forget)
    if not head.update(**bumps):
        # The migration creates the head; only a flushed database lacks it.
        top = Revocation.objects.aggregate(top=Max("seq"))["top"] or 0
        RevocationHead.objects.get_or_create(pk=1, defaults={"seq": top})
        head.update(**bumps)


def revocation_append(*, entry: str, revoked_at: dt.datetime, until: int) -> Revocation:
    """Give a licence (or ``KEY-<kid>``, a signing key) revoked in the current
    transaction the next list number.

    The head row is bumped by one UPDATE, and its row lock is held until the caller's
    transaction commits. So numbers are handed out and committed strictly in order: a
    reader that sees head H also sees every entry numbered up to H, and a device paging
    with ``since`` can never skip past an entry that was still uncommitted.
    """
    head_bump(seq=True)
    seq = RevocationHead.objects.filter(pk=1).values_list("seq", flat=True).get()
    return Revocation.objects.create(
        seq=seq, license_id=entry, revoked_at=revoked_at, usable_until=until
    )


def catalogue_seed() -> int:
    """Insert the seeded catalogue entries that are missing (never overwrites edits).
    Returns how many were added."""
    added = 0
    for entry in catalogue.load_entries():
        fields = catalogue.to_json(entry)
        code = fields.pop("sku")
        _, created = Sku.objects.get_or_create(code=code, defaults=fields)
        added += created
    # The seeded add-ons (issue 42) of SKUs present, once: an operator's edit or removal
    # of the catalogue's add-ons stands.
    present = set(Sku.objects.values_list("code", flat=True))
    for addon in catalogue.load_addons():
        fields = catalogue.to_json(addon)
        sku, code = fields.pop("sku"), fields.pop("code")
        if sku in present:
            _, created = AddOn.objects.get_or_create(sku_id=sku, code=code, defaults=fields)
            added += created
    return added


# --- offline-minted licences --------------------------------------------------------------


def _moment(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


@audited("license.register")
@transaction.atomic
def license_register(*, token: str) -> License:
    """Put a licence minted offline (``svcctl mint`` with an air-gap key) on file, so it
    can be revoked and its usage accepted like any other.

    The token must verify under a registered signing key (online or offline use) that is
    not revoked, be bound to one device (``dev`` not ``*``, ``act`` ``optional``), name a
    known customer (404 otherwise) and a SKU of the catalogue (400). The same licence id
    again is 409. Stored as kind ``offline``, exactly as presented (claims, token, hash)."""
    try:
        unverified = codec.decode_unverified(token)
    except BadSignature as exc:
        raise InvalidInput(f"token is not an SVC1 licence: {exc}") from None
    try:
        claims = keyring.verify(token)
    except BadSignature as exc:
        raise Forbidden(f"licence {unverified['lic']} rejected: {exc}") from None
    license_id = claims["lic"]
    if claims["dev"] == "*" or "batch" in claims:
        raise InvalidInput(
            f"licence {license_id} is unbound (dev '*'); only a licence bound to one device "
            "can be registered"
        )
    if claims["act"] != License.Activation.OPTIONAL:
        raise InvalidInput(
            f"licence {license_id} has act {claims['act']!r}; an offline licence has act 'optional'"
        )
    if len(license_id) > License._meta.get_field("id").max_length:
        raise InvalidInput(f"licence id {license_id[:80]!r} is too long")
    _check_device_id("dev", claims["dev"])
    if max(claims["iat"], claims["exp"]) > LAST_SECOND:
        raise InvalidInput(f"licence {license_id} has iat or exp past the year 9999")
    customer = customer_get(customer_id=claims["sub"])
    entry = sku_get(code=claims["sku"])
    existing = License.objects.filter(pk=license_id).values_list("token_sha256", flat=True).first()
    if existing is not None:
        same = hmac.compare_digest(existing, token_digest(token))
        raise Conflict(
            f"licence {license_id} is already registered"
            if same
            else f"another licence with id {license_id} is already on file"
        )
    try:
        with transaction.atomic():
            return License.objects.create(
                id=license_id,
                kind=License.Kind.OFFLINE,
                customer=customer,
                sku=entry.code,
                device_id=claims["dev"],
                activation=License.Activation.OPTIONAL,
                issued_at=_moment(claims["iat"]),
                expires_at=_moment(claims["exp"]) if claims["exp"] else None,
                grace_days=claims["grace_days"],
                currency=entry.currency,
                claims=claims,
                token=token,
                token_sha256=token_digest(token),
            )
    except IntegrityError:
        raise Conflict(f"licence {license_id} is already registered") from None


# --- signing keys -----------------------------------------------------------------------
