"""``python manage.py events_scan``: the scheduled event pass, once (the webhook worker
also runs it every minute). Safe on several nodes at once: each event is written once."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from events.scan import events_scan


class Command(BaseCommand):
    help = (
        "Write the due expiry (30, 7, 1 days), grace, batch-threshold (80/95/100 %) and "
        "quota-threshold (80/100 %) events not yet written; prints what it wrote."
    )

    def handle(self, *args, **options):
        written = events_scan().written
        if not written:
            self.stdout.write("events_scan: nothing due")
            return
        for type, count in sorted(written.items()):
            self.stdout.write(f"events_scan: {count} {type}")
