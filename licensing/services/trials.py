"""Converting a trial batch to paid (issue 42; what a trial is: :mod:`licensing.trials`).

One transaction holding the batch row's lock (the lock every seat change takes, so no
activation commits halfway through): the batch stops being a trial (``trial_days``
emptied), the batch and its key run the paid term from now (the key re-signed with the
new ``exp``, the token it replaces kept as issued, as a renewal does), every trial unit
licence in service is re-signed as a paid licence to the same end, without the trial mark
and with the batch key's grace (its token so far kept as issued, so a camera that has not
synced yet keeps uploading), and a :class:`~licensing.models.TrialConversion` row records
what is billed, once (``billing.ledger``): the trial units activated and not revoked now x
the batch's unit price.

A batch converts once: converting it again answers the first conversion (``replayed``),
nothing re-signed or billed again, unless another term is asked (409). The units are
re-signed here rather than when their cameras ask (as a renewal does), so that every
page, the revocation list and billing (a perpetual SKU's maintenance counts perpetual
licences) see paid licences from the moment of the sale; a trial batch is what one
customer evaluates, its units few.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction

from audit.services import audited
from config import clock
from config.admin.display import utc_time
from config.errors import Conflict, InvalidInput, NotFound
from events.models import Event
from events.services import event_emit
from licensing import trials
from licensing.models import (
    Activation,
    Batch,
    License,
    SupersededToken,
    TrialConversion,
    token_digest,
)
from licensing.services.licenses import license_data
from signing import keyring
from svccore.claims import LAST_SECOND, TERM_DAYS_MAX
from svccore.timeunits import DAY, unix

RESIGNED_PER_STATEMENT = 500  # units re-signed and written per bulk UPDATE


@dataclass(frozen=True)
class ConversionResult:
    conversion: TrialConversion
    replayed: bool  # converted before: this is that conversion, nothing done again


@dataclass(frozen=True)
class ConversionQuote:
    """What converting a trial batch would do now: the confirmation pages' row."""

    batch_id: str
    customer_id: str
    customer_name: str
    sku: str
    trial_days: int
    term_days: int  # 0: perpetual
    previous_expires_at: dt.datetime | None
    expires_at: dt.datetime | None
    units: int
    unit_price: Decimal
    currency: str

    @property
    def amount(self) -> Decimal:
        return self.units * self.unit_price


def batch_term_days(batch: Batch) -> int:
    """The term a batch was issued with, in days (0: perpetual). A trial batch is never
    renewed, so its end is still its issue's."""
    if batch.expires_at is None:
        return 0
    return round((batch.expires_at - batch.issued_at).total_seconds() / DAY)


def units_on_trial(batch: Batch) -> int:
    """The units a conversion bills: activated as trials and not revoked (now; the caller
    holds the batch's row lock when it converts)."""
    return Activation.objects.filter(
        batch=batch, trial=True, license__revoked_at__isnull=True
    ).count()


def _term(batch: Batch, term_days: Any, now: dt.datetime) -> tuple[int, dt.datetime | None]:
    """(term in days, new end) of converting ``batch`` now: ``term_days`` from now
    (default: the batch's term as issued); a perpetual batch stays perpetual."""
    if batch.expires_at is None:
        if term_days not in (None, 0):
            raise InvalidInput(
                f"batch {batch.id} is perpetual: its units become perpetual licences; give no "
                "term_days"
            )
        return 0, None
    if term_days is None:
        term_days = batch_term_days(batch)
    if type(term_days) is not int or not 1 <= term_days <= TERM_DAYS_MAX:
        raise InvalidInput(f"term_days must be an integer 1-{TERM_DAYS_MAX:,}, not {term_days!r}")
    end = now + dt.timedelta(days=term_days)
    if unix(end) > LAST_SECOND:
        raise InvalidInput(
            f"{term_days} days from now end after the year 9999; give a shorter term"
        )
    return term_days, end


def _convertible(batch: Batch, key: License) -> None:
    """Conflict unless ``batch`` is a trial whose key is not revoked."""
    if not batch.is_trial:
        raise trials.NotATrial(
            f"batch {batch.id} is not a trial batch: its units are paid licences already"
        )
    if key.revoked_at is not None:
        raise Conflict(
            f"batch {batch.id} cannot be converted: its batch key {key.id} was revoked at "
            f"{utc_time(key.revoked_at)} ({key.revoke_reason or 'no reason given'})"
        )


def _batch(batch_id: str, *, lock: bool) -> Batch:
    rows = Batch.objects.select_related("customer", "license")
    if lock:
        rows = rows.select_for_update(of=("self",))
    batch = rows.filter(pk=batch_id).first()
    if batch is None:
        raise NotFound(f"batch {batch_id} does not exist")
    return batch


def trial_conversion_quote(*, batch_id: str, term_days: int | None = None) -> ConversionQuote:
    """What :func:`trial_convert` would do now (the same rules, nothing written):
    Conflict for a batch that is not a trial (converted already included) or whose key
    is revoked, InvalidInput for a term out of bounds, NotFound."""
    batch = _batch(batch_id, lock=False)
    _convertible(batch, batch.license)
    now = clock.now().replace(microsecond=0)
    term, end = _term(batch, term_days, now)
    return ConversionQuote(
        batch_id=batch.id,
        customer_id=batch.customer_id,
        customer_name=batch.customer.name,
        sku=batch.sku,
        trial_days=batch.trial_days,
        term_days=term,
        previous_expires_at=batch.expires_at,
        expires_at=end,
        units=units_on_trial(batch),
        unit_price=batch.unit_price,
        currency=batch.currency,
    )


def _paid_signed(claims: dict[str, Any], *, end: dt.datetime | None, grace_days: int, now):
    """(token, signed claims): ``claims`` as a paid licence ending at ``end`` (None:
    perpetual), without the trial mark, signed by the active key at ``now``; ``nbf``
    stays as issued."""
    paid = {
        name: value for name, value in claims.items() if name not in ("kid", trials.TRIAL_CLAIM)
    }
    paid.update(exp=unix(end), grace_days=grace_days, iat=unix(now))
    return keyring.sign_claims(paid)


def _resign(
    licenses: list[License], *, end: dt.datetime | None, grace_days: int, now: dt.datetime
) -> None:
    """Re-sign locked licence rows as paid licences ending at ``end``; each token so far
    stays issued (a superseded token)."""
    superseded = []
    for lic in licenses:
        token, signed = _paid_signed(lic.claims, end=end, grace_days=grace_days, now=now)
        if token == lic.token:
            continue  # a batch key converted the second it was issued: already so signed
        superseded.append(
            SupersededToken(license_id=lic.id, token_sha256=lic.token_sha256, superseded_at=now)
        )
        lic.token, lic.claims, lic.token_sha256 = token, signed, token_digest(token)
        lic.expires_at, lic.grace_days, lic.trial = end, grace_days, False
    SupersededToken.objects.bulk_create(superseded)
    License.objects.bulk_update(
        licenses,
        ["token", "claims", "token_sha256", "expires_at", "grace_days", "trial"],
        batch_size=RESIGNED_PER_STATEMENT,
    )


def _replay(batch: Batch, term_days: int | None) -> ConversionResult:
    earlier = TrialConversion.objects.select_related("customer").get(batch=batch)
    if term_days is not None and term_days != earlier.term_days:
        raise Conflict(
            f"batch {batch.id} was converted at {utc_time(earlier.converted_at)} for "
            f"{earlier.term_days} days ({earlier.units} units billed); it converts once: "
            "renew it for more"
        )
    return ConversionResult(earlier, replayed=True)


def _conversion_detail(result: ConversionResult, arguments: dict) -> dict:
    conversion = result.conversion
    return {
        "batch_id": conversion.batch_id,
        "term_days": conversion.term_days,
        "units": conversion.units,
        "replayed": result.replayed,
    }


@audited(
    "batch.convert_trial",
    target=lambda result, arguments: result.conversion.batch_id,
    detail=_conversion_detail,
)
@transaction.atomic
def trial_convert(*, batch_id: str, term_days: int | None = None) -> ConversionResult:
    """Convert a trial batch to paid now (see the module's docstring): its trial units
    in service become paid licences for ``term_days`` from now (default: the batch's
    term as issued; a perpetual batch's become perpetual), picked up by their cameras at
    their next sync, billed once as a ``trial_conversion`` line. Idempotent per batch.

    Refused: NotFound; a batch that was never a trial, or whose key is revoked, or
    converted before with another ``term_days`` (Conflict); a term out of bounds
    (InvalidInput)."""
    batch = _batch(batch_id, lock=True)
    if TrialConversion.objects.filter(batch=batch).exists():
        return _replay(batch, term_days)
    key = License.objects.select_for_update().get(pk=batch.license_id)
    _convertible(batch, key)
    now = clock.now().replace(microsecond=0)
    term, end = _term(batch, term_days, now)
    grace_days = key.grace_days
    previous = batch.expires_at
    if end is not None:
        _resign([key], end=end, grace_days=grace_days, now=now)
    units = units_on_trial(batch)
    on_trial = License.objects.select_for_update().filter(
        batch=batch, trial=True, revoked_at__isnull=True
    )
    while chunk := list(on_trial.order_by("id")[:RESIGNED_PER_STATEMENT]):
        _resign(chunk, end=end, grace_days=grace_days, now=now)  # no longer on trial
    trial_days = batch.trial_days
    Batch.objects.filter(pk=batch.pk).update(expires_at=end, trial_days=None)
    conversion = TrialConversion.objects.create(
        batch=batch,
        customer_id=batch.customer_id,
        sku=batch.sku,
        license=key,
        trial_days=trial_days,
        term_days=term,
        previous_expires_at=previous,
        expires_at=end,
        converted_at=now,
        units=units,
        unit_price=batch.unit_price,
        currency=batch.currency,
    )
    event_emit(
        Event.Type.LICENSE_TRIAL_CONVERTED,
        customer_id=batch.customer_id,
        data=license_data(key)
        | {
            "batch_id": batch.id,
            "expires_at": unix(end),
            "term_days": term,
            "trial_days": trial_days,
            "units": units,
            "units_purchased": batch.units_purchased,
        },
    )
    return ConversionResult(conversion, replayed=False)
