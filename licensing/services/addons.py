"""Add-on modules in the field (issue 42 item 4): an operator adds a catalogue add-on to a
batch (all its units, activated now or later) or to a direct licence after the sale, or
removes it.

Adding records an :class:`~licensing.models.AddOnGrant` with the terms sold (copied from
the catalogue); removing sets its ``removed_at``. A direct licence is re-signed at once
with its add-ons of now (its device receives the token at its next sync, as after a
renewal); a batch's units are re-signed when their devices next ask
(``licensing.addons``). Billing follows the tokens signed: each licence is charged for an
add-on from when a token carrying it is signed to that token's end, pro rata of the
term the price is for, as its own invoice line; removal charges nothing back (a credit
note does that). Both are idempotent, audited and reported as events
(``license.addon_added``, ``license.addon_removed``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from audit.services import audited
from config import clock
from config.admin.display import utc_time
from config.errors import Conflict, InvalidInput, NotFound
from events.models import Event
from events.services import event_emit
from licensing import addons
from licensing.models import (
    AddOn,
    AddOnCharge,
    AddOnGrant,
    Batch,
    License,
    SupersededToken,
    token_digest,
)
from licensing.services.renewals import resign
from svccore.timeunits import unix


@dataclass(frozen=True)
class AddOnChange:
    """An add or a removal as the API answers it."""

    grant: AddOnGrant
    changed: bool  # False: already so (added again while active, removed again)
    batch_id: str | None
    license_id: str  # the batch key of a batch, or the direct licence
    expires_at: dt.datetime | None  # the end of the licence or batch


@dataclass(frozen=True)
class _Target:
    batch: Batch | None
    license: License  # the batch key (locked) or the direct licence (locked)

    @property
    def what(self) -> str:
        return f"batch {self.batch.id}" if self.batch else f"licence {self.license.id}"


def _target(batch_id: str | None, license_id: str | None) -> _Target:
    """The batch (its row and its batch key's, locked, batch first as every seat change
    takes them) or the direct licence (locked) named, exactly one; a batch key's
    licence id names its batch."""
    if bool(batch_id) == bool(license_id):
        raise InvalidInput(
            "name what the add-on is for: batch_id (a batch and all its units) or license_id "
            "(a direct licence), one of them"
        )
    if license_id:
        found = License.objects.filter(pk=license_id).values("kind", "batch_id").first()
        if found is None:
            raise NotFound(f"licence {license_id} does not exist")
        if found["kind"] == License.Kind.UNIT:
            raise InvalidInput(
                f"licence {license_id} is a unit licence of batch {found['batch_id']}: add "
                f"the add-on to the batch (batch_id {found['batch_id']}); every unit of it "
                "receives it at its next sync"
            )
        if found["kind"] == License.Kind.OFFLINE:
            raise InvalidInput(
                f"licence {license_id} was minted offline and never syncs; mint a licence "
                "with the modules it needs on the air-gapped machine (svcctl mint)"
            )
        if found["kind"] == License.Kind.DIRECT:
            return _Target(None, License.objects.select_for_update().get(pk=license_id))
        batch_id = Batch.objects.values_list("id", flat=True).get(license_id=license_id)
    batch = Batch.objects.select_for_update().filter(pk=batch_id).first()
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    return _Target(batch, License.objects.select_for_update().get(pk=batch.license_id))


def _addon(target: _Target, code: str) -> AddOn:
    sku = target.license.sku
    found = AddOn.objects.filter(sku_id=sku, code=code).first()
    if found is None:
        offered = list(
            AddOn.objects.filter(sku_id=sku, available=True).values_list("code", flat=True)
        )
        choose = f"its add-ons are {', '.join(offered)}" if offered else "it has no add-ons"
        raise InvalidInput(f"SKU {sku} of {target.what} has no add-on {code!r}; {choose}")
    return found


def _resign_direct(lic: License, *, now: dt.datetime) -> None:
    """Re-sign a locked direct licence with its add-ons of now, same end; its token so
    far stays issued, and what the new one carries for time not yet charged is charged."""
    grants = addons.active_grants(license_id=lic.id)
    sold = addons.sold_claims(lic)
    token, signed = resign(addons.signed_claims(lic.claims, sold, grants), expires_at=None, now=now)
    SupersededToken.objects.create(
        license_id=lic.id, token_sha256=lic.token_sha256, superseded_at=now
    )
    lic.token, lic.claims, lic.token_sha256 = token, signed, token_digest(token)
    lic.sold_claims = sold
    lic.save(update_fields=["token", "claims", "token_sha256", "sold_claims"])
    AddOnCharge.objects.bulk_create(
        addons.charges_for(license_id=lic.id, grants=grants, ends_at=lic.expires_at, now=now)
    )


def _delivered(target: _Target, now: dt.datetime) -> None:
    """The change reaches the licences: a batch's units at their next request (its
    version moves), a direct licence re-signed now."""
    if target.batch is not None:
        Batch.objects.filter(pk=target.batch.pk).update(addons_version=F("addons_version") + 1)
    else:
        _resign_direct(target.license, now=now)


def _event_data(target: _Target, grant: AddOnGrant) -> dict:
    lic = target.license
    data = {
        "license_id": lic.id,
        "customer_id": lic.customer_id,
        "sku": lic.sku,
        "addon": grant.code,
        "modules": list(grant.modules),
        "expires_at": unix(lic.expires_at),
    }
    if target.batch is not None:
        data["batch_id"] = target.batch.id
    return data


def _change_target(result: AddOnChange, arguments: dict) -> str:
    return result.batch_id or result.license_id


def _change(target: _Target, grant: AddOnGrant, changed: bool) -> AddOnChange:
    return AddOnChange(
        grant=grant,
        changed=changed,
        batch_id=target.batch.id if target.batch else None,
        license_id=target.license.id,
        expires_at=target.license.expires_at,
    )


@audited("license.addon_add", target=_change_target)
@transaction.atomic
def addon_add(
    *, addon: str, batch_id: str | None = None, license_id: str | None = None
) -> AddOnChange:
    """Add the catalogue add-on ``addon`` of the SKU to a batch (every unit of it) or a
    direct licence, from now. Idempotent: adding one that is active changes nothing
    (``changed`` False).

    Refused: neither or both of ``batch_id`` and ``license_id``, a unit or offline-minted
    licence, an add-on the SKU does not have or no longer offers (InvalidInput); unknown
    (NotFound); a revoked licence or batch key, or one whose term has ended (Conflict)."""
    target = _target(batch_id, license_id)
    chosen = _addon(target, addon)
    held = AddOnGrant.objects.filter(
        license_id=target.license.id, code=chosen.code, removed_at__isnull=True
    ).first()
    if held is not None:
        return _change(target, held, changed=False)
    lic = target.license
    if not chosen.available:
        raise InvalidInput(
            f"add-on {chosen.code} of SKU {lic.sku} is no longer offered; the catalogue "
            "(console) can offer it again"
        )
    if lic.revoked_at is not None:
        raise Conflict(
            f"{target.what} cannot take an add-on: its licence {lic.id} was revoked at "
            f"{utc_time(lic.revoked_at)}"
        )
    now = clock.now().replace(microsecond=0)
    if lic.expires_at is not None and lic.expires_at <= now:
        raise Conflict(
            f"{target.what} ended at {utc_time(lic.expires_at)}: an add-on is sold for the "
            "rest of the term, and none is left; renew it first"
        )
    sku = chosen.sku
    grant = AddOnGrant.objects.create(
        addon=chosen,
        code=chosen.code,
        name=chosen.name,
        customer_id=lic.customer_id,
        sku=lic.sku,
        batch=target.batch,
        license=lic,
        modules=list(chosen.modules),
        extra_streams=chosen.extra_streams,
        extra_fps=chosen.extra_fps,
        extra_api_calls=chosen.extra_api_calls,
        unit_price=chosen.unit_price,
        currency=sku.currency,
        # Priced per term of the SKU, pro rata; once per licence for a perpetual SKU or
        # a licence without an end (svccore.addons).
        term_days=sku.term_days if lic.expires_at is not None else 0,
        added_at=now,
    )
    _delivered(target, now)
    event_emit(
        Event.Type.LICENSE_ADDON_ADDED,
        customer_id=lic.customer_id,
        data=_event_data(target, grant),
    )
    return _change(target, grant, changed=True)


@audited("license.addon_remove", target=_change_target)
@transaction.atomic
def addon_remove(
    *,
    addon: str,
    batch_id: str | None = None,
    license_id: str | None = None,
    reason: str = "",
) -> AddOnChange:
    """Remove the add-on ``addon`` from a batch or a direct licence: its cameras lose it
    at their next sync. Nothing is billed back (issue a credit note for a refund).
    Idempotent: removing one no longer active answers its last removal (``changed``
    False). NotFound when it was never added."""
    target = _target(batch_id, license_id)
    grants = AddOnGrant.objects.filter(license_id=target.license.id, code=addon)
    grant = grants.filter(removed_at__isnull=True).first()
    if grant is None:
        last = grants.order_by("-removed_at", "-id").first()
        if last is None:
            raise NotFound(f"{target.what} has no add-on {addon!r}")
        return _change(target, last, changed=False)
    now = clock.now().replace(microsecond=0)
    grant.removed_at = max(now, grant.added_at)
    grant.remove_reason = reason.strip()[:500]
    grant.save(update_fields=["removed_at", "remove_reason"])
    _delivered(target, now)
    event_emit(
        Event.Type.LICENSE_ADDON_REMOVED,
        customer_id=target.license.customer_id,
        data=_event_data(target, grant) | {"reason": grant.remove_reason},
    )
    return _change(target, grant, changed=True)
