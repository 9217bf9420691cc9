"""The checks only ``manage.py reconcile --deep`` runs
(:func:`billing.reconciliation.ledger_reconcile` with ``deep=True``; the daily check
leaves them out): the activation rollups against the activations they count, and every
renewal against its own term (``renewal_end``), its audit entry and the ledger entry
that billed it (a renewal moved under the maintenance bypass shows here), and every trial
conversion against its batch's trial activations, audit entry and ledger entry. Every invoice
rated again is :mod:`billing.document_checks`' part of the deep check.
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate

from audit.models import AuditEntry
from billing.document_checks import limited
from billing.models import LedgerEntry
from billing.selectors import BILLABLE_ACTIVATION, TRANSFER_ACTIVATION, TRIAL_ACTIVATION
from licensing.models import Activation, ActivationDaily, Renewal, TrialConversion
from licensing.services.renewals import renewal_end
from svccore import dates

RENEW_ACTION = "license.renew"
# A renewal's audit entry is written as the renewal commits: seconds apart, never more.
RENEWAL_AUDIT_SECONDS = 300


def deep_problems(customer_id: str | None) -> list[str]:
    """What the daily check leaves out: activation rollups against the activations,
    every renewal against its own term, its audit entry and the ledger, and every trial
    conversion against its batch's trial activations, its audit entry and the ledger."""
    return (
        limited(_activation_rollup_problems(customer_id), "activation rollup differences")
        + _renewal_term_problems(customer_id)
        + _conversion_problems(customer_id)
    )


CONVERT_ACTION = "batch.convert_trial"


def _conversion_problems(customer_id: str | None) -> list[str]:
    """Every trial conversion against what the bypass could have moved: its units are at
    most the trial activations of its batch made before it (a trial unit revoked since
    was not billed; one revoked after still counts), its time is its audit entry's, and
    the document that billed it covers its time."""
    scope = Q(customer_id=customer_id) if customer_id else Q()
    conversions = list(TrialConversion.objects.filter(scope).order_by("id"))
    if not conversions:
        return []
    trials = dict(
        Activation.objects.filter(trial=True, batch_id__in=[c.batch_id for c in conversions])
        .values("batch_id")
        .annotate(n=Count("id"))
        .values_list("batch_id", "n")
    )
    audited: dict[str, dt.datetime] = {}
    for target, at in AuditEntry.objects.filter(
        action=CONVERT_ACTION,
        result=AuditEntry.Result.OK,
        target__in=[c.batch_id for c in conversions],
        detail__replayed=False,
    ).values_list("target", "at"):
        audited[target] = min(audited.get(target, at), at)
    billed = {
        conversion_id: (document, start, end, late)
        for conversion_id, document, start, end, late in LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.TRIAL_CONVERSION, quantity__gt=0, conversion__in=conversions
        ).values_list(
            "conversion_id",
            "document_id",
            "document__period_start",
            "document__period_end",
            "late",
        )
    }
    problems = []
    for c in conversions:
        name = f"trial conversion {c.pk} of {c.batch_id}"
        if c.units > trials.get(c.batch_id, 0):
            problems.append(
                f"{name}: bills {c.units} units; the batch has {trials.get(c.batch_id, 0)} "
                "trial activations"
            )
        at = audited.get(c.batch_id)
        if at is not None and abs((at - c.converted_at).total_seconds()) > RENEWAL_AUDIT_SECONDS:
            problems.append(
                f"{name}: converted at {dates.precise(c.converted_at)}, its audit entry "
                f"({CONVERT_ACTION}) was written at {dates.precise(at)}"
            )
        if c.pk in billed:
            document, start, stop, late = billed[c.pk]
            if c.converted_at >= stop or (not late and c.converted_at < start):
                problems.append(
                    f"{name}: converted at {dates.precise(c.converted_at)}, billed "
                    f"{'late ' if late else ''}on {document} for {dates.period(start, stop)}"
                )
    return limited(problems, "trial conversion differences")


def _renewal_audit_times(renewals: list[Renewal]) -> dict[str, dt.datetime]:
    """The time of the first successful ``license.renew`` audit entry of each
    renewal's idempotency key (the audit log is append-only on PostgreSQL)."""
    targets = {r.batch_id or r.license_id for r in renewals}
    times: dict[str, dt.datetime] = {}
    entries = AuditEntry.objects.filter(
        action=RENEW_ACTION, result=AuditEntry.Result.OK, target__in=targets
    ).values_list("detail", "at")
    for detail, at in entries:
        key = detail.get("idempotency_key") if isinstance(detail, dict) else None
        if isinstance(key, str):
            key = key.strip()
            times[key] = min(times.get(key, at), at)
    return times


def _renewal_term_problems(customer_id: str | None) -> list[str]:
    """Every renewal against what it cannot be told apart from without the bypass
    (issue 38 item 4: a renewal moved under ``billing.maintenance``): its end follows
    from its previous end, term and time (``renewal_end``), its previous end is the end
    its predecessor gave, its time is its audit entry's, and the document that billed
    it covers its time."""
    scope = Q(customer_id=customer_id) if customer_id else Q()
    renewals = list(Renewal.objects.filter(scope).select_related("license").order_by("id"))
    if not renewals:
        return []
    audited = _renewal_audit_times(renewals)
    billed = {
        renewal_id: (document, start, end, late)
        for renewal_id, document, start, end, late in LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.RENEWAL, quantity__gt=0, renewal__in=renewals
        ).values_list(
            "renewal_id", "document_id", "document__period_start", "document__period_end", "late"
        )
    }
    problems = []
    last_end: dict[str, dt.datetime] = {}
    for r in renewals:
        name = f"renewal {r.pk} of {r.batch_id or r.license_id}"
        basis, end = renewal_end(
            expires_at=r.previous_expires_at,
            grace_days=r.license.grace_days,
            term_days=r.term_days,
            now=r.renewed_at,
        )
        if (basis, end) != (r.basis, r.expires_at):
            problems.append(
                f"{name}: ends {dates.precise(r.expires_at)} ({r.basis}); renewed at "
                f"{dates.precise(r.renewed_at)} for {r.term_days} days from "
                f"{dates.precise(r.previous_expires_at)} it ends {dates.precise(end)} "
                f"({basis})"
            )
        before = last_end.get(r.license_id)
        if before is not None and before != r.previous_expires_at:
            problems.append(
                f"{name}: continues from {dates.precise(r.previous_expires_at)}, the "
                f"renewal before it ended the term at {dates.precise(before)}"
            )
        last_end[r.license_id] = r.expires_at
        at = audited.get(r.idempotency_key)
        if at is not None and abs((at - r.renewed_at).total_seconds()) > RENEWAL_AUDIT_SECONDS:
            problems.append(
                f"{name}: renewed at {dates.precise(r.renewed_at)}, its audit entry "
                f"({RENEW_ACTION}) was written at {dates.precise(at)}"
            )
        if r.pk in billed:
            document, start, stop, late = billed[r.pk]
            if r.renewed_at >= stop or (not late and r.renewed_at < start):
                problems.append(
                    f"{name}: renewed at {dates.precise(r.renewed_at)}, billed "
                    f"{'late ' if late else ''}on {document} for {dates.period(start, stop)}"
                )
    return limited(problems, "renewal differences")


def _activation_rollups(queryset, billable, transfers, trials) -> dict:
    rows = (
        queryset.values_list("batch_id", "day")
        .annotate(billable=billable, transfers=transfers, trials=trials)
        .order_by()
    )
    return {
        (batch_id, day): (int(b or 0), int(t or 0), int(r or 0)) for batch_id, day, b, t, r in rows
    }


def _activation_rollup_problems(customer_id: str | None) -> list[str]:
    """Daily activation rollups against the activations they count (a full read)."""
    scope = Q(batch__customer_id=customer_id) if customer_id else Q()
    counted = _activation_rollups(
        Activation.objects.filter(scope).annotate(day=TruncDate("activated_at", tzinfo=dt.UTC)),
        Count("id", filter=BILLABLE_ACTIVATION),
        Count("id", filter=TRANSFER_ACTIVATION),
        Count("id", filter=TRIAL_ACTIVATION),
    )
    rolled = _activation_rollups(
        ActivationDaily.objects.filter(scope), Sum("activations"), Sum("transfers"), Sum("trials")
    )
    problems = []
    for batch_id, day in sorted(set(counted) | set(rolled)):
        have = rolled.get((batch_id, day), (0, 0, 0))
        real = counted.get((batch_id, day), (0, 0, 0))
        if have != real:
            problems.append(
                f"activation rollup of {batch_id} on {day} counts {have[0]} billable / "
                f"{have[1]} transfers / {have[2]} trials, the activations hold {real[0]} / "
                f"{real[1]} / {real[2]}"
            )
    return problems
