"""Suspend and reinstate (issue 42): an operator's reversible hold on a licence, a batch
key (all its units) or a customer (all its licences), distinct from a revocation.

A hold is a :class:`~licensing.models.Suspension` row while it lasts. The signed status
of every licence it covers says ``suspended`` from the next status handed out (the
camera refuses analytics with ``SUSPENDED`` at the sync that learns it, the video path
runs); reinstating deletes the row and the next sync restores analytics. Nothing else
changes: the unit keeps its seat, per-unit charges stand, and metered usage cannot be
counted while suspended (the camera refuses ``count``). Both are audited and reported as
events (``license.suspended``, ``license.reinstated``) with their webhooks."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from audit.services import audited
from config import clock
from config.errors import InvalidInput, NotFound
from customers.services import customer_get
from events.models import Event
from events.services import event_emit
from licensing.models import Batch, License, Suspension
from svccore.timeunits import unix


@dataclass(frozen=True)
class Hold:
    """One hold as the API answers it."""

    kind: str  # Suspension.Kind
    target: str
    customer_id: str
    suspended: bool
    reason: str
    suspended_at: int  # Unix seconds; 0 when not suspended
    changed: bool  # False: already so (suspend again, reinstate what is not held)


def _target(
    license_id: str | None, batch_id: str | None, customer_id: str | None
) -> tuple[str, str, str, dict]:
    """(kind, target id, customer id, the ids an event carries) of the one thing named;
    InvalidInput unless exactly one is named, NotFound for an unknown one."""
    given = (("license", license_id), ("batch", batch_id), ("customer", customer_id))
    named = [(kind, value) for kind, value in given if value]
    if len(named) != 1:
        raise InvalidInput("name exactly one of license_id, batch_id or customer_id")
    kind, target = named[0]
    if kind == Suspension.Kind.LICENSE:
        lic = License.objects.filter(pk=target).values("customer_id", "batch_id", "sku").first()
        if lic is None:
            raise NotFound(f"licence {target} does not exist")
        data = {"license_id": target, "customer_id": lic["customer_id"], "sku": lic["sku"]}
        if lic["batch_id"]:
            data["batch_id"] = lic["batch_id"]
        return kind, target, lic["customer_id"], data
    if kind == Suspension.Kind.BATCH:
        batch = Batch.objects.filter(pk=target).values("customer_id", "license_id", "sku").first()
        if batch is None:
            raise NotFound(f"batch {target} does not exist")
        data = {
            "license_id": batch["license_id"],
            "customer_id": batch["customer_id"],
            "batch_id": target,
            "sku": batch["sku"],
        }
        return kind, target, batch["customer_id"], data
    customer = customer_get(customer_id=target)
    return kind, target, customer.id, {"customer_id": customer.id}


def _hold_target(result: Hold, arguments: dict) -> str:
    return f"{result.kind} {result.target}"


@audited("license.suspend", target=_hold_target)
@transaction.atomic
def license_suspend(
    *,
    reason: str,
    license_id: str | None = None,
    batch_id: str | None = None,
    customer_id: str | None = None,
) -> Hold:
    """Suspend a licence, a batch key (all its units) or a customer (all its licences),
    naming exactly one, with a reason. Idempotent: suspending again keeps the first time
    and reason."""
    kind, target, owner, data = _target(license_id, batch_id, customer_id)
    reason = reason.strip()[:500]
    if not reason:
        raise InvalidInput("a suspension needs a reason (it is shown to the customer's operators)")
    held = Suspension.objects.filter(kind=kind, target=target).first()
    changed = held is None
    if held is None:
        try:
            with transaction.atomic():
                held = Suspension.objects.create(
                    kind=kind,
                    target=target,
                    customer_id=owner,
                    reason=reason,
                    suspended_at=clock.now(),
                )
        except IntegrityError:  # a concurrent suspension of the same target won
            held = Suspension.objects.get(kind=kind, target=target)
            changed = False
    if changed:
        event_emit(
            Event.Type.LICENSE_SUSPENDED,
            customer_id=owner,
            data=data | {"scope": kind, "reason": held.reason},
        )
    return Hold(kind, target, owner, True, held.reason, unix(held.suspended_at), changed)


@audited("license.reinstate", target=_hold_target)
@transaction.atomic
def license_reinstate(
    *,
    reason: str = "",
    license_id: str | None = None,
    batch_id: str | None = None,
    customer_id: str | None = None,
) -> Hold:
    """Lift the hold on the one licence, batch or customer named (its own hold: a unit
    whose batch or customer is also suspended stays suspended). Idempotent: reinstating
    what is not suspended changes nothing."""
    kind, target, owner, data = _target(license_id, batch_id, customer_id)
    deleted, _ = Suspension.objects.filter(kind=kind, target=target).delete()
    if deleted:
        event_emit(
            Event.Type.LICENSE_REINSTATED,
            customer_id=owner,
            data=data | {"scope": kind, "reason": reason.strip()[:500]},
        )
    return Hold(kind, target, owner, False, reason.strip()[:500], 0, bool(deleted))
