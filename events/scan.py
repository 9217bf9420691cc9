"""The scheduled pass (``manage.py events_scan``; the webhook worker runs it every
minute): the events no request causes - a term about to end, a grace period begun, a
batch or a device quota filling up. Each is written once, whatever the number of passes
and of nodes running them at the same time: its ``once_key`` is unique, and a second
write of it writes nothing.

The outbox sits below the apps whose rows the pass reads, so each of those apps
registers its own part with :func:`scan_pass` (``licensing.scan``: terms and batches;
``billing.scan``: usage quotas; imported by their ``AppConfig.ready``, in the order of
``INSTALLED_APPS``), and :func:`events_scan` runs them, each in its own transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from config import clock
from events.models import Event
from events.services import event_emit


@dataclass
class ScanResult:
    written: dict[str, int] = field(default_factory=dict)

    def count(self, type: str) -> None:
        self.written[type] = self.written.get(type, 0) + 1


ScanPass = Callable[[ScanResult, dt.datetime], None]
_PASSES: list[ScanPass] = []


def scan_pass(run: ScanPass) -> ScanPass:
    """Register ``run(result, now)`` as a part of the scheduled pass (once, however
    often its module is imported)."""
    if run not in _PASSES:
        _PASSES.append(run)
    return run


def event_once(
    result: ScanResult, type: str, *, customer_id: str, data: dict, once_key: str
) -> None:
    """Write the event named ``once_key`` unless it is written already, and count it."""
    if Event.objects.filter(once_key=once_key).exists():
        return
    event_emit(type, customer_id=customer_id, data=data, once_key=once_key)
    result.count(type)


def thresholds_crossed(percents: tuple[int, ...], used: int, total: int) -> list[int]:
    """The thresholds ``used`` of ``total`` has reached (whole-number maths)."""
    return [percent for percent in percents if used * 100 >= total * percent]


def events_scan(now: dt.datetime | None = None) -> ScanResult:
    """Write the expiry, grace, batch and quota events that are due and not yet written."""
    now = now or clock.now()
    result = ScanResult()
    for run in _PASSES:
        with transaction.atomic():
            run(result, now)
    return result
