"""A unit's identity components (issue 45): the set its licence is bound to, rebinding
after a repair, and clones.

A device reports its hashed components (``devices.identity``) with every activation and
sync. The set and the batch's matching policy (the batch's, else its SKU's, else
``most:2``) live on the unit's activation record and, as the additive claim ``idn``, in
its token, which the device checks offline. What "meets the policy" means is
``devices.identity.compare``, one rule for device and service.

- An unchanged set costs nothing: the activation's one lookup reads the stored set's
  hash beside the licence.
- A changed set that still meets the policy is a repair: the licence is re-signed to the
  new set (and to the new device id when that changed), without a seat, recorded as a
  :class:`Rebinding` with a ``license.rebound`` event and an audit entry. At most
  ``SVC_REBIND_MAX_CHANGES`` components may change per ``SVC_REBIND_DAYS`` days: a slow
  walk through parts cannot move a licence to another camera.
- A set below the policy is another device. Presented with a unit's own licence (the
  same device id, a copy of its state) it is a suspected clone: a
  :class:`CloneSuspicion` with the evidence and a ``license.clone_suspected`` event; the
  unit keeps its binding, and an operator may revoke the copy, after which that set is
  refused. The unchanged set from a new address is :func:`licensing.clones.address_seen`'s
  (the second clone signal); :mod:`licensing.clones` holds both signals' suspicions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from audit.services import audited
from config import clock
from config.errors import Forbidden, InvalidInput
from devices import identity as rules
from events.models import Event
from events.services import event_emit
from licensing import clones
from licensing.models import (
    Activation,
    Batch,
    CloneSuspicion,
    License,
    Rebinding,
    Sku,
    SupersededToken,
    UnitComponent,
    token_digest,
)
from signing import keyring
from svccore.timeunits import unix

CANDIDATES_MAX = 20  # units sharing a strong component with a newcomer, compared at most


def components_checked(components: Any) -> dict[str, str] | None:
    """A reported component set, or None when none was reported; InvalidInput for a
    malformed one (the serializers check its shape, this its content)."""
    if components is None or components == {}:
        return None
    problem = rules.components_problem(components)
    if problem:
        raise InvalidInput(f"components {problem}")
    return dict(sorted(components.items()))


def components_parsed(text: Any) -> dict[str, str] | None:
    """The ``components`` query parameter of ``GET /v1/license``: ``name=digest`` pairs
    separated by commas (None when absent)."""
    if text is None or text == "":
        return None
    if not isinstance(text, str) or len(text) > 100 * rules.MAX_COMPONENTS:
        raise InvalidInput("components must be name=digest pairs separated by commas")
    pairs = [part.partition("=") for part in text.split(",")]
    if any(not sep for _, sep, _ in pairs):
        raise InvalidInput("components must be name=digest pairs separated by commas")
    return components_checked({name: digest for name, _, digest in pairs})


def set_digest(components: dict[str, str] | None) -> str:
    """The hash of a component set ("" for none): what the activation's lookup compares."""
    if not components:
        return ""
    canonical = json.dumps(components, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def policy_effective(batch_policy: str | None, sku_policy: str | None) -> str:
    """The batch's policy, else the SKU's, else the default; one that does not parse (a
    row edited by hand) counts as the default, never signed into a token a device would
    refuse."""
    policy = batch_policy or sku_policy or rules.DEFAULT_POLICY
    return rules.DEFAULT_POLICY if rules.policy_problem(policy) else policy


def policy_of(batch_id: str) -> str:
    """The matching policy of a batch's units: the batch's, else its SKU's, else the
    default (``most:2``)."""
    batch_policy, sku = Batch.objects.values_list("identity_policy", "sku").get(pk=batch_id)
    if batch_policy:
        return policy_effective(batch_policy, None)
    sku_policy = Sku.objects.filter(pk=sku).values_list("identity_policy", flat=True).first()
    return policy_effective(None, sku_policy)


def policy_checked(policy: Any) -> str:
    """An operator's policy ("" keeps the default); InvalidInput otherwise."""
    if policy in (None, ""):
        return ""
    problem = rules.policy_problem(policy)
    if problem:
        raise InvalidInput(f"identity_policy {problem}")
    return policy


def component_rows(
    *, license_id: str, batch_id: str, components: dict[str, str] | None
) -> list[tuple[type, dict[str, Any]]]:
    """The :class:`UnitComponent` rows of a new unit, for ``config.rows``."""
    return [
        (UnitComponent, dict(license_id=license_id, batch_id=batch_id, name=name, digest=digest))
        for name, digest in (components or {}).items()
    ]


def bound_claims(claims: dict[str, Any], components: dict[str, str] | None, policy: str) -> dict:
    """``claims`` with the ``idn`` claim of ``components`` (unchanged without any)."""
    if not components:
        return claims
    return {**claims, rules.CLAIM: rules.claim(components, policy)}


@dataclass(frozen=True)
class Rebound:
    license_id: str
    token: str
    changed: tuple[str, ...]


def _changes_within_bound(activation_id: int, now: dt.datetime) -> int:
    since = now - dt.timedelta(days=settings.SVC_REBIND_DAYS)
    rebound = Rebinding.objects.filter(activation_id=activation_id, rebound_at__gte=since)
    return sum(_strong(changed) for changed in rebound.values_list("changed", flat=True))


def _strong(names: Any) -> int:
    # A weak component changes with a strong one (a new eMMC brings a new machine-id):
    # only strong ones count toward the bound.
    return sum(1 for name in names if not rules.is_weak(name))


def _resign(lic: License, *, device_id: str, components: dict[str, str], policy: str, now):
    claims = {name: value for name, value in lic.claims.items() if name != "kid"}
    claims["dev"] = device_id
    claims["iat"] = unix(now)
    token, signed = keyring.sign_claims(bound_claims(claims, components, policy))
    SupersededToken.objects.create(
        license_id=lic.id, token_sha256=lic.token_sha256, superseded_at=now
    )
    lic.token, lic.claims, lic.token_sha256, lic.device_id = (
        token,
        signed,
        token_digest(token),
        device_id,
    )
    lic.save(update_fields=["token", "claims", "token_sha256", "device_id"])
    return token


def _store(activation: Activation, components: dict[str, str], device_id: str) -> None:
    activation.components = components
    activation.components_sha256 = set_digest(components)
    activation.device_id = device_id
    activation.save(update_fields=["components", "components_sha256", "device_id"])
    UnitComponent.objects.filter(license_id=activation.license_id).delete()
    UnitComponent.objects.bulk_create(
        UnitComponent(
            license_id=activation.license_id, batch_id=activation.batch_id, name=n, digest=d
        )
        for n, d in components.items()
    )


def _rebind_detail(result: Rebound | None, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "device_id": arguments.get("device_id"),
        "components": arguments.get("components"),
        "changed": list(result.changed) if result else [],
    }


@dataclass(frozen=True)
class PastBound:
    message: str


@audited(
    "license.rebind",
    target=lambda result, arguments: result.license_id if result else "",
    detail=_rebind_detail,
)
def unit_rebind(
    *,
    activation_id: int,
    device_id: str,
    components: dict[str, str],
    client_ip: str | None = None,
    via: str = "activation",
) -> Rebound | None:
    """Move a unit's licence to ``components`` (and ``device_id``) when they meet its
    policy against the set it is bound to, within the rebinding bound: re-signed, no
    seat taken, a :class:`Rebinding` and a ``license.rebound`` event with the old and new
    sets. A unit bound to no set yet (activated by old firmware) adopts the one
    reported. None when the set does not meet the policy (then, for the unit's own
    device id, a suspected clone is recorded: :func:`clone_suspect`); Forbidden for a
    set an operator revoked as a copy, or a repair past the rebinding bound on the
    unit's own device id (the suspicion recorded all the same)."""
    result = _rebind(
        activation_id=activation_id,
        device_id=device_id,
        components=components,
        client_ip=client_ip,
        via=via,
    )
    if isinstance(result, PastBound):
        raise Forbidden(result.message)
    return result


@transaction.atomic
def _rebind(
    *,
    activation_id: int,
    device_id: str,
    components: dict[str, str],
    client_ip: str | None,
    via: str,
) -> Rebound | PastBound | None:
    activation = (
        Activation.objects.select_for_update().select_related("license").get(pk=activation_id)
    )
    lic = activation.license
    if lic.revoked_at is not None:
        raise Forbidden(f"licence {lic.id} was revoked at {unix(lic.revoked_at)}")
    digest = set_digest(components)
    revoked = (
        CloneSuspicion.objects.filter(
            activation=activation,
            components_sha256=digest,
            addresses="",
            copy_revoked_at__isnull=False,
        )
        .values_list("pk", flat=True)
        .first()
    )
    if revoked is not None:
        raise clones.CopyRevoked(
            f"licence {lic.id}: this hardware was revoked as a copy of device "
            f"{activation.device_id} by an operator (clone suspicion {revoked})"
        )
    now = clock.now().replace(microsecond=0)
    policy = policy_of(activation.batch_id)
    stored = activation.components or {}
    same_device = device_id == activation.device_id
    if (
        not same_device
        and Activation.objects.filter(batch_id=activation.batch_id, device_id=device_id).exists()
    ):
        return None  # that id is a unit of its own on the batch
    if not stored:
        if not same_device:
            return None  # nothing to match a new device id against
        _store(activation, components, device_id)
        token = _resign(lic, device_id=device_id, components=components, policy=policy, now=now)
        return Rebound(lic.id, token, ())
    match = rules.compare(stored, components, policy)
    changed = (*match.changed, *match.missing)
    if not match.meets:
        if same_device:
            clones.clone_suspect(activation=activation, components=components, digest=digest,
                match=match, client_ip=client_ip, reason="components below the policy",
            )  # fmt: skip
        return None
    used = _changes_within_bound(activation.pk, now)
    if changed and used + _strong(changed) > settings.SVC_REBIND_MAX_CHANGES:
        if not same_device:
            return None  # past the bound: another device, which takes a seat
        clones.clone_suspect(activation=activation, components=components, digest=digest,
            match=match, client_ip=client_ip, reason="past the rebinding bound",
        )  # fmt: skip
        # Answered 403 once this transaction (and the suspicion) has committed.
        return PastBound(
            f"licence {lic.id}: {_strong(changed)} strong identity component(s) changed "
            f"({', '.join(changed)}), and {used} already in the last "
            f"{settings.SVC_REBIND_DAYS} days; at most {settings.SVC_REBIND_MAX_CHANGES} may "
            "change in that time: ask the seller to release the seat"
        )
    old_device = activation.device_id
    _store(activation, components, device_id)
    token = _resign(lic, device_id=device_id, components=components, policy=policy, now=now)
    if changed or not same_device:
        Rebinding.objects.create(
            activation=activation,
            rebound_at=now,
            old_device_id=old_device,
            new_device_id=device_id,
            old_components=stored,
            new_components=components,
            changed=list(changed),
            via=via,
        )
        event_emit(
            Event.Type.LICENSE_REBOUND,
            customer_id=lic.customer_id,
            data={
                "license_id": lic.id,
                "customer_id": lic.customer_id,
                "batch_id": activation.batch_id,
                "device_id": device_id,
                "old_device_id": old_device,
                "sku": lic.sku,
                "changed": list(changed),
                "old_components": stored,
                "new_components": components,
            },
        )
    return Rebound(lic.id, token, tuple(changed))


def predecessor_rebind(
    *,
    batch_id: str,
    device_id: str,
    components: dict[str, str],
    client_ip: str | None = None,
) -> Rebound | None:
    """A new device id on a batch whose components meet the policy of one unit already
    on it: that unit repaired (its fingerprint's source part swapped), rebound to the
    new id without a seat. None when no unit (or more than one, equally) matches, or the
    rebinding bound is spent: the caller then treats it as the new device it is."""
    strong = [d for n, d in components.items() if not rules.is_weak(n)]
    if not strong:
        return None
    licenses = list(
        UnitComponent.objects.filter(batch_id=batch_id, digest__in=strong)
        .values_list("license_id", flat=True)
        .distinct()[:CANDIDATES_MAX]
    )
    if not licenses:
        return None
    policy = policy_of(batch_id)
    candidates = []
    for act_id, stored in Activation.objects.filter(
        license_id__in=licenses, license__revoked_at__isnull=True
    ).values_list("id", "components"):
        match = rules.compare(stored or {}, components, policy)
        if match.meets:
            candidates.append((len(match.matched), act_id))
    candidates.sort(reverse=True)
    if not candidates or len(candidates) > 1 and candidates[0][0] == candidates[1][0]:
        return None
    return unit_rebind(
        activation_id=candidates[0][1],
        device_id=device_id,
        components=components,
        client_ip=client_ip,
        via="activation",
    )


def activation_rebind(
    *,
    batch_id: str,
    activation_id: int | None,
    stored_sha256: str,
    device_id: str,
    components: dict[str, str],
    client_ip: str | None,
    last_ip: str | None = None,
) -> Rebound | None:
    """An activation's reported set: for the unit on file (``activation_id``) nothing
    when it is the stored set (its hash and ``last_ip`` came with the activation's one
    lookup) from the address last seen (else :func:`address_seen`), else
    :func:`unit_rebind`; for a new device id, :func:`predecessor_rebind`."""
    if activation_id is None:
        return predecessor_rebind(
            batch_id=batch_id, device_id=device_id, components=components, client_ip=client_ip
        )
    if set_digest(components) == stored_sha256:
        clones.address_seen(activation_id=activation_id, last_ip=last_ip, client_ip=client_ip)
        return None
    return unit_rebind(
        activation_id=activation_id,
        device_id=device_id,
        components=components,
        client_ip=client_ip,
    )


def sync_rebind(
    *, license_id: str, device_id: str, components: dict[str, str], client_ip: str | None
) -> Rebound | None:
    """A sync's reported set (``GET /v1/license``): None when it is the set on file (one
    indexed read, which also reads where the unit was last seen from:
    :func:`address_seen`) or the licence is not a unit's; else :func:`unit_rebind`."""
    row = (
        Activation.objects.filter(license_id=license_id)
        .values_list("id", "components_sha256", "last_ip", "client_ip")
        .first()
    )
    if row is None:
        return None
    if row[1] == set_digest(components):
        clones.address_seen(activation_id=row[0], last_ip=row[2] or row[3], client_ip=client_ip)
        return None
    return unit_rebind(
        activation_id=row[0],
        device_id=device_id,
        components=components,
        client_ip=client_ip,
        via="sync",
    )


def rebind_history(activation_id: int) -> list[Rebinding]:
    return list(Rebinding.objects.filter(activation_id=activation_id)[:50])
