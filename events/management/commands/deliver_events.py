"""The webhook worker: ``python manage.py deliver_events``.

Runs until stopped (SIGTERM or SIGINT end it after the attempt in hand), delivering
every due endpoint's next event and, every ``--scan-every`` seconds, running the
scheduled pass (expiry, grace, batch and quota events) and sending the e-mail alerts
that are due. Start one or more on each node:
they share the work through the database (a lease per endpoint), and one killed
mid-delivery loses nothing (the lease ends and another sends the event again)."""

from __future__ import annotations

import signal
import time

from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections, connections

from config.display import counted
from events import delivery
from events.alerts import alerts_send
from events.scan import events_scan


class Command(BaseCommand):
    help = (
        "Deliver webhook events (in order per endpoint, at least once) and run the "
        "scheduled event pass; runs until stopped, or once with --once."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--once",
            action="store_true",
            help="Run one scan, deliver what is due now, and exit (cron, tests).",
        )
        parser.add_argument(
            "--poll",
            type=float,
            default=1.0,
            help="Seconds to wait when nothing is due (default 1).",
        )
        parser.add_argument(
            "--scan-every",
            type=float,
            default=60.0,
            help="Seconds between scheduled passes (default 60; 0: never).",
        )

    def handle(self, *args, once: bool, poll: float, scan_every: float, **options):
        self.stopping = False

        def stop(signum, frame):
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        last_scan = float("-inf")
        delivered = failed = 0
        while not self.stopping:
            close_old_connections()  # a connection the database dropped is replaced
            try:
                delivered, failed, last_scan = self._round(
                    once, poll, scan_every, delivered, failed, last_scan
                )
            except DatabaseError as problem:
                # The database is away (restart, failover): nothing is lost, the leases
                # and positions are in it. Wait and try again rather than exit.
                name = type(problem).__name__
                self.stderr.write(f"deliver_events: database unavailable ({name}); retrying")
                connections.close_all()
                if once:
                    break
                time.sleep(max(poll, 1.0))
                continue
            if once:
                break
        self.stdout.write(f"deliver_events: {delivered} delivered, {failed} failed attempts")

    def _round(self, once, poll, scan_every, delivered, failed, last_scan):
        """One pass: the scheduled pass when due, then every due delivery; sleeps when
        there was nothing to send. Returns the updated counters."""
        if scan_every and time.monotonic() - last_scan >= scan_every:
            written = events_scan().written
            mailed = alerts_send()
            last_scan = time.monotonic()
            if written:
                self.stdout.write(
                    "scan: " + ", ".join(f"{n} {t}" for t, n in sorted(written.items()))
                )
            if mailed:
                self.stdout.write(f"alerts: {counted(mailed, 'digest')} sent")
        worked = False
        while not self.stopping:
            outcome = delivery.deliver_one()
            if outcome is None:
                break
            if outcome is delivery.NOTHING_TO_SEND:
                continue
            worked = True
            if outcome.ok:
                delivered += 1
            else:
                failed += 1
        if not worked and not once:
            time.sleep(poll)
        return delivered, failed, last_scan
