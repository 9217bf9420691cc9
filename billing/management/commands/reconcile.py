"""``python manage.py reconcile [--customer ID] [--deep]``"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.reconciliation import ledger_check_result, ledger_reconcile
from billing.services import ledger_check_run
from customers.models import Customer

_COLUMNS = (
    ("customer", 18), ("SKU", 15), ("stored", 14), ("billed", 14), ("waiting", 12),
    ("unbillable", 11), ("activ. stored", 13), ("billed", 7), ("direct stored", 13),
    ("billed", 7), ("transfers", 9), ("renewed units", 13), ("billed", 7),
)  # fmt: skip


def _row(values) -> str:
    cells = []
    for (_, width), value in zip(_COLUMNS, values, strict=True):
        text = f"{value:,}" if isinstance(value, int) else str(value)
        cells.append(text.ljust(width) if len(cells) < 2 else text.rjust(width))
    return " ".join(cells)


class Command(BaseCommand):
    help = (
        "Reconcile the billing ledger: per customer and SKU, inferences stored, billed, "
        "waiting for the next invoice and unbillable (dated after today), and "
        "activations, direct licences and renewed units stored vs billed. Exits 1 when "
        "any record or event is billed twice or any invoice's quantities do not match its records. "
        "A run over every customer (no --customer, no --deep) is stored: the operator "
        "dashboard shows the latest."
    )

    def add_arguments(self, parser):
        parser.add_argument("--customer", metavar="ID", help="only this customer")
        parser.add_argument(
            "--deep",
            action="store_true",
            help="also compare the daily rollups with the raw records (reads every record)",
        )

    def handle(self, *args, customer: str | None, deep: bool, **options):
        if customer is not None and not Customer.objects.filter(pk=customer).exists():
            raise CommandError(
                f"no customer {customer}: give a customer id as the admin API lists it (CUST-...)"
            )
        if customer is None and not deep:
            # Every customer: stored, the run the operator dashboard shows.
            result = ledger_check_result(ledger_check_run())
        else:
            result = ledger_reconcile(customer_id=customer, deep=deep)
        self.stdout.write(f"ledger on {result.today} (UTC); inferences:")
        self.stdout.write(_row([name for name, _ in _COLUMNS]))
        for row in [*result.rows, result.totals()]:
            self.stdout.write(
                _row(
                    [
                        row.customer_id or "TOTAL",
                        row.sku,
                        row.inferences,
                        row.billed,
                        row.waiting,
                        row.unbillable,
                        row.activations,
                        row.activations_billed,
                        row.licenses,
                        row.licenses_billed,
                        row.transfers,
                        row.renewal_units,
                        row.renewal_units_billed,
                    ]
                )  # fmt: skip
            )
        total = result.totals()
        self.stdout.write(
            f"{total.billed_records:,} of {total.records:,} usage records billed, "
            f"{total.waiting_records:,} waiting for the next invoice"
        )
        if result.ok:
            self.stdout.write("OK: nothing is billed twice and every invoice matches its records")
            return
        for problem in result.problems:
            self.stderr.write(f"PROBLEM: {problem}")
        raise CommandError(f"{len(result.problems)} problem(s) found in the billing ledger")
