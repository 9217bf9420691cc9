"""Customers: create one; invite people to its portal, list them and withdraw an
invitation; list and revoke customers' API keys."""

from __future__ import annotations

import argparse
from typing import Any

from svcctl import EXIT_OK, output
from svcctl.client import segment
from svcctl.commands.base import (
    Command,
    connect,
    positive,
)


def cmd_customer(args) -> int:
    body: dict[str, Any] = {"name": args.name, "kind": args.kind, "contact": args.contact}
    if args.id:
        body["id"] = args.id
    for name in ("country", "vat_id", "tax_exemption"):
        if getattr(args, name):
            body[name] = getattr(args, name)
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
        ["e-mail", "name", "since", "state", "invitation"],
        [[u["email"], u["name"], output.when(u["created_at"])[:10],
          "active" if u["active"] else "deactivated", ""] for u in result["users"]]
        + [[i["email"], i["name"], output.when(i["created_at"])[:10], f"invitation {i['state']}",
            str(i["invitation_id"])]
           for i in result["invitations"] if i["state"] != "accepted"],
    )  # fmt: skip
    return EXIT_OK


def cmd_withdraw_invitation(args) -> int:
    result = connect(args).post(f"invitations/{segment(args.invitation)}/withdraw", {})
    if args.json:
        output.print_json(result)
    else:
        output.fields(
            [
                ("withdrawn", result["email"]),
                ("customer", result["customer_id"]),
                ("invitation", result["invitation_id"]),
            ]
        )
    return EXIT_OK


def cmd_customer_keys(args) -> int:
    state = None if args.all else "active"
    result = connect(args).get(
        "customer-keys", customer_id=args.customer, state=state, limit=args.limit
    )
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.table(
        ["prefix", "customer", "owner", "name", "created", "last used", "state"],
        [[k["prefix"], k["customer_id"], k["owner"], k["name"],
          output.when(k["created_at"])[:16], output.when(k["last_used_at"])[:16],
          "active" if k["active"] else "revoked " + output.when(k["revoked_at"])[:10]]
         for k in result["keys"]],
    )  # fmt: skip
    return EXIT_OK


def cmd_revoke_customer_key(args) -> int:
    result = connect(args).post(f"customer-keys/{segment(args.prefix)}/revoke", {})
    if args.json:
        output.print_json(result)
    else:
        output.fields(
            [
                ("revoked", result["prefix"]),
                ("name", result["name"]),
                ("customer", result["customer_id"]),
                ("owner", result["owner"]),
                ("since", output.when(result["revoked_at"])),
            ]
        )
    return EXIT_OK


def _invite_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id (CUST-...)")
    p.add_argument("email", help="where the invitation goes")
    p.add_argument("--name", default="", help="their name, for the e-mail's greeting")


def _customer_only(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id (CUST-...)")


def _invitation_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("invitation", help="invitation id (the invitation column of portal-users)")


def _customer_keys_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", nargs="?", help="customer id (CUST-...); default: every customer")
    p.add_argument("--all", action="store_true", help="revoked keys too")
    p.add_argument("--limit", type=positive, default=100, help="newest keys shown (default 100)")


def _prefix_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prefix", help="the key's prefix (the prefix column of customer-keys)")


def _customer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="customer name")
    p.add_argument("--kind", required=True, choices=["oem", "end_user"], help="customer kind")
    p.add_argument("--contact", default="", help="contact address")
    p.add_argument("--id", help="choose the id (stored with the CUST- prefix); default: random")
    p.add_argument(
        "--country", default="", help="ISO 3166 alpha-2 code (VAT: default the seller's)"
    )
    p.add_argument("--vat-id", default="", help="the customer's VAT id (EU ids are checked)")
    p.add_argument("--tax-exemption", default="", help="why its invoices are VAT-exempt")


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
    Command(
        "withdraw-invitation",
        online=True,
        summary="withdraw a pending portal invitation (its link then opens nothing)",
        handler=cmd_withdraw_invitation,
        description="Withdraw a pending invitation: its link then answers as an expired "
        "one and can never be accepted. An accepted invitation cannot be withdrawn "
        "(exit 1): deactivate the portal user in the console instead.",
        arguments=_invitation_arguments,
    ),
    Command(
        "customer-keys",
        online=True,
        summary="list customers' API keys: customer, owner, name, prefix, last use",
        handler=cmd_customer_keys,
        description="Customers' read-only API keys, newest first (active ones; --all: "
        "revoked ones too): prefix, customer, owner (the portal user who made it), name, "
        "created, last used.",
        arguments=_customer_keys_arguments,
    ),
    Command(
        "revoke-customer-key",
        online=True,
        summary="revoke a customer's API key at once (by its prefix)",
        handler=cmd_revoke_customer_key,
        description="Revoke any customer's API key: its next request answers 403. "
        "Revoking a revoked key changes nothing. Audited with the key's name and customer.",
        arguments=_prefix_arguments,
    ),
]
