"""Check-in leases and holds (issue 42): the one place that says, for a licence, how
many days its camera may run analytics without a sync and whether an operator holds it.

A lease is ``max_offline_days``: the licence's own, else its batch's, else its SKU's
(empty everywhere: no lease, today's behaviour). A signed status (SVCS1) handed out at
second T then carries ``lease_end`` = T + days; the camera refuses analytics once its
clock's high-water mark passes the lease end of the newest status it holds. The service
records when a unit under a lease last received a status (``License.checked_in_at``),
so its lease end as the console, portal and API show it is :func:`lease_end_at`.

A licence is suspended while a :class:`~licensing.models.Suspension` names it, its
batch or its customer (:func:`lease_and_hold`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from licensing.models import Batch, License, Sku, Suspension
from svccore.timeunits import DAY


@dataclass(frozen=True)
class LeaseAndHold:
    days: int | None  # None: no lease
    suspended: bool

    def lease_end(self, issued_at: int) -> int:
        """The ``lease_end`` of a status signed at ``issued_at`` (0: no lease)."""
        return issued_at + self.days * DAY if self.days is not None else 0


def _held(*, license_ref, batch_ref, customer_ref) -> Exists:
    holds = Q(kind=Suspension.Kind.BATCH, target=batch_ref) | Q(
        kind=Suspension.Kind.CUSTOMER, target=customer_ref
    )
    if license_ref is not None:
        holds |= Q(kind=Suspension.Kind.LICENSE, target=license_ref)
    return Exists(Suspension.objects.filter(holds))


def lease_and_hold(*, license_id: str, batch_id: str | None = None) -> LeaseAndHold:
    """The lease days and hold of ``license_id``, in one query; for a unit not yet
    written (an activation signs its status before it takes the seat), those of
    ``batch_id``."""
    sku_days = Subquery(
        Sku.objects.filter(code=OuterRef("sku")).order_by().values("max_offline_days")[:1]
    )
    row = (
        License.objects.filter(pk=license_id)
        .annotate(
            sku_days=sku_days,
            held=_held(
                license_ref=OuterRef("id"),
                batch_ref=OuterRef("batch_id"),
                customer_ref=OuterRef("customer_id"),
            ),
        )
        .values_list("max_offline_days", "batch__max_offline_days", "sku_days", "held")
        .first()
    )
    if row is None and batch_id is not None:
        found = (
            Batch.objects.filter(pk=batch_id)
            .annotate(
                sku_days=sku_days,
                held=_held(
                    license_ref=None, batch_ref=OuterRef("id"), customer_ref=OuterRef("customer_id")
                ),
            )
            .values_list("max_offline_days", "sku_days", "held")
            .first()
        )
        row = (None, *found) if found is not None else None
    if row is None:
        return LeaseAndHold(days=None, suspended=False)
    return from_values(*row)


# The same rule as :func:`lease_and_hold`, as SQL for the activation's one lookup
# (licensing.services.activation.LOOKUP_SQL): ``u`` the unit (may be NULL), ``b`` its
# batch, ``s`` the batch's SKU, ``k`` the batch key. tests/licensing/test_leases.py holds
# the two together.
LEASE_DAYS_SQL = "COALESCE(u.max_offline_days, b.max_offline_days, s.max_offline_days)"
HELD_SQL = """EXISTS (
    SELECT 1 FROM licensing_suspension h
    WHERE (h.kind = 'batch' AND h.target = b.id)
        OR (h.kind = 'customer' AND h.target = k.customer_id)
        OR (h.kind = 'license' AND h.target = u.id)
)"""


def status_expressions(license_id: str) -> dict[str, Any]:
    """:func:`lease_and_hold` of ``license_id`` as expressions another query annotates
    (the status's one read of the list head, licensing.revocations); read the values
    back with :func:`from_values`."""
    unit = License.objects.filter(pk=license_id).order_by()
    return {
        "lease_own": Subquery(unit.values("max_offline_days")[:1]),
        "lease_batch": Subquery(unit.values("batch__max_offline_days")[:1]),
        "lease_sku": Subquery(
            Sku.objects.filter(code=Subquery(unit.values("sku")[:1]))
            .order_by()
            .values("max_offline_days")[:1]
        ),
        "held": Exists(
            Suspension.objects.filter(
                Q(kind=Suspension.Kind.LICENSE, target=license_id)
                | Q(kind=Suspension.Kind.BATCH, target__in=unit.values("batch_id"))
                | Q(kind=Suspension.Kind.CUSTOMER, target__in=unit.values("customer_id"))
            )
        ),
    }


STATUS_FIELDS = ("lease_own", "lease_batch", "lease_sku", "held")


def from_values(own: int | None, batch: int | None, sku: int | None, held: Any) -> LeaseAndHold:
    days = next((d for d in (own, batch, sku) if d is not None), None)
    return LeaseAndHold(days=days, suspended=bool(held))


def row_annotations(
    *,
    own_days: str,
    batch_days: str,
    sku: str,
    license_ref: str,
    batch_ref: str,
    customer_ref: str,
    checked_in: str,
) -> dict[str, Any]:
    """The same rule for every row of a list (the fleet, the console's units): the
    lease days, the hold and the licence's last check-in, given each row's paths to
    them (read the lease end back with :func:`lease_end_at`)."""
    days = Coalesce(
        F(own_days),
        F(batch_days),
        Subquery(Sku.objects.filter(code=OuterRef(sku)).order_by().values("max_offline_days")[:1]),
    )
    return {
        "lease_days": days,
        "held": _held(
            license_ref=OuterRef(license_ref),
            batch_ref=OuterRef(batch_ref),
            customer_ref=OuterRef(customer_ref),
        ),
        "checked_in": F(checked_in),
    }


def license_annotations() -> dict[str, Any]:
    """:func:`row_annotations` for rows of :class:`~licensing.models.License`."""
    return row_annotations(
        own_days="max_offline_days",
        batch_days="batch__max_offline_days",
        sku="sku",
        license_ref="id",
        batch_ref="batch_id",
        customer_ref="customer_id",
        checked_in="checked_in_at",
    )


def attach(rows: Any, license_id_of: Any = lambda row: row.pk) -> None:
    """Set ``held``, ``checked_in`` and ``lease_days`` on each of ``rows`` (a page of a
    list: licences, or activations by their licence) from one query: what
    :func:`licensing.unit_states.unit_state_of` reads. Done after the page is read, not
    as annotations of its query, so the page's plan stays the index walk it is."""
    rows = list(rows)
    if not rows:
        return
    found = {
        pk: (held, checked_in, days)
        for pk, held, checked_in, days in License.objects.filter(
            pk__in={license_id_of(row) for row in rows}
        )
        .order_by()  # a lookup by primary keys: no order to pay for
        .annotate(**license_annotations())
        .values_list("pk", "held", "checked_in", "lease_days")
    }
    for row in rows:
        row.held, row.checked_in, row.lease_days = found.get(
            license_id_of(row), (False, None, None)
        )


def lease_end_at(checked_in_at: dt.datetime | None, days: int | None) -> dt.datetime | None:
    """A unit's lease end as the service knows it: its last check-in plus its lease (None:
    no lease, or none handed out yet under it)."""
    if days is None or checked_in_at is None:
        return None
    return checked_in_at + dt.timedelta(days=days)


def lease_day_values() -> list[int]:
    """Every lease length set anywhere (SKUs, batches, licences), in one query: a
    handful of values, so "past its lease" is one comparison per value
    (:func:`lease_ends_before`)."""

    def days(model: Any) -> Any:
        return (
            model.objects.filter(max_offline_days__isnull=False)
            .order_by()
            .values_list("max_offline_days", flat=True)
        )

    return sorted(days(Sku).union(days(Batch), days(License)))


def lease_ends_before(
    moment: dt.datetime, *, checked_in: str = "checked_in_at", values: list[int] | None = None
) -> Q:
    """Rows annotated with ``lease_days`` (:func:`row_annotations`) whose lease ends
    before ``moment``: one comparison of the check-in per lease length in use, so the
    database does the filtering (and can use the check-in's index), whatever the fleet's
    size. A row under a lease that never received a status under it has no lease end
    and is not selected."""
    ends = Q(pk__in=[])
    for value in values if values is not None else lease_day_values():
        ends |= Q(lease_days=value, **{f"{checked_in}__lt": moment - dt.timedelta(days=value)})
    return ends


def past_lease(activations: Any, *, now: dt.datetime, values: list[int] | None = None) -> Any:
    """The units of ``activations`` (a queryset of :class:`~licensing.models.Activation`)
    whose lease ended before ``now``: their camera has not checked in for longer than its
    lease and has stopped its analytics, unless it syncs."""
    days = Coalesce(
        F("license__max_offline_days"),
        F("batch__max_offline_days"),
        Subquery(
            Sku.objects.filter(code=OuterRef("batch__sku"))
            .order_by()
            .values("max_offline_days")[:1]
        ),
    )
    return activations.annotate(lease_days=days).filter(
        lease_ends_before(now, checked_in="license__checked_in_at", values=values)
    )
