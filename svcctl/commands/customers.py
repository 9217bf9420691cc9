"""Customers: create one; invite people to its portal and list them."""

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


def cmd_invite(args) -> int:
    body = {"email": args.email, "name": args.name}
    result = connect(args).post(f"customers/{args.customer}/users", body)
    if args.json:
        output.print_json(result)
    else:
        output.fields(
            [
                ("invited", result["email"]),
                ("customer", result["customer_id"]),
                ("link valid until", output.when(result["expires_at"])),
            ]
        )
    return EXIT_OK


def cmd_portal_users(args) -> int:
    result = connect(args).get(f"customers/{args.customer}/users")
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.table(
        ["e-mail", "name", "since", "state"],
        [[u["email"], u["name"], output.when(u["created_at"])[:10],
          "active" if u["active"] else "deactivated"] for u in result["users"]]
        + [[i["email"], i["name"], output.when(i["created_at"])[:10], f"invitation {i['state']}"]
           for i in result["invitations"] if i["state"] != "accepted"],
    )  # fmt: skip
    return EXIT_OK


def _invite_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id (CUST-...)")
    p.add_argument("email", help="where the invitation goes")
    p.add_argument("--name", default="", help="their name, for the e-mail's greeting")


def _customer_only(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id (CUST-...)")


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
    Command(
        "invite",
        online=True,
        summary="invite a person to a customer's portal (e-mailed one-time link)",
        handler=cmd_invite,
        description="Invite a person to a customer's portal: they get an e-mail with a "
        "one-time link, valid 7 days, that sets their password. They then see that "
        "customer's fleet, seats, usage and invoices, and nothing else.",
        arguments=_invite_arguments,
    ),
    Command(
        "portal-users",
        online=True,
        summary="list a customer's portal users and open invitations",
        handler=cmd_portal_users,
        description="A customer's portal users and its invitations not yet accepted.",
        arguments=_customer_only,
    ),
]
