"""The one home of billing's limits and day arithmetic.

Usage records carry Unix seconds; rollups, invoice periods and partitions are UTC days
(and months). Every conversion between them, and every bound a request or a period must
respect, is defined here once and imported wherever it is needed.
"""

from __future__ import annotations

import datetime as dt

from config import clock
from devices.bounds import LAST_SECOND as MAX_TIMESTAMP
from devices.bounds import MAX_COUNTER
from devices.bounds import MAX_RECORDS_PER_UPLOAD as MAX_RECORDS_PER_CALL

# The device-id limit is the licensing rule (a device id is bound into every unit
# licence); billing checks uploads against the very same number.
from svccore.claims import DEVICE_ID_MAX

# Time units and conversions are svccore's; billing's index of limits names them too.
from svccore.timeunits import DAY, day_number, unix

__all__ = [
    "DAY",
    "DEVICE_ID_MAX",
    "EPOCH",
    "FUTURE_LEEWAY_SECONDS",
    "LIFE_LEEWAY_SECONDS",
    "MAX_COUNTER",
    "MAX_RECORDS_PER_CALL",
    "MAX_TIMESTAMP",
    "PERIOD_DAYS_MAX",
    "date_of",
    "day_number",
    "is_midnight",
    "midnight",
    "month_start",
    "next_month",
    "now",
    "start_of_day",
    "unix",
]

EPOCH = dt.date(1970, 1, 1)
# A record must lie within its licence's life (contract §7): it may start at most this
# long before the licence was issued (a unit licence: activated), and end at most this
# long after the server's now.
LIFE_LEEWAY_SECONDS = 3600
FUTURE_LEEWAY_SECONDS = 300
# MAX_COUNTER and MAX_TIMESTAMP (devices.bounds, shared with the device module) keep every
# value and every daily sum inside a 64-bit column and every timestamp inside a calendar
# date: far beyond what a camera can count in one period.
# The longest rating window of GET /v1/admin/invoice and the longest first period.
PERIOD_DAYS_MAX = 3660


def now() -> dt.datetime:
    """The clock every billing service reads (aware, UTC): the server's clock, which
    tests move (``config.clock``)."""
    return clock.now()


def date_of(day: int) -> dt.date:
    return EPOCH + dt.timedelta(days=day)


def midnight(day: dt.date) -> dt.datetime:
    """00:00 UTC of ``day``."""
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def start_of_day(moment: dt.datetime | None = None) -> dt.datetime:
    """00:00 UTC of the day of ``moment`` (default: today)."""
    return midnight((moment or now()).astimezone(dt.UTC).date())


def is_midnight(moment: dt.datetime) -> bool:
    return moment == start_of_day(moment)


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def next_month(day: dt.date) -> dt.date:
    """The first day of the month after ``day``'s."""
    return (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
