"""``python manage.py send_reminders``: the payment reminders that are due, once (the
webhook worker runs the same every minute)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from billing.reminders import level_name, reminders_send


class Command(BaseCommand):
    help = (
        "Write invoice.overdue for newly overdue invoices and e-mail the payment reminders "
        "due by SVC_REMINDER_DAYS (first, second, final), each once per invoice."
    )

    def handle(self, *args, **options):
        run = reminders_send()
        schedule = settings.SVC_REMINDER_DAYS
        for number, level in run.sent:
            self.stdout.write(f"sent the {level_name(level, schedule)} of {number}")
        for number in run.no_address:
            self.stdout.write(f"{number}: no e-mail address (the customer's contact); not sent")
        for number in run.failed:
            self.stderr.write(f"{number}: the reminder could not be sent; the next run retries")
        self.stdout.write(
            f"send_reminders: {len(run.sent)} sent, {run.overdue_events} newly overdue"
        )
