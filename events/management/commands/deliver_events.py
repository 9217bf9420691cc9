"""The webhook worker: ``python manage.py deliver_events``.

Runs until stopped (SIGTERM or SIGINT end it after the attempts in hand), delivering
every due endpoint's next event from ``--concurrency`` sender threads (several endpoints
at once, one attempt per endpoint at a time) and, every ``--scan-every`` seconds,
running the scheduled pass (expiry, grace, batch and quota events) and sending the
e-mail alerts that are due. Start one or more on each node:
they share the work through the database (a lease per endpoint), and one killed
mid-delivery loses nothing (the lease ends and another sends the event again)."""

from __future__ import annotations

import signal
import threading
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections, connection, connections

from config.admin.display import counted
from events import delivery
from events.alerts import alerts_send
from events.scan import events_scan

AWAY = object()  # what a step returns when the database was away


class Command(BaseCommand):
    help = (
        "Deliver webhook events (in order per endpoint, at least once, to several "
        "endpoints at once) and run the scheduled event pass; runs until stopped, or once "
        "with --once."
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
        parser.add_argument(
            "--concurrency",
            type=int,
            default=4,
            help="Endpoints sent to at once (default 4): an endpoint that answers slowly "
            "holds one of them for at most SVC_WEBHOOK_TIMEOUT, the others go on.",
        )

    def handle(self, *args, once: bool, poll: float, scan_every: float, concurrency: int,
               **options):  # fmt: skip
        if not 1 <= concurrency <= 64:
            raise CommandError(f"--concurrency must be from 1 to 64, not {concurrency}")
        self.stopping = threading.Event()  # set by this thread when asked to stop
        self.asked_to_stop = False
        self.counts = {"delivered": 0, "failed": 0}
        self.counts_lock = threading.Lock()
        signal.signal(signal.SIGTERM, self._ask_to_stop)
        signal.signal(signal.SIGINT, self._ask_to_stop)
        self._guarded(lambda: self._scan(scan_every), once, poll)
        senders = [
            threading.Thread(target=self._send, args=(once, poll), name=f"sender-{n}")
            for n in range(concurrency)
        ]
        for sender in senders:
            sender.start()
        last_scan = time.monotonic()
        while not once and not self.asked_to_stop:
            time.sleep(min(poll, 1.0))
            if scan_every and time.monotonic() - last_scan >= scan_every:
                self._guarded(lambda: self._scan(scan_every), once, poll)
                last_scan = time.monotonic()
        self.stopping.set()
        for sender in senders:
            sender.join()
        delivered, failed = self.counts["delivered"], self.counts["failed"]
        self.stdout.write(f"deliver_events: {delivered} delivered, {failed} failed attempts")

    def _ask_to_stop(self, signum, frame) -> None:
        """SIGTERM, SIGINT: a flag, read by the main loop within ``--poll`` (1 s at most).
        A signal handler runs on the main thread between two of its instructions, maybe
        while it holds a lock (Event.set would take the lock its Event.wait holds, and
        wait for itself for ever), so it takes none."""
        self.asked_to_stop = True

    def _guarded(self, work, once: bool, poll: float):
        """``work()`` on this thread's connection; AWAY when the database was away
        (restart, failover): nothing is lost, the leases and positions are in it."""
        close_old_connections()  # a connection the database dropped is replaced
        try:
            return work()
        except DatabaseError as problem:
            name = type(problem).__name__
            self.stderr.write(f"deliver_events: database unavailable ({name}); retrying")
            connection.close()
            if not once:
                self.stopping.wait(max(poll, 1.0))
            return AWAY

    def _scan(self, scan_every: float) -> None:
        """The scheduled pass and the e-mail alerts that are due."""
        if not scan_every:
            return
        written = events_scan().written
        mailed = alerts_send()
        if written:
            self.stdout.write("scan: " + ", ".join(f"{n} {t}" for t, n in sorted(written.items())))
        if mailed:
            self.stdout.write(f"alerts: {counted(mailed, 'digest')} sent")

    def _send(self, once: bool, poll: float) -> None:
        """One sender: claims a due endpoint, sends it its next event, and again;
        waits ``poll`` when none is due (with --once: ends)."""
        try:
            while not self.stopping.is_set():
                outcome = self._guarded(delivery.deliver_one, once, poll)
                if outcome is None or outcome is AWAY:
                    if once:
                        return
                    if outcome is None:
                        self.stopping.wait(poll)
                elif outcome is not delivery.NOTHING_TO_SEND:
                    with self.counts_lock:
                        self.counts["delivered" if outcome.ok else "failed"] += 1
        finally:
            connections.close_all()
