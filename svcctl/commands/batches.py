"""Batches: sell units, see what is left of them, and convert a trial batch to paid."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from svcctl import EXIT_FAILED, EXIT_OK, files, output
from svcctl.client import segment
from svcctl.commands.base import (
    Command,
    UsageError,
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
    if args.trial_days is not None:
        body["trial_days"] = args.trial_days
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
            *_trial_fields(result),
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
                *_trial_fields(result),
            ]
        )
    return EXIT_OK


def _trial_fields(result: dict[str, Any]) -> list[tuple[str, str]]:
    """A trial batch's days, or when it was converted (nothing for a batch sold paid)."""
    if result.get("trial_days") is not None:
        days = result["trial_days"]
        return [("trial", f"{days} days per camera from its activation, unbilled until converted")]
    if result.get("trial_converted_at"):
        return [("trial", f"converted to paid {output.when(result['trial_converted_at'])}")]
    return []


def _conversion_fields(result: dict[str, Any]) -> list[tuple[str, str]]:
    """What a conversion did, or its quote would do."""
    currency = result["currency"]
    price = output.money(result["unit_price"], currency)
    term = f"{result['term_days']} days" if result["term_days"] else "perpetual"
    return [
        ("batch", result["batch_id"]),
        ("customer", result["customer_id"]),
        ("sku", result["sku"]),
        ("trial", f"{result['trial_days']} days"),
        ("paid term", f"{term} from conversion"),
        ("new end", output.when(result["expires_at"], zero="never (perpetual)")),
        ("units", f"{result['units']} on trial (activated, not revoked)"),
    ], f"{result['units']} x {price} = {output.money(result['amount'], currency)}"


def cmd_convert_trial(args) -> int:
    client = connect(args)
    path = f"batches/{segment(args.batch_id)}/convert"
    body: dict[str, Any] = {"term_days": args.days}
    if args.dry_run or not args.yes:
        # What converting would do now, from the service (nothing converted or billed).
        quote = client.post(f"{path}/quote", body)
        pairs, bill = _conversion_fields(quote)
        if args.dry_run:
            if args.json:
                output.print_json(quote)
                return EXIT_OK
            output.fields([*pairs, ("would bill", bill)])
            print("dry run: nothing converted, nothing billed")
            return EXIT_OK
        question = (
            f"convert trial batch {quote['batch_id']} of {quote['customer_name']} "
            f"({quote['customer_id']}) to paid, ending "
            f"{output.when(quote['expires_at'], zero='never (perpetual)')}, billing {bill}?"
        )
        if not sys.stdin.isatty():
            raise UsageError(f"{question} Pass --yes to confirm (no terminal to ask on)")
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing converted", file=sys.stderr)
            return EXIT_FAILED
    result = client.post(path, body)
    if args.json:
        output.print_json(result)
        return EXIT_OK
    if result["replayed"]:
        print(
            f"already converted at {output.when(result['converted_at'])}; nothing converted or "
            "billed again"
        )
    pairs, bill = _conversion_fields(result)
    output.fields([*pairs, ("billed", bill)])
    if not result["replayed"]:
        print("its cameras fetch their paid licences at their next sync")
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
        "--trial-days",
        type=non_negative,
        help="a trial batch: each camera runs this many days from its activation, unbilled "
        "until the batch is converted (default: the SKU's trial days; 0 = sold, not a trial)",
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


def _convert_trial_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("batch_id", help="the trial batch, B-...")
    p.add_argument(
        "--days", type=positive, help="paid term from now (default: the batch's term as issued)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="show the units, the new end and what would be billed; convert nothing",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


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
        "convert-trial",
        online=True,
        summary="convert a trial batch to paid; its cameras keep running",
        handler=cmd_convert_trial,
        description=(
            "Convert a trial batch to paid: its cameras on trial become paid licences for "
            "--days from now (default: the batch's term as issued; a perpetual batch's "
            "become perpetual), fetched at their next sync without re-activating, and later "
            "activations are paid ones. Billed once, as a trial_conversion line: the units "
            "on trial now (activated, not revoked) x the batch's unit price. Converting "
            "again prints the first conversion and bills nothing more. Asks first, naming "
            "the units, the new end and the bill (--yes: do not ask; without a terminal "
            "--yes is required); --dry-run prints them and converts nothing."
        ),
        arguments=_convert_trial_arguments,
    ),
    Command(
        "batch-status",
        online=True,
        summary="units purchased, activated and remaining of a batch",
        handler=cmd_batch_status,
        arguments=_batch_status_arguments,
    ),
]
