"""Usage, invoices and the catalogue they are rated from."""

from __future__ import annotations

import argparse
import sys

from svcctl import EXIT_OK, files, output
from svcctl.client import segment
from svcctl.commands.base import (
    Command,
    connect,
    positive,
)


def cmd_usage(args) -> int:
    result = connect(args).get(f"usage/{segment(args.license_id)}")
    if args.json:
        output.print_json(result)
    else:
        output.fields([(name, value) for name, value in result.items()])
    return EXIT_OK


def cmd_invoice(args) -> int:
    client = connect(args)
    if args.csv != "-":
        files.refuse_existing(args.csv, "--csv", force=args.force)
    result = client.get(f"invoice/{segment(args.customer)}", period_days=args.days)
    if args.csv:
        if args.csv == "-":
            output.invoice_csv(result, sys.stdout)
        else:
            with files.create_text(args.csv, option="--csv", force=args.force) as handle:
                output.invoice_csv(result, handle)
            if not args.json:
                print(f"wrote {args.csv}", file=sys.stderr)
        if args.csv == "-":
            return EXIT_OK
    if args.json:
        output.print_json(result)
        return EXIT_OK
    currency = result["currency"]
    print(
        f"invoice preview {result['customer_id']}: {output.when(result['period_start'])} to "
        f"{output.when(result['period_end'])} ({currency})\n"
    )
    output.table(
        ["kind", "sku", "description", "quantity", "unit", "unit price", "amount"],
        (
            [
                line["kind"],
                line["sku"],
                line["description"],
                line["quantity"],
                line["unit"],
                output.amount(line["unit_price"], currency),
                output.amount(line["amount"], currency),
            ]
            for line in result["lines"]
        ),
    )
    print(f"\ntotal {output.money(result['total'], currency)}")
    return EXIT_OK


def cmd_catalogue(args) -> int:
    result = connect(args).get("catalogue")
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.table(
        ["sku", "name", "modules", "streams", "fps", "api calls", "term", "grace", "unit prices"],
        (
            [
                e["sku"],
                e["name"],
                ",".join(e["modules"]),
                e["max_streams"],
                e["max_fps"],
                e["api_calls"] or "unmetered",
                f"{e['term_days']}d" if e["term_days"] else "perpetual",
                f"{e['grace_days']}d",
                " ".join(
                    f"{t['from_units']}+:{output.amount(t['unit_price'], e['currency'])}"
                    for t in e["unit_price_tiers"]
                )
                + f" {e['currency']}",
            ]
            for e in result["skus"]
        ),
    )
    return EXIT_OK


def _usage_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("license_id", help="licence id, LIC-...")


def _invoice_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id")
    p.add_argument("--days", type=positive, default=30, help="period in days, 1-3660 (default 30)")
    p.add_argument(
        "--csv",
        metavar="FILE",
        help="export the lines as CSV to FILE (- = stdout); an existing FILE is refused "
        "unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --csv file")


COMMANDS = [
    Command(
        "usage",
        online=True,
        summary="usage totals of a licence",
        handler=cmd_usage,
        arguments=_usage_arguments,
    ),
    Command(
        "invoice",
        online=True,
        summary="rate (preview) a customer's invoice; --csv exports it",
        handler=cmd_invoice,
        description="Rate CUSTOMER's invoice for the last --days days (nothing is stored).",
        arguments=_invoice_arguments,
    ),
    Command(
        "catalogue",
        online=True,
        summary="the SKU catalogue (--json makes a catalogue file for mint)",
        handler=cmd_catalogue,
        description=(
            "The live catalogue. `svcctl catalogue --json > catalogue.json` makes a "
            "catalogue file for `svcctl mint --catalogue`."
        ),
        arguments=None,
    ),
]
