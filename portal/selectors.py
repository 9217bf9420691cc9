"""Reads of the customer portal: who a customer user or key is, and what a customer
sees (always filtered by its own id: another customer's ids read as absent)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db.models import F, Q, Sum

from billing import issuing, pricing
from billing import selectors as billing_selectors
from config import clock
from config.errors import NotFound
from customers.models import Customer
from licensing import selectors as licensing_selectors
from licensing.models import Activation, ActivationDaily, AddOnGrant, Batch, License, Sku
from portal.models import CustomerApiKey, CustomerUser
from svccore import dates
from svccore.timeunits import unix

KEY_SCHEME = "svccu"
PRESENTED = re.compile(r"\Asvccu_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})\Z")
EXPIRING_DAYS = 30


def invitation_digest(secret: str) -> str:
    return hashlib.sha256(b"invitation:" + secret.encode()).hexdigest()


def customer_key_digest(key: str) -> str:
    """HMAC-SHA256 under the service secret, as operator keys (a copy of the table alone
    does not let anyone test guesses offline)."""
    return hmac.new(
        settings.SECRET_KEY.encode(), b"customer-key:" + key.encode(), hashlib.sha256
    ).hexdigest()


def customer_key_match(presented: str) -> CustomerApiKey | None:
    """The active customer key ``presented`` is, or None. A key whose owner (the portal
    user who made it) is inactive is no key, whether or not it was revoked when they were
    deactivated: the second guard, for rows written around the services."""
    match = PRESENTED.match(presented or "")
    if not match:
        return None
    row = (
        CustomerApiKey.objects.select_related("customer", "owner__user")
        .filter(prefix=match.group(1), revoked_at__isnull=True)
        .first()
    )
    if row is None or not hmac.compare_digest(row.digest, customer_key_digest(presented)):
        return None
    if row.owner is not None and not row.owner.user.is_active:
        return None
    return row


def key_owner(key: CustomerApiKey) -> str:
    """Who a key belongs to, for lists: its owner's name, else (a key made outside the
    portal, or whose owner was deleted) who created it."""
    if key.owner_id is not None and key.owner is not None:
        return key.owner.user.get_username()
    return f"{key.created_by or 'unknown'} (no portal user)"


def customer_keys(
    *, customer_id: str | None = None, state: str | None = None, limit: int = 100
) -> list[dict]:
    """The newest ``limit`` customer API keys (of one customer, active or revoked only),
    as the operators' list shows them."""
    rows = CustomerApiKey.objects.select_related("owner__user").order_by("-created_at", "-id")
    if customer_id is not None:
        rows = rows.filter(customer_id=customer_id)
    if state == "active":
        rows = rows.filter(revoked_at__isnull=True)
    elif state == "revoked":
        rows = rows.filter(revoked_at__isnull=False)
    return [customer_key_row(key) for key in rows[:limit]]


def customer_key_row(key: CustomerApiKey) -> dict:
    """A key as the operators' API shows it (never its digest)."""
    return {
        "prefix": key.prefix,
        "name": key.name,
        "customer_id": key.customer_id,
        "owner_name": key_owner(key),
        "created_by": key.created_by,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
        "active": key.revoked_at is None,
        "write": key.write,
    }


def account_of(user) -> CustomerUser | None:
    """The customer account of a logged-in user, or None (staff, or no account)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active or user.is_staff:
        return None
    return CustomerUser.objects.select_related("customer").filter(user=user).first()


def batch_of(customer: Customer, batch_id: str) -> Batch:
    batch = (
        Batch.objects.filter(pk=batch_id, customer=customer)
        .select_related("trial_conversion")
        .first()
    )
    if batch is None:
        raise NotFound(f"you have no batch {batch_id[:64]}")
    return batch


def license_of(customer: Customer, license_id: str) -> License:
    lic = License.objects.filter(pk=license_id, customer=customer).first()
    if lic is None:
        raise NotFound(f"you have no licence {license_id[:64]}")
    return lic


# What a number that is not the customer's answers: the same words whether the number
# is another customer's or no one's, and never the number itself, so the answer tells
# nothing about which numbers exist.
NO_DOCUMENT = "you have no invoice or credit note of that number"


def document_of(customer: Customer, number: str):
    """``customer``'s invoice or credit note ``number``; NotFound with :data:`NO_DOCUMENT`
    for anything else, another customer's number and a number never issued alike."""
    try:
        document = billing_selectors.invoice_get(number=number)
    except NotFound:
        document = None
    if document is None or document.customer_id != customer.pk:
        raise NotFound(NO_DOCUMENT)
    return document


def batches_of(customer: Customer):
    # A converted trial's conversion with it (its time is on the batch's answer).
    return (
        Batch.objects.filter(customer=customer)
        .select_related("trial_conversion")
        .order_by("-issued_at", "-id")
    )


def active_addons_of(batch_ids: list[str]) -> dict[str, list[AddOnGrant]]:
    """The active add-ons of these batches (issue 42), oldest first: one query."""
    found: dict[str, list[AddOnGrant]] = {batch_id: [] for batch_id in batch_ids}
    grants = AddOnGrant.objects.filter(batch_id__in=batch_ids, removed_at__isnull=True)
    for grant in grants.order_by("added_at", "id"):
        found[grant.batch_id].append(grant)
    return found


def addons_pending(batch: Batch, license_ids: list[str]) -> set[str]:
    """Which of these unit licences of ``batch`` do not carry its add-ons of now yet:
    they receive them (or lose a removed one) at their next sync."""
    if not batch.addons_version:
        return set()
    return set(
        License.objects.filter(pk__in=license_ids)
        .exclude(addons_version=batch.addons_version)
        .values_list("pk", flat=True)
    )


def licenses_of(customer: Customer):
    return License.objects.filter(customer=customer).order_by("-issued_at", "-id")


@dataclass(frozen=True)
class Period:
    since: dt.datetime
    invoice: str  # the last invoice the period follows, or ""
    inferences: dict[str, int]  # by SKU
    allowance: dict[str, int]  # pooled included inferences by SKU (metered SKUs)
    days: int = 1  # the days the allowance is pro-rated to (allowance_per_unit is 30 days')
    # The overage charge each SKU over its allowance would bring if the period closed now
    # (contract section 6: the same tiers and rounding as the invoice's lines), with its
    # currency: {sku: (amount, currency)}.
    overage_cost: dict[str, tuple[Decimal, str]] = field(default_factory=dict)


def usage_this_period(customer: Customer) -> Period:
    """Inferences since the customer's last invoice (or the last 30 days), by SKU, and
    the pooled allowance of its metered units."""
    now = clock.now()
    last = issuing.open_invoice(customer_id=customer.pk)
    since = last.period_end if last else now - dt.timedelta(days=30)
    used = billing_selectors.inferences_by_sku(
        customer_id=customer.pk, start=unix(since), end=unix(now)
    )
    units = billing_selectors.billable_units_by_sku(customer_id=customer.pk, start=since, end=now)
    days = max(1, math.ceil((now - since).total_seconds() / 86_400))
    skus = {sku.code: sku for sku in Sku.objects.all()}
    exact = {
        sku: pricing.allowance(
            units=n, allowance_per_unit=skus[sku].allowance_per_unit, period_days=days
        )
        for sku, n in units.items()
        if n and sku in skus and skus[sku].allowance_per_unit
    }
    cost = {}
    for sku, included in exact.items():
        over = max(Decimal(0), Decimal(used.get(sku, 0)) - included)
        if over:
            tiers = pricing.overage_by_tier(over, skus[sku].overage_tiers)
            currency = skus[sku].currency
            amount = sum(
                (
                    pricing.line_amount(
                        pricing.thousands(n), Decimal(str(t["price_per_1000"])), currency
                    )
                    for t, n in tiers
                    if n
                ),
                Decimal(0),
            )
            cost[sku] = (amount, currency)
    return Period(
        since=since,
        invoice=last.number if last else "",
        inferences=used,
        allowance={sku: int(a) for sku, a in exact.items()},
        days=days,
        overage_cost=cost,
    )


def expiring_of(customer: Customer):
    return licensing_selectors.expiring_list(days=EXPIRING_DAYS, customer_id=customer.pk)


def weak_binding_of(customer: Customer, *, limit: int = 20):
    return (
        Activation.objects.filter(batch__customer=customer, weak_binding=True)
        .select_related("batch", "license", "license__seat_release")
        .order_by("-activated_at", "-id")[:limit]
    )


def in_grace_of(customer: Customer, *, limit: int = 50) -> list[License]:
    """Licences past their end but inside their grace days: cameras still running that
    stop unless renewed."""
    now = clock.now()
    rows = (
        License.objects.filter(customer=customer, revoked_at__isnull=True, expires_at__lte=now)
        .filter(~Q(grace_days=0))
        .select_related("seat_release")  # its state (licensing.unit_states), no query a row
        .order_by("expires_at")[:1000]
    )
    return [lic for lic in rows if lic.expires_at + dt.timedelta(days=lic.grace_days) > now][:limit]


def activations_per_day(customer: Customer, *, days: int) -> list[tuple[dt.date, int]]:
    """(date, new activations, transfers and trials) of the customer's batches for each of the
    last ``days`` days (UTC), oldest first, zero-filled, from the daily rollups."""
    today = clock.now().date()
    dates = [today - dt.timedelta(days=n) for n in range(days - 1, -1, -1)]
    counts = dict(
        ActivationDaily.objects.filter(batch__customer=customer, day__gte=dates[0])
        .values_list("day")
        .annotate(n=Sum(F("activations") + F("transfers") + F("trials")))
        .order_by()
        .values_list("day", "n")
    )
    return [(day, counts.get(day, 0)) for day in dates]


def renewable_of(customer: Customer, *, limit: int = 500) -> list[tuple[str, str]]:
    """(id, description) of what the customer may ask to renew: its batches and direct
    licences with an end, soonest end first (a trial batch is bought, not renewed)."""
    batches = Batch.objects.filter(
        customer=customer, expires_at__isnull=False, trial_days__isnull=True
    ).order_by("expires_at")[:limit]
    directs = License.objects.filter(
        customer=customer, kind=License.Kind.DIRECT, expires_at__isnull=False, revoked_at=None
    ).order_by("expires_at")[:limit]
    rows = [(b.expires_at, b.pk, f"batch, {b.sku}, {b.units_purchased} units") for b in batches]
    rows += [(lic.expires_at, lic.pk, f"licence, {lic.sku}, {lic.device_id}") for lic in directs]
    return [
        (pk, f"{what}, ends {dates.day(end)}") for end, pk, what in sorted(rows, key=lambda r: r[0])
    ]
