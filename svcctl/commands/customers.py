"""Customers: create one."""

from __future__ import annotations

import argparse
from typing import Any

from svcctl import EXIT_OK, output
from svcctl.commands.base import (
    Command,
    connect,
)


def cmd_customer(args) -> int:
    body: dict[str, Any] = {"name": args.name, "kind": args.kind, "contact": args.contact}
    if args.id:
        body["id"] = args.id
    result = connect(args).post("customers", body)
    if args.json:
        output.print_json(result)
    else:
        output.fields([("customer", result["customer_id"]), ("name", result.get("name", ""))])
    return EXIT_OK


def _customer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="customer name")
    p.add_argument("--kind", required=True, choices=["oem", "end_user"], help="customer kind")
    p.add_argument("--contact", default="", help="contact address")
    p.add_argument("--id", help="choose the id (stored with the CUST- prefix); default: random")


COMMANDS = [
    Command(
        "customer",
        online=True,
        summary="create a customer; prints its id (CUST-...)",
        handler=cmd_customer,
        description="Create a customer. Prints its id (CUST-...), which every other command takes.",
        arguments=_customer_arguments,
    ),
]
