"""Batches: sell units, and see what is left of them."""

from __future__ import annotations

import argparse

from svcctl import EXIT_OK, files, output
from svcctl.client import segment
from svcctl.commands.base import (
    Command,
    connect,
    non_negative,
    positive,
    save_token,
    token_saved,
)


def cmd_batch(args) -> int:
    body = {"customer_id": args.customer, "sku": args.sku, "units": args.units}
    if args.days is not None:
        body["term_days"] = args.days
    if args.max_offline_days is not None:
        body["max_offline_days"] = args.max_offline_days
    client = connect(args)
    files.refuse_existing(args.token_out, "--token-out", force=args.force)  # before selling
    result = client.post("batches", body)
    problem = save_token(args, result["batch_token"])
    if args.json:
        output.print_json(result)
        return token_saved(problem)
    currency = result.get("currency", "")
    output.fields(
        [
            ("batch", result["batch_id"]),
            ("batch key licence", result["license_id"]),
            ("units", result["units"]),
            ("unit price", output.money(result["unit_price"], currency)),
            ("order value", output.money(result["order_value"], currency)),
            ("expires", output.when(result["expires_at"], zero="never (perpetual)")),
        ]
    )
    print("\nbatch key (send to the customer):")
    print(result["batch_token"])
    return token_saved(problem)


def cmd_batch_status(args) -> int:
    result = connect(args).get(f"batches/{segment(args.batch_id)}")
    if args.json:
        output.print_json(result)
    else:
        output.fields(
            [
                ("batch", result["batch_id"]),
                ("customer", result["customer_id"]),
                ("sku", result["sku"]),
                ("purchased", result["units_purchased"]),
                ("activated", result["units_activated"]),
                ("remaining", result["units_remaining"]),
                ("expires", output.when(result["expires_at"], zero="never (perpetual)")),
            ]
        )
    return EXIT_OK


def _batch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id, e.g. CUST-ACME")
    p.add_argument("sku", help="catalogue SKU, e.g. VISION-PRO (see `svcctl catalogue`)")
    p.add_argument("units", type=positive, help="units purchased")
    p.add_argument(
        "--days", type=non_negative, help="term in days (default: the SKU's; 0 = perpetual)"
    )
    p.add_argument(
        "--max-offline-days",
        type=positive,
        help="check-in lease: days a camera may run analytics without a sync (default: the "
        "SKU's; none = no lease)",
    )
    p.add_argument(
        "--token-out",
        metavar="FILE",
        help="also write the batch key to FILE, mode 600 (it is a credential); an existing "
        "FILE is refused, before anything is sold, unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --token-out file")


def _batch_status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("batch_id", help="batch id, B-...")


COMMANDS = [
    Command(
        "batch",
        online=True,
        summary="sell a customer a batch of units; prints the batch key",
        handler=cmd_batch,
        description=(
            "Issue a batch of UNITS seats of SKU to CUSTOMER. Prints the batch key: send it "
            "to the customer; each camera exchanges it for its own licence on first boot."
        ),
        arguments=_batch_arguments,
    ),
    Command(
        "batch-status",
        online=True,
        summary="units purchased, activated and remaining of a batch",
        handler=cmd_batch_status,
        arguments=_batch_status_arguments,
    ),
]
