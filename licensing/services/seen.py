"""Last seen (issue 42): when a unit last fetched its signed status, uploaded usage or
activated again, written cheaply.

A unit's ``Activation.last_seen_at`` moves by one conditional UPDATE
(:data:`SEEN_SQL`: only when it is empty or older than ``SVC_LAST_SEEN_MINUTES``), run
after the request's own work, never inside its critical write. So the row changes at
most once per unit per N minutes, whichever process the unit reaches. Each process also
remembers when it last sent that UPDATE for a unit (by the server's clock), and sends
none for N minutes after: in the common case (a unit that called within N minutes) a
request costs no query at all, and at most one UPDATE per unit per process per N
minutes otherwise (a no-op when another process wrote it since).

A failure to record the time never fails the answer: it is logged and dropped (the
unit is seen again at its next call).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from django.conf import settings
from django.db import DatabaseError, connection

from config import clock

log = logging.getLogger(__name__)

# By licence id (one activation per unit licence, the unique license_id index) and the
# device the request named: the status fetch is public, and a wrong pair moves nothing.
SEEN_SQL = """
UPDATE licensing_activation SET last_seen_at = %s
WHERE license_id = %s AND device_id = %s AND (last_seen_at IS NULL OR last_seen_at < %s)
"""
# Units remembered per process (a few hundred bytes each); beyond, the memory starts
# over. It only has to span one window: a unit that calls less often than every
# SVC_LAST_SEEN_MINUTES is written at each call anyway, remembered or not.
UNITS_HELD = 10_000

_sent: dict[tuple[str, str], float] = {}  # (licence, device) -> Unix seconds
_sent_lock = threading.Lock()


def interval() -> dt.timedelta:
    return dt.timedelta(minutes=settings.SVC_LAST_SEEN_MINUTES)


def _due(key: tuple[str, str], now: dt.datetime) -> bool:
    """Whether this process should send the UPDATE for ``key`` now, and if so, note it
    as sent (so that concurrent requests of one unit send it once)."""
    moment = now.timestamp()
    window = settings.SVC_LAST_SEEN_MINUTES * 60
    last = _sent.get(key)  # the common case, read without the lock (a dict read is atomic)
    if last is not None and 0 <= moment - last < window:
        return False
    with _sent_lock:
        last = _sent.get(key)
        if last is not None and 0 <= moment - last < window:
            return False
        if len(_sent) >= UNITS_HELD:
            _sent.clear()
        _sent[key] = moment
        return True


def unit_seen_noted(*, license_id: str, device_id: str, now: dt.datetime) -> None:
    """Remember that the unit was seen at ``now`` and its time written by the caller (a
    new activation writes last_seen_at in its own row)."""
    with _sent_lock:
        if len(_sent) >= UNITS_HELD:
            _sent.clear()
        _sent[license_id, device_id] = now.timestamp()


def unit_seen(*, license_id: str, device_id: str) -> bool:
    """Record that the unit of ``license_id`` bound to ``device_id`` was seen now; True
    when an UPDATE was sent (not necessarily a row changed).

    No query when this process sent one for the unit within SVC_LAST_SEEN_MINUTES; the
    three calls of one device's sync (usage, status, ...) share that. Licences with no
    activation (direct, offline-minted) match no row."""
    now = clock.now()
    if not _due((license_id, device_id), now):
        return False
    try:
        with connection.cursor() as cursor:
            cursor.execute(SEEN_SQL, [now, license_id, device_id, now - interval()])
    except DatabaseError:
        # After the answer's own work: a unit not marked seen is seen at its next call.
        log.warning("last seen of %s not recorded", license_id, exc_info=True)
        with _sent_lock:
            _sent.pop((license_id, device_id), None)
    return True


def forget() -> None:
    """Forget what this process sent (tests: each starts with no unit remembered)."""
    with _sent_lock:
        _sent.clear()
