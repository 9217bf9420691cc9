"""The server's clock: the one ``now()`` the services call (house style: time is
injectable on the server too).

In production it is :func:`django.utils.timezone.now`. A test moves it by an offset in
seconds, or stops it at one moment, kept in the file named by ``SVC_TEST_CLOCK_FILE``
(:func:`shift_to` and :func:`stop_at` write it):
in process through the ``settings`` fixture, and in a live server, whose gunicorn
workers cannot be patched from the test, by the same file, which every worker reads on
every call (a few microseconds, and only when the setting is set).

``SVC_TEST_CLOCK_FILE`` is refused at start-up unless the database is a test database
(``config.settings``): a production server cannot run with a moved clock by accident.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.utils import timezone

_STOPPED = "="  # the file's mark of a stopped clock: "=<Unix seconds>"
# A moment this thread's code runs at (:func:`running_at`), for the demo history.
_AT: contextvars.ContextVar[dt.datetime | None] = contextvars.ContextVar(
    "svc_clock_at", default=None
)


def _clock_file() -> str:
    path = getattr(settings, "SVC_TEST_CLOCK_FILE", "")
    if not path:
        return ""
    try:
        return Path(path).read_text().strip()
    except FileNotFoundError:
        return ""


def offset_seconds() -> float:
    """The test offset in seconds: 0 unless ``SVC_TEST_CLOCK_FILE`` is set and its file
    holds a number (or a stopped moment, as its distance from now)."""
    text = _clock_file()
    if text.startswith(_STOPPED):
        return float(text[1:]) - timezone.now().timestamp()
    return float(text) if text else 0.0


def now() -> dt.datetime:
    """The current time (aware, UTC), moved by the test offset when one is set, or the
    moment a test stopped it at, or the one :func:`running_at` holds."""
    held = _AT.get()
    if held is not None:
        return held
    text = _clock_file()
    if not text:
        return timezone.now()
    if text.startswith(_STOPPED):
        return dt.datetime.fromtimestamp(float(text[1:]), tz=dt.UTC)
    return timezone.now() + dt.timedelta(seconds=float(text))


def _write(path: str | Path, text: str) -> None:
    # Atomically: a worker reading it at the same moment sees the old text or the new
    # one, never half of one.
    target = Path(path)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temporary.write_text(f"{text}\n")
    os.replace(temporary, target)


def shift_to(path: str | Path, seconds: float) -> None:
    """Write ``seconds`` as the clock file's offset from the real time."""
    _write(path, repr(float(seconds)))


def stop_at(path: str | Path, moment: dt.datetime) -> None:
    """Stop the clock at ``moment`` (aware): every read returns it until the file changes."""
    _write(path, f"{_STOPPED}{moment.timestamp()!r}")


@contextlib.contextmanager
def running_at(moment: dt.datetime) -> Iterator[None]:
    """Run the block as if it were ``moment`` (aware): every :func:`now` in this thread
    (and context) returns it, nothing else's clock moves. ``manage.py demo`` writes its
    past 90 days so, through the very services real traffic calls; the block's rows
    carry the moment as their time, as a row written then would."""
    if moment.tzinfo is None:
        raise ValueError("running_at needs an aware moment")
    token = _AT.set(moment.astimezone(dt.UTC))
    try:
        yield
    finally:
        _AT.reset(token)
