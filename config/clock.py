"""The server's clock: the one ``now()`` the services call (house style: time is
injectable on the server too).

In production it is :func:`django.utils.timezone.now`. A test moves it by an offset in
seconds kept in the file named by ``SVC_TEST_CLOCK_FILE`` (:func:`shift_to` writes it):
in process through the ``settings`` fixture, and in a live server, whose gunicorn
workers cannot be patched from the test, by the same file, which every worker reads on
every call (a few microseconds, and only when the setting is set).

``SVC_TEST_CLOCK_FILE`` is refused at start-up unless the database is a test database
(``config.settings``): a production server cannot run with a moved clock by accident.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from django.conf import settings
from django.utils import timezone


def offset_seconds() -> float:
    """The test offset in seconds: 0 unless ``SVC_TEST_CLOCK_FILE`` is set and its file
    holds a number."""
    path = getattr(settings, "SVC_TEST_CLOCK_FILE", "")
    if not path:
        return 0.0
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        return 0.0
    return float(text) if text else 0.0


def now() -> dt.datetime:
    """The current time (aware, UTC), moved by the test offset when one is set."""
    moment = timezone.now()
    offset = offset_seconds()
    return moment + dt.timedelta(seconds=offset) if offset else moment


def shift_to(path: str | Path, seconds: float) -> None:
    """Write ``seconds`` as the clock file's offset, atomically (a worker reading it at
    the same moment sees the old number or the new one, never half of one)."""
    target = Path(path)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temporary.write_text(f"{float(seconds)!r}\n")
    os.replace(temporary, target)
