"""Trials (issue 42): the one place that says what a trial is, for the activation, the
refresh, billing and every page that shows one.

A **trial batch** is a batch whose ``trial_days`` is set: issued so (``trial_days`` on
the batch), or of a trial SKU (the SKU's ``trial_days``, its batches' default). Its
cameras activate as any batch's, and each one's **unit licence runs ``trial_days`` from
its own first activation** (not from the batch's issue), with no grace, and carries the
additive claim ``"trial": true``. Its activation takes a seat and is recorded with
``trial`` set: it is never billed as an activation (:mod:`billing.ledger` and the
activation rollups leave it out). A device (by fingerprint) trials a SKU once
(:class:`~licensing.models.TrialUse`): a second trial activation of that SKU on another
batch is refused with :class:`TrialUsed` (409, code ``TRIAL_USED``); re-activating on
the same batch is a re-activation, the same licence again.

**Converting** the batch (:mod:`licensing.services.trials`: an operator in the console,
``svcctl convert-trial`` or the API, or the customer buying it in the portal) makes it a
paid batch at once: ``trial_days`` is emptied (the
:class:`~licensing.models.TrialConversion` keeps it), the batch and its key run the paid
term from the conversion, and each trial unit in service is re-signed in the same
transaction as a paid licence to that end, without the trial mark and with the SKU's
grace. Its camera picks the new token up at its next sync (``GET /v1/license``, the
refresh of a renewal); nothing is re-activated. The conversion is billed once, as a
``trial_conversion`` line: the trial units activated and not revoked at conversion x the
batch's unit price. An activation after the conversion is a paid one.

A trial licence that reaches its end stops analytics on the camera as any expiry does
(the camera applies ``exp`` and ``grace_days`` 0: devices.term); a conversion after
that restores them at the next sync.

While a unit is on trial its licence's own end is its end: a renewal's lazy re-signing
of units to their batch's end (``licensing.services.renewals``) never applies to it
(:func:`batch_end_for_unit`). A trial batch is not renewed; it is converted.
"""

from __future__ import annotations

import datetime as dt

from config.errors import Conflict
from devices.errors import Code

TRIAL_CLAIM = "trial"
TRIAL_GRACE_DAYS = 0  # a trial ends at its end: no grace period after it


class TrialUsed(Conflict):
    """This device already trialled this SKU (on another batch): 409 with ``code``
    ``TRIAL_USED``, which the device module raises as a LicenseError of that code."""

    code = Code.TRIAL_USED


def trial_used(*, sku: str, device_id: str, batch_id: str, used_on: str) -> TrialUsed:
    return TrialUsed(
        f"device {device_id} already had its trial of {sku} (on batch {used_on}); a device "
        f"trials a SKU once, so batch {batch_id} cannot start another: activate it on a paid "
        f"batch of {sku}, or ask for the trial batch {used_on} to be converted"
    )


def trial_end(activated_at: dt.datetime, trial_days: int) -> dt.datetime:
    """The end of a trial unit activated at ``activated_at``."""
    return activated_at + dt.timedelta(days=trial_days)


def batch_end_for_unit(
    *, unit_trial: bool, batch_expires_at: dt.datetime | None
) -> dt.datetime | None:
    """The batch end a unit follows (its licence is re-signed to it when behind): its
    batch's, but None while the unit is on trial, whose end is its own."""
    return None if unit_trial else batch_expires_at


def trial_state(trial_days: int | None, converted_at: dt.datetime | None) -> str:
    """A batch's trial state in words: ``trial`` (not converted), ``converted`` or
    ``paid`` (never a trial)."""
    if trial_days is not None:
        return "trial"
    return "converted" if converted_at is not None else "paid"


class NotATrial(Conflict):
    """The batch is not a trial (never was, or is converted already with other terms)."""
