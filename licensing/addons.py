"""Add-ons on licences (issue 42 item 4): which add-ons a licence carries, the claims it
is signed with, and what each signing charges. The rules free of the database are
:mod:`svccore.addons`; the operator's writes are :mod:`licensing.services.addons`.

**Who carries what.** An add-on granted to a batch is carried by every unit of the
batch, activated before or after; one granted to a direct licence by that licence.
Removing it ends the grant (``removed_at``); no unit carries it from its next token on.

**Delivery.** A direct licence is re-signed at once, in the transaction of the change.
A batch's units (a million of them, perhaps) are re-signed when their devices ask, as
after a renewal: ``Batch.addons_version`` moves with every change, each unit records the
version its token carries (``License.addons_version``), and a device that presents a
token of another version (``GET /v1/license`` in ``sync``, or a re-activation) receives
its licence re-signed with the batch's add-ons of now (:func:`unit_signing`).

**Charges.** Billing follows tokens, not grants: whenever a token carrying an add-on is
signed for time the licence has not been charged for, an :class:`AddOnCharge` from the
signing (or from where the paid time ends) to the token's end is written in the same
transaction (:func:`charges_for`). So a camera never carries an add-on it is not billed
for, a camera that never syncs again is never billed for it, a renewal's new term is
billed camera by camera as each fetches its renewed licence, and removing and adding an
add-on again within the time paid bills nothing twice. A unit that took the seat of a
released one (a transfer) carries on the time paid for its predecessor.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from licensing.models import Activation, AddOnCharge, AddOnGrant, License, SeatRelease
from svccore import addons


def active_grants(*, license_id: str) -> list[AddOnGrant]:
    """The add-ons granted to the batch key or direct licence ``license_id`` and not
    removed, oldest first."""
    return list(
        AddOnGrant.objects.filter(license_id=license_id, removed_at__isnull=True).order_by(
            "added_at", "id"
        )
    )


def sold_claims(lic: License) -> dict[str, Any]:
    """``{"ent", "lim"}`` of a direct licence as sold, before any add-on."""
    return lic.sold_claims or addons.sold_part(lic.claims)


def signed_claims(claims: dict[str, Any], sold: dict[str, Any], grants: list[AddOnGrant]):
    """``claims`` with the entitlements and caps of ``sold`` carrying ``grants``."""
    return {name: value for name, value in claims.items() if name != "kid"} | addons.with_addons(
        sold, grants
    )


@dataclass(frozen=True)
class UnitSigning:
    """What a unit is re-signed with: its claims carrying its batch's add-ons of now,
    the batch's add-ons version they reflect, and the grants (for its charges)."""

    claims: dict[str, Any]
    version: int
    grants: list[AddOnGrant]


def unit_signing(license_id: str, claims: dict[str, Any] | None = None) -> UnitSigning:
    """The claims a unit licence is re-signed with (its own ``claims``, default: its
    row's) carrying the add-ons its batch has now. The version is read before the grants:
    a change committed in between is reflected in the claims but not the version, so the
    next request re-signs again rather than never."""
    row = (
        License.objects.filter(pk=license_id)
        .values_list("claims", "batch__addons_version", "batch__license_id", "addons_version")
        .get()
    )
    stored, version, key_id, carried = row
    claims = stored if claims is None else claims
    if not version and not carried:  # the batch never had an add-on: as sold
        return UnitSigning(claims, 0, [])
    key_claims = License.objects.values_list("claims", flat=True).get(pk=key_id)
    grants = active_grants(license_id=key_id)
    return UnitSigning(
        signed_claims(claims, addons.sold_part(key_claims), grants), version or 0, grants
    )


def _predecessors(license_id: str) -> list[str]:
    """The unit licences whose seats ``license_id`` took in turn (transfers), nearest
    first: the time paid for them is paid for it."""
    found: list[str] = []
    current = license_id
    while True:
        before = (
            Activation.objects.filter(license_id=current, transfer_of__isnull=False)
            .values_list("transfer_of__license_id", flat=True)
            .first()
        )
        if before is None or before in found or len(found) >= 100:
            return found
        found.append(before)
        current = before


def _paid_until(license_ids: list[str], codes: list[str]) -> dict[str, dt.datetime | None]:
    """Per add-on code, the end of the time these licences are charged for (None:
    charged for good, a perpetual charge); codes never charged are absent."""
    paid: dict[str, dt.datetime | None] = {}
    rows = AddOnCharge.objects.filter(license_id__in=license_ids, grant__code__in=codes)
    for code, ends_at in rows.values_list("grant__code", "ends_at"):
        if code in paid and paid[code] is None:
            continue
        paid[code] = None if ends_at is None else max(ends_at, paid.get(code) or ends_at)
    return paid


def charges_for(
    *,
    license_id: str,
    grants: list[AddOnGrant],
    ends_at: dt.datetime | None,
    now: dt.datetime,
    new: bool = False,
    transfer_of: int | None = None,
) -> list[AddOnCharge]:
    """The charges of signing ``license_id`` with ``grants`` to ``ends_at`` (None:
    perpetual) at ``now``, not yet saved: for each add-on, the time from ``now`` (or the
    end of the time already charged, if later) to ``ends_at``; for one billed once
    (``term_days`` 0) or a licence without an end, 1 unless already charged. ``new``: a
    licence not yet written, charged nothing so far; ``transfer_of``: the seat release
    whose seat it takes (what the released unit and its own predecessors were charged
    counts as charged)."""
    if not grants:
        return []
    holders = [] if new else [license_id, *_predecessors(license_id)]
    if transfer_of is not None:
        released = SeatRelease.objects.values_list("license_id", flat=True).get(pk=transfer_of)
        holders += [released, *_predecessors(released)]
    paid = _paid_until(holders, [g.code for g in grants]) if holders else {}
    charges = []
    for grant in grants:
        start = now
        if grant.code in paid:
            until = paid[grant.code]
            if until is None:
                continue  # charged for good
            start = max(now, until)
        once = grant.term_days == 0 or ends_at is None
        if once:
            if grant.code in paid:
                continue
            quantity, end = 1, None
        else:
            quantity, end = addons.days_between(start, ends_at), ends_at
            if quantity == 0:
                continue
        charges.append(
            AddOnCharge(
                grant=grant,
                customer_id=grant.customer_id,
                sku=grant.sku,
                batch_id=grant.batch_id,
                license_id=license_id,
                charged_at=now,
                starts_at=start,
                ends_at=end,
                quantity=quantity,
                unit_price=grant.unit_price,
                currency=grant.currency,
            )
        )
    return charges


def charge_rows(charges: list[AddOnCharge]) -> list[tuple[type, dict[str, Any]]]:
    """``charges`` as rows for ``config.rows`` (the activation's one statement): every
    column but the id."""
    columns = [f.attname for f in AddOnCharge._meta.concrete_fields if not f.primary_key]
    return [(AddOnCharge, {name: getattr(c, name) for name in columns}) for c in charges]
