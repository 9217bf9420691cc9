"""``python manage.py reconcile [--customer ID] [--deep]``"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.reconciliation import ledger_check_result, ledger_reconcile
from billing.services import ledger_check_run
from config.admin.display import counted
from customers.models import Customer

_COLUMNS = (
    "customer", "SKU", "stored", "billed", "waiting", "unbillable", "activ. stored",
    "billed", "direct stored", "billed", "transfers", "renewed units", "billed", "trials",
    "converted units", "billed", "add-on days", "billed",
)  # fmt: skip
_TEXT_COLUMNS = 2  # customer and SKU, left-aligned; the numbers right-aligned


def _table(rows: list[list]) -> list[str]:
    """``rows`` under the header, each column as wide as its widest cell (real ids and
    names do not push the numbers out of line), numbers grouped."""
    cells = [list(_COLUMNS)] + [
        [f"{value:,}" if isinstance(value, int) else str(value) for value in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    return [
        "  ".join(
            text.ljust(width) if i < _TEXT_COLUMNS else text.rjust(width)
            for i, (text, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]


class Command(BaseCommand):
    help = (
        "Reconcile the billing ledger: per customer and SKU, inferences stored, billed, "
        "waiting for the next invoice and unbillable (dated after today), and "
        "activations, direct licences, renewed and converted trial units and add-on days "
        "stored vs billed (trial activations apart: a conversion bills them). Exits 1 when "
        "any record or event is billed twice, any invoice's quantities do not match its "
        "records, or any daily rollup differs from the usage records it sums (months not "
        "pruned). "
        "A run over every customer (no --customer, no --deep) is stored: the operator "
        "dashboard shows the latest."
    )

    def add_arguments(self, parser):
        parser.add_argument("--customer", metavar="ID", help="only this customer")
        parser.add_argument(
            "--deep",
            action="store_true",
            help="also compare the activation rollups with the activations, rate every "
            "invoice again, and check every renewal against its term, audit entry and invoice "
            "and every trial conversion against its units, audit entry and invoice",
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
        lines = _table(
            [
                [
                    f"{row.customer_name} ({row.customer_id})" if row.customer_id else "TOTAL",
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
                    row.trials,
                    row.conversion_units,
                    row.conversion_units_billed,
                    row.addon_days,
                    row.addon_days_billed,
                ]
                for row in [*result.rows, result.totals()]
            ]
        )
        for line in lines:
            self.stdout.write(line)
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
        raise CommandError(
            f"{counted(len(result.problems), 'problem')} found in the billing ledger"
        )
