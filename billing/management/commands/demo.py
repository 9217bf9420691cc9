"""``python manage.py demo``: 90 days of demo history on an empty database (billing.demo)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.demo import demo_create
from config.errors import ServiceError


class Command(BaseCommand):
    help = (
        "Fill an empty database with a demo history: four customers (DE, FR, JP, KW; EUR, "
        "JPY, KWD), batches, activations and usage over the past 90 days by the server's "
        "clock, three invoices each and one credit note. Refuses a database holding "
        "customers it did not make; a second run finds the demo there and writes nothing."
    )

    def handle(self, *args, **options):
        try:
            result = demo_create(progress=lambda line: self.stdout.write(line))
        except ServiceError as exc:
            raise CommandError(exc.detail) from None
        if result.created:
            self.stdout.write(
                "open the console's invoices (/admin/billing/invoice/) or a customer's page "
                "to see them"
            )
