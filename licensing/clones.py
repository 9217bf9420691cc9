"""Suspected clones of a unit (issue 45): the two signals, the list with its evidence,
and the operator's action that revokes the copy, never the original (the unit's first
activation).

- Components that diverge: a unit's licence presented with its own device id and a set
  below its policy (:mod:`licensing.identity` finds it): a copy of a camera's state
  directory on other hardware, or a repair past the rebinding bound
  (:func:`clone_suspect`, once per component set).
- The same components from two addresses: the very set the unit is bound to, seen from
  address A, then B, then A again, the return less than
  ``SVC_CLONE_ADDRESS_WINDOW_SECONDS`` after it left A, is what one camera cannot do: a
  bit-for-bit copy (its state directory on hardware whose components are also
  identical). Once per address pair (:func:`address_seen`). Each unit keeps where its set
  was last seen from (``Activation.last_ip``, since when, the address before), read
  with the set's hash by the one lookup its activation or sync makes anyway and written
  only when the address changes: a sync from the unchanged address costs no query.

Revoking a copy (:func:`clone_copy_revoke`) refuses its set, or for the second signal
requests from its address (:class:`CopyRevoked`). Copies behind one NAT share an address:
they never alternate, and a refusal by address could not tell them apart.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import Any

from django.conf import settings
from django.db import transaction

from audit.services import audited
from config import clock
from config.errors import Forbidden, NotFound
from customers.services import customer_get
from devices import identity as rules
from events.models import Event
from events.services import event_emit
from licensing.models import Activation, CloneSuspicion
from svccore import dates
from svccore.timeunits import unix

# The reason of a suspicion of the second signal (the first's are phrases of
# licensing.identity's).
ADDRESS_REASON = "same components from two addresses"
COPY_REVOKED = "CLONE_COPY_REVOKED"


class CopyRevoked(Forbidden):
    """A request of a copy an operator revoked (:func:`clone_copy_revoke`): 403 with the
    code ``CLONE_COPY_REVOKED`` and a ``detail`` naming the suspicion."""

    code = COPY_REVOKED


def clone_suspect(
    *,
    activation: Activation,
    components: dict[str, str],
    digest: str,
    match: rules.Match,
    client_ip: str | None,
    reason: str,
) -> CloneSuspicion:
    """Record a suspected copy of ``activation``'s unit (once per component set: a clone
    syncing every hour is one suspicion, ``digest`` the set's hash) and emit
    ``license.clone_suspected``."""
    held = CloneSuspicion.objects.filter(
        activation=activation, components_sha256=digest, addresses=""
    ).first()
    if held is not None:
        return held
    evidence = {
        "reason": reason,
        "matched": list(match.matched),
        "changed": list(match.changed),
        "missing": list(match.missing),
        "added": list(match.added),
        "original_activated_at": unix(activation.activated_at),
        "original_client_ip": activation.client_ip,
    }
    return _suspicion_record(
        activation, client_ip=client_ip, components=components, digest=digest, evidence=evidence
    )


def _suspicion_record(
    activation: Activation,
    *,
    client_ip: str | None,
    components: dict[str, str],
    digest: str,
    evidence: dict[str, Any],
    addresses: str = "",
) -> CloneSuspicion:
    suspicion = CloneSuspicion.objects.create(
        activation=activation,
        device_id=activation.device_id,
        client_ip=client_ip,
        components=components,
        components_sha256=digest,
        evidence=evidence,
        addresses=addresses,
    )
    lic = activation.license
    event_emit(
        Event.Type.LICENSE_CLONE_SUSPECTED,
        customer_id=lic.customer_id,
        data={
            "license_id": lic.id,
            "customer_id": lic.customer_id,
            "batch_id": activation.batch_id,
            "device_id": activation.device_id,
            "sku": lic.sku,
            "reason": evidence["reason"],
            "suspicion_id": suspicion.pk,
            "changed": evidence["changed"],
            "missing": evidence["missing"],
            "client_ip": client_ip,
            "addresses": addresses.split(",") if addresses else [],
        },
    )
    return suspicion


def _same_address(one: str | None, other: str | None) -> bool:
    if not one or not other:
        return False
    if one == other:
        return True
    try:
        return ipaddress.ip_address(one) == ipaddress.ip_address(other)
    except ValueError:
        return False


def address_seen(*, activation_id: int, last_ip: str | None, client_ip: str | None) -> None:
    """A unit's unchanged component set reported from ``client_ip``; ``last_ip`` is where
    it was last seen from (read with the set's hash: its ``last_ip``, else its
    activation's address). No query from that address; else :func:`_address_moved`."""
    if not client_ip or client_ip == last_ip:
        return
    _address_moved(activation_id=activation_id, client_ip=client_ip)


@transaction.atomic
def _address_moved(*, activation_id: int, client_ip: str) -> CloneSuspicion | None:
    """The unit's set seen from a new address: CopyRevoked when an operator revoked the
    copy at that address; a suspicion when it is the address the unit left less than
    ``SVC_CLONE_ADDRESS_WINDOW_SECONDS`` ago (A, B, A: one camera does not move back and
    forth so fast); then the address is recorded (a refused request records nothing)."""
    activation = (
        Activation.objects.select_for_update().select_related("license").get(pk=activation_id)
    )
    last = activation.last_ip or activation.client_ip
    if _same_address(client_ip, last):
        return None  # a concurrent request of the unit recorded it
    revoked = (
        CloneSuspicion.objects.filter(
            activation=activation, client_ip=client_ip, copy_revoked_at__isnull=False
        )
        .exclude(addresses="")
        .values_list("pk", flat=True)
        .first()
    )
    if revoked is not None:
        raise CopyRevoked(
            f"licence {activation.license_id}: requests from {client_ip} were revoked as a "
            f"copy of device {activation.device_id} by an operator (clone suspicion "
            f"{revoked}); the original keeps its licence"
        )
    now = clock.now().replace(microsecond=0)
    since = activation.last_ip_since or activation.activated_at
    window = settings.SVC_CLONE_ADDRESS_WINDOW_SECONDS
    suspicion = None
    if (
        last
        and _same_address(client_ip, activation.previous_ip)
        and now - since < dt.timedelta(seconds=window)
    ):
        suspicion = _alternation_suspect(
            activation, back_to=client_ip, away=last, moved_at=since, now=now, window=window
        )
    activation.previous_ip, activation.last_ip, activation.last_ip_since = last, client_ip, now
    activation.save(update_fields=["previous_ip", "last_ip", "last_ip_since"])
    return suspicion


def _alternation_suspect(
    activation: Activation,
    *,
    back_to: str,
    away: str,
    moved_at: dt.datetime,
    now: dt.datetime,
    window: int,
) -> CloneSuspicion:
    """The unit's set came back to ``back_to`` from ``away``, which it moved to at
    ``moved_at``: once per address pair. The copy is the address the unit was not
    activated from; when it was activated from neither, the newcomer (``away``: the unit
    was at ``back_to`` before)."""
    pair = ",".join(sorted({back_to, away}))
    held = CloneSuspicion.objects.filter(activation=activation, addresses=pair).first()
    if held is not None:
        return held
    copy = back_to if _same_address(activation.client_ip, away) else away
    components = activation.components or {}
    evidence = {
        "reason": ADDRESS_REASON,
        "matched": sorted(components),
        "changed": [],
        "missing": [],
        "added": [],
        "original_activated_at": unix(activation.activated_at),
        "original_client_ip": activation.client_ip,
        "first_address": back_to,
        "second_address": away,
        "moved_at": unix(moved_at),
        "returned_at": unix(now),
        "window_seconds": window,
        "copy_client_ip": copy,
    }
    return _suspicion_record(
        activation,
        client_ip=copy,
        components=components,
        digest=activation.components_sha256,
        evidence=evidence,
        addresses=pair,
    )


def evidence_text(evidence: dict[str, Any]) -> str:
    """A suspicion's evidence in one line, for the console and the portal."""
    reason = evidence.get("reason", "")
    if reason == ADDRESS_REASON:
        return (
            f"{reason}: from {evidence.get('first_address')}, then "
            f"{evidence.get('second_address')} at {dates.precise(evidence.get('moved_at'))}, "
            f"back at {dates.precise(evidence.get('returned_at'))} (within "
            f"{evidence.get('window_seconds')} s); the copy: {evidence.get('copy_client_ip')}"
        )
    changed = ", ".join(evidence.get("changed", [])) or "none"
    matched = ", ".join(evidence.get("matched", [])) or "none"
    return f"{reason}: changed {changed}; matched {matched}"


@audited(
    "license.clone_copy_revoke", target=lambda result, arguments: str(arguments["suspicion_id"])
)
@transaction.atomic
def clone_copy_revoke(*, suspicion_id: int) -> CloneSuspicion:
    """Revoke the copy a suspicion names (never the original, the unit's first
    activation, which keeps its licence): requests with the copy's components are
    refused from now on; for the same set from two addresses, requests from the copy's
    address (a copy behind the original's NAT shares its address and cannot be told
    apart)."""
    suspicion = CloneSuspicion.objects.select_for_update().filter(pk=suspicion_id).first()
    if suspicion is None:
        raise NotFound(f"no clone suspicion {suspicion_id}")
    if suspicion.copy_revoked_at is None:
        suspicion.copy_revoked_at = clock.now()
        suspicion.save(update_fields=["copy_revoked_at"])
    if suspicion.addresses:
        _copy_address_dropped(suspicion)
    return suspicion


def _copy_address_dropped(suspicion: CloneSuspicion) -> None:
    """A unit last seen from the revoked copy's address is set back to the original's:
    the copy's next request is then a move, checked (and refused) by :func:`_address_moved`,
    while the original's syncs from its unchanged address cost no query."""
    unit = Activation.objects.select_for_update().get(pk=suspicion.activation_id)
    copy = suspicion.client_ip
    if not _same_address(unit.last_ip or unit.client_ip, copy):
        return
    original = next((a for a in suspicion.addresses.split(",") if not _same_address(a, copy)), copy)
    unit.previous_ip, unit.last_ip, unit.last_ip_since = copy, original, clock.now()
    unit.save(update_fields=["previous_ip", "last_ip", "last_ip_since"])


def clone_rows(*, customer_id: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """Suspected clones, newest first, with their evidence and the original unit (its
    first activation) they copy: for the admin API, the console and the portal."""
    rows = CloneSuspicion.objects.select_related("activation", "activation__license")
    if customer_id is not None:
        customer_id = customer_get(customer_id=customer_id).pk  # 404 naming it
        rows = rows.filter(activation__license__customer_id=customer_id)
    return [clone_row(suspicion) for suspicion in rows[:limit]]


def clone_row(suspicion: CloneSuspicion) -> dict[str, Any]:
    unit = suspicion.activation
    return {
        "suspicion_id": suspicion.pk,
        "license_id": unit.license_id,
        "customer_id": unit.license.customer_id,
        "batch_id": unit.batch_id,
        "device_id": suspicion.device_id,
        "detected_at": unix(suspicion.detected_at),
        "client_ip": suspicion.client_ip,
        "components": suspicion.components,
        "evidence": suspicion.evidence,
        "evidence_text": evidence_text(suspicion.evidence or {}),
        "addresses": suspicion.addresses.split(",") if suspicion.addresses else [],
        "original": {
            "device_id": unit.device_id,
            "activated_at": unix(unit.activated_at),
            "client_ip": unit.client_ip,
            "components": unit.components or {},
        },
        "copy_revoked_at": unix(suspicion.copy_revoked_at) if suspicion.copy_revoked_at else None,
    }
