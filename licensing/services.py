"""Every write of the licensing authority: issuing batches and licences, exchanging batch
keys for unit licences (the billing event), and revocation."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from audit.services import audited
from config.errors import Forbidden, InvalidInput, MisconfiguredService, NotFound, PaymentRequired
from customers.models import Customer
from customers.services import customer_get
from devices.errors import BadSignature
from licensing import signing
from licensing.models import (
    Activation,
    Batch,
    License,
    Revocation,
    RevocationHead,
    Sku,
    unix,
)
from svccore import catalogue, ids

DEVICE_ID_MAX = 128


def sku_get(*, code: str) -> Sku:
    try:
        return Sku.objects.get(pk=code)
    except Sku.DoesNotExist:
        known = ", ".join(Sku.objects.values_list("code", flat=True))
        raise InvalidInput(f"unknown SKU {code!r}; the catalogue has {known}") from None


def _expiry(issued_at: dt.datetime, term_days: int) -> dt.datetime | None:
    return None if term_days == 0 else issued_at + dt.timedelta(days=term_days)


def _claims(
    *,
    license_id: str,
    sku: Sku,
    customer: Customer,
    device_id: str,
    activation: str,
    issued_at: dt.datetime,
    expires_at: dt.datetime | None,
    max_streams: int,
    api_calls: int,
    batch: dict[str, Any] | None = None,
) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "lic": license_id,
        "sku": sku.code,
        "sub": customer.id,
        "iss": settings.SVC_ISSUER,
        "dev": device_id,
        "ent": catalogue.entitlements(sku.modules),
        "lim": {"max_streams": max_streams, "max_fps": sku.max_fps, "api_calls": api_calls},
        "iat": unix(issued_at),
        "nbf": unix(issued_at),
        "exp": unix(expires_at),
        "grace_days": sku.grace_days,
        "act": activation,
    }
    if batch is not None:
        claims["batch"] = batch
    return claims


def _issue_license(*, claims: dict[str, Any], **fields: Any) -> License:
    return License.objects.create(
        id=claims["lic"], claims=claims, token=signing.sign(claims), **fields
    )


def _check_positive(name: str, value: int | None, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidInput(f"{name} must be {'>= 0' if allow_zero else '>= 1'}, not {value}")


@audited("batch.issue")
@transaction.atomic
def batch_issue(*, customer_id: str, sku: str, units: int, term_days: int | None = None) -> Batch:
    """Sell ``units`` seats of ``sku``: a batch row plus its batch key (``dev`` = ``*``,
    ``act`` = ``required``). The unit price is fixed now from the volume tier."""
    customer = customer_get(customer_id=customer_id)
    entry = sku_get(code=sku)
    _check_positive("units", units)
    _check_positive("term_days", term_days, allow_zero=True)
    term = entry.term_days if term_days is None else term_days
    now = timezone.now().replace(microsecond=0)
    expires_at = _expiry(now, term)
    batch_id = ids.batch_id(now.year)
    claims = _claims(
        license_id=ids.license_id(),
        sku=entry,
        customer=customer,
        device_id="*",
        activation=License.Activation.REQUIRED,
        issued_at=now,
        expires_at=expires_at,
        max_streams=entry.max_streams,
        api_calls=entry.api_calls,
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
) -> License:
    """Issue a direct licence for one camera (the end-user path), priced at one unit."""
    customer = customer_get(customer_id=customer_id)
    entry = sku_get(code=sku)
    if not device_id or len(device_id) > DEVICE_ID_MAX:
        raise InvalidInput(f"device_id must be 1-{DEVICE_ID_MAX} characters")
    if activation not in License.Activation.values:
        raise InvalidInput(f"activation must be 'required' or 'optional', not {activation!r}")
    if device_id == "*" and activation != License.Activation.REQUIRED:
        raise InvalidInput(
            "an unbound licence (device_id '*') must use activation 'required'; "
            "bind it to a device to use activation 'optional'"
        )
    _check_positive("term_days", term_days, allow_zero=True)
    _check_positive("api_quota", api_quota, allow_zero=True)
    _check_positive("max_streams", max_streams)
    now = timezone.now().replace(microsecond=0)
    expires_at = _expiry(now, entry.term_days if term_days is None else term_days)
    claims = _claims(
        license_id=ids.license_id(),
        sku=entry,
        customer=customer,
        device_id=device_id,
        activation=activation,
        issued_at=now,
        expires_at=expires_at,
        max_streams=entry.max_streams if max_streams is None else max_streams,
        api_calls=entry.api_calls if api_quota is None else api_quota,
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
    )


@dataclass(frozen=True)
class ActivationResult:
    license: License
    reactivated: bool
    batch_units_remaining: int | None = None


def _batch_for_key(batch_token: str) -> Batch:
    """The batch a presented key belongs to, or Forbidden. A key counts only when this
    authority issued it: its batch row exists and names this very licence."""
    try:
        claims = signing.verify(batch_token)
    except BadSignature as exc:
        raise Forbidden(f"batch key rejected: {exc}") from None
    batch_claim = claims.get("batch")
    if claims["dev"] != "*" or claims["act"] != "required" or batch_claim is None:
        raise Forbidden(f"licence {claims['lic']} is not a batch key (dev '*', act 'required')")
    batch = Batch.objects.select_related("license", "customer").filter(pk=batch_claim["id"]).first()
    if batch is None or batch.license_id != claims["lic"] or batch.customer_id != claims["sub"]:
        raise Forbidden(
            f"batch key {claims['lic']} for batch {batch_claim['id']} was not issued by this "
            "authority"
        )
    now = timezone.now()
    key = batch.license
    if key.revoked_at is not None:
        raise Forbidden(
            f"batch key {key.id} of batch {batch.id} was revoked at {unix(key.revoked_at)}"
            f" ({key.revoke_reason or 'no reason given'})"
        )
    if claims["nbf"] > unix(now):
        raise Forbidden(f"batch key {key.id} is not valid before {claims['nbf']}")
    if batch.expires_at is not None and now > batch.expires_at:
        raise Forbidden(
            f"batch key {key.id} of batch {batch.id} expired at {unix(batch.expires_at)}"
        )
    return batch


def _existing(batch: Batch, device_id: str) -> ActivationResult | None:
    record = (
        Activation.objects.select_related("license")
        .filter(batch=batch, device_id=device_id)
        .first()
    )
    if record is None:
        return None
    if record.license.revoked_at is not None:
        raise Forbidden(
            f"device {device_id} is on file for batch {batch.id} with licence "
            f"{record.license_id}, which was revoked at {unix(record.license.revoked_at)}"
        )
    return ActivationResult(license=record.license, reactivated=True)


def unit_activate(
    *,
    batch_token: str,
    device_id: str,
    fingerprint_source: str = "",
    weak_binding: bool = False,
    sdk_version: str = "",
    client_ip: str | None = None,
) -> ActivationResult:
    """Exchange a batch key for a licence bound to ``device_id``.

    The seat is taken by one conditional UPDATE (``units_activated < units_purchased``),
    never read-modify-write, so concurrent requests can neither oversell a batch nor lose
    a count. The seat and the activation row commit together in a savepoint: when a
    concurrent request for the same device wins the unique (batch, device_id) race, our
    savepoint rolls back (returning the seat) and the winner's licence is returned.
    """
    if not device_id or len(device_id) > DEVICE_ID_MAX:
        raise InvalidInput(
            f"device_id must be 1-{DEVICE_ID_MAX} characters; got {len(device_id or '')}"
        )
    with transaction.atomic():
        batch = _batch_for_key(batch_token)
        existing = _existing(batch, device_id)
        if existing is not None:
            return existing
        try:
            sku = Sku.objects.get(pk=batch.sku)
        except Sku.DoesNotExist:
            raise MisconfiguredService(
                f"batch {batch.id} references SKU {batch.sku}, which is not in the catalogue; "
                "restore the catalogue entry to resume activations"
            ) from None
        try:
            with transaction.atomic():
                taken = Batch.objects.filter(
                    pk=batch.pk, units_activated__lt=F("units_purchased")
                ).update(units_activated=F("units_activated") + 1)
                if not taken:
                    batch.refresh_from_db(fields=["units_activated", "units_purchased"])
                    raise PaymentRequired(
                        f"batch {batch.id} is exhausted: {batch.units_activated} of "
                        f"{batch.units_purchased} units activated; buy more units to "
                        f"activate device {device_id}"
                    )
                unit = _mint_unit(batch=batch, sku=sku, device_id=device_id)
                Activation.objects.create(
                    batch=batch,
                    device_id=device_id,
                    license=unit,
                    fingerprint_source=fingerprint_source[:32],
                    weak_binding=weak_binding,
                    sdk_version=sdk_version[:64],
                    activated_at=unit.issued_at,
                    client_ip=client_ip,
                )
        except IntegrityError:
            existing = _existing(batch, device_id)
            if existing is None:
                raise
            return existing
        purchased, activated = Batch.objects.values_list("units_purchased", "units_activated").get(
            pk=batch.pk
        )
        return ActivationResult(
            license=unit, reactivated=False, batch_units_remaining=purchased - activated
        )


def _mint_unit(*, batch: Batch, sku: Sku, device_id: str) -> License:
    key_claims = batch.license.claims
    now = timezone.now()
    claims = _claims(
        license_id=ids.license_id(),
        sku=sku,
        customer=batch.customer,
        device_id=device_id,
        activation=License.Activation.OPTIONAL,
        issued_at=now,
        expires_at=batch.expires_at,
        max_streams=key_claims["lim"]["max_streams"],
        api_calls=key_claims["lim"]["api_calls"],
    )
    # The unit carries the batch key's entitlements and grace, whatever the catalogue
    # says today: the customer bought what the key says.
    claims["ent"] = key_claims["ent"]
    claims["lim"]["max_fps"] = key_claims["lim"]["max_fps"]
    claims["grace_days"] = key_claims["grace_days"]
    return _issue_license(
        claims=claims,
        kind=License.Kind.UNIT,
        customer_id=batch.customer_id,
        sku=batch.sku,
        device_id=device_id,
        activation=License.Activation.OPTIONAL,
        batch=batch,
        issued_at=now,
        expires_at=batch.expires_at,
        grace_days=claims["grace_days"],
        unit_price=batch.unit_price,
        currency=batch.currency,
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
        lic.revoked_at = timezone.now()
        lic.revoke_reason = reason[:500]
        lic.save(update_fields=["revoked_at", "revoke_reason"])
        _revocation_append(lic=lic)
    return lic


def usable_until(lic: License) -> int:
    """Unix second after which ``lic`` could not run anyway (expiry + grace); 0 when it
    is perpetual. A revocation-list entry past this second drops off the list."""
    if lic.expires_at is None:
        return 0
    return unix(lic.expires_at + dt.timedelta(days=lic.grace_days))


def _revocation_append(*, lic: License) -> Revocation:
    """Give a licence revoked in the current transaction the next list number.

    The head row is bumped by one UPDATE, and its row lock is held until the caller's
    transaction commits. So numbers are handed out and committed strictly in order: a
    reader that sees head H also sees every entry numbered up to H, and a device paging
    with ``since`` can never skip past an entry that was still uncommitted.
    """
    head = RevocationHead.objects.filter(pk=1)
    if not head.update(seq=F("seq") + 1):
        # The migration creates the head; only a flushed database lacks it.
        top = Revocation.objects.aggregate(top=Max("seq"))["top"] or 0
        RevocationHead.objects.get_or_create(pk=1, defaults={"seq": top})
        head.update(seq=F("seq") + 1)
    seq = head.values_list("seq", flat=True).get()
    return Revocation.objects.create(
        seq=seq, license_id=lic.id, revoked_at=lic.revoked_at, usable_until=usable_until(lic)
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
    return added
