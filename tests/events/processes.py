"""The events app's commands as production runs them, each its own process on the test
database: ``manage.py deliver_events`` (the webhook worker) and ``manage.py events_scan``,
with webhooks to loopback over http allowed, as the test receivers are."""

from __future__ import annotations

import os
import signal
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
        # SIGABRT writes every thread's stack to the log: what a worker that will not stop
        # is doing (stop_all).
        "PYTHONFAULTHANDLER": "1",
    }
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", *arguments], cwd=conftest.REPO, env=environment,
            stdout=out, stderr=out,
        )  # fmt: skip
    process.log = log
    return process


def stop_all(processes: list[subprocess.Popen], within: float = 30) -> None:
    """SIGTERM each of ``processes`` still running, as a supervisor stops them, and wait
    ``within`` seconds for each. One still running then fails the test with its threads'
    stacks (SIGABRT, PYTHONFAULTHANDLER) and the end of its log."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    stuck = []
    for process in running:
        try:
            process.wait(within)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            process.wait(10)
            stuck.append(f"{' '.join(process.args[2:])}:\n{process.log.read_text()[-6000:]}")
    assert not stuck, f"not stopped {within:g} s after SIGTERM:\n" + "\n".join(stuck)


def worker(log: Path, *, webhook_timeout: float = 2) -> subprocess.Popen:
    """A webhook worker polling every 50 ms, without the scheduled pass."""
    return manage(
        log, "deliver_events", "--poll", "0.05", "--scan-every", "0",
        webhook_timeout=webhook_timeout,
    )  # fmt: skip
