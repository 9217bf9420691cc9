"""The events app's commands as production runs them, each its own process on the test
database: ``manage.py deliver_events`` (the webhook worker) and ``manage.py events_scan``,
with webhooks to loopback over http allowed, as the test receivers are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests import conftest


def manage(log: Path, *arguments: str, webhook_timeout: float = 2) -> subprocess.Popen:
    """``manage.py *arguments``, its output appended to ``log``."""
    environment = {
        **os.environ,
        "DATABASE_URL": conftest.test_database_url(),
        "SVC_SECRET_KEY": settings.SECRET_KEY,
        "SVC_SIGNING_KEY_FILE": str(settings.SVC_SIGNING_KEY_FILE),
        "SVC_DEBUG": "0",
        "SVC_SSL_REDIRECT": "0",
        "SVC_WEBHOOK_ALLOW_HTTP": "1",
        "SVC_WEBHOOK_ALLOW_PRIVATE": "1",
        "SVC_WEBHOOK_TIMEOUT": f"{webhook_timeout:g}",
        "SVC_LOG_LEVEL": "WARNING",
    }
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", *arguments], cwd=conftest.REPO, env=environment,
            stdout=out, stderr=out,
        )  # fmt: skip


def worker(log: Path, *, webhook_timeout: float = 2) -> subprocess.Popen:
    """A webhook worker polling every 50 ms, without the scheduled pass."""
    return manage(
        log, "deliver_events", "--poll", "0.05", "--scan-every", "0",
        webhook_timeout=webhook_timeout,
    )  # fmt: skip
