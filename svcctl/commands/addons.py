"""Add-ons (issue 42 item 4): add one of the SKU's catalogue add-ons to a batch or a
direct licence after the sale, remove it, list what a batch or licence has."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from svcctl import EXIT_OK, output
from svcctl.commands.base import Command, UsageError, connect


def _target(args) -> str:
    """The API path of the batch or licence named, exactly one."""
    if bool(args.license_id) == bool(args.batch):
        raise UsageError("name exactly one of a licence id or --batch")
    if args.batch:
        return f"batches/{urllib.parse.quote(args.batch, safe='')}/addons"
    return f"licenses/{urllib.parse.quote(args.license_id, safe='')}/addons"


def _what(result: dict[str, Any]) -> str:
    return (
        f"batch {result['batch_id']}" if result["batch_id"] else f"licence {result['license_id']}"
    )


def _terms(grant: dict[str, Any]) -> str:
    price = output.money(grant["unit_price"], grant["currency"])
    if grant["term_days"]:
        return f"{price} per unit per {grant['term_days']}-day term, pro rata"
    return f"{price} per unit, once"


def _adds(grant: dict[str, Any]) -> str:
    parts = [f"+{m}" for m in grant["modules"]]
    for name, label in (("extra_streams", "streams"), ("extra_fps", "fps"),
                        ("extra_api_calls", "API calls")):  # fmt: skip
        if grant[name]:
            parts.append(f"+{grant[name]:,} {label}")
    return " ".join(parts)


def _change_printed(args, result: dict[str, Any], done: str) -> int:
    if args.json:
        output.print_json(result)
        return EXIT_OK
    what = _what(result)
    if not result["changed"]:
        print(f"add-on {result['addon']} of {what} was already {done}; nothing changed")
        return EXIT_OK
    pairs = [
        ("add-on", f"{result['addon']} ({result['name']})"),
        ("on", what),
        ("customer", result["customer_id"]),
        ("adds", _adds(result)),
        ("price", _terms(result)),
    ]
    if result["active"]:
        pairs += [
            ("added", output.when(result["added_at"])),
            ("billed to", output.when(result["expires_at"], zero="never (perpetual)")),
            ("delivered", "to each camera at its next sync (a new activation at once)"),
        ]
    else:
        pairs += [
            ("removed", output.when(result["removed_at"])),
            ("reason", result["remove_reason"] or "none given"),
            ("delivered", "cameras lose it at their next sync; nothing is billed back"),
        ]
    output.fields(pairs)
    return EXIT_OK


def cmd_addon_add(args) -> int:
    result = connect(args).post(_target(args), {"addon": args.addon})
    return _change_printed(args, result, "active")


def cmd_addon_remove(args) -> int:
    path = f"{_target(args)}/{urllib.parse.quote(args.addon, safe='')}"
    if args.reason:
        path += f"?{urllib.parse.urlencode({'reason': args.reason})}"
    return _change_printed(args, connect(args).delete(path), "removed")


def cmd_addons(args) -> int:
    result = connect(args).get(_target(args))
    if args.json:
        output.print_json(result)
        return EXIT_OK
    grants = result["addons"]
    print(f"{_what(result)}: {len(grants)} add-on(s)")
    if grants:
        output.table(
            ["add-on", "adds", "price", "added", "removed"],
            (
                [
                    g["addon"],
                    _adds(g),
                    _terms(g),
                    output.when(g["added_at"]),
                    output.when(g["removed_at"], zero="active"),
                ]
                for g in grants
            ),
        )
    return EXIT_OK


def _arguments(*, addon: bool, reason: bool = False):
    def add(p: argparse.ArgumentParser) -> None:
        if addon:
            p.add_argument("addon", help="the add-on's code, e.g. anpr (svcctl catalogue)")
        p.add_argument("license_id", nargs="?", help="a direct licence id, LIC-...")
        p.add_argument("--batch", help="a batch, B-... (all its units)")
        if reason:
            p.add_argument("--reason", help="why (recorded in the audit log and the event)")

    return add


COMMANDS = [
    Command(
        "addon-add",
        online=True,
        summary="add a catalogue add-on to a batch or a direct licence",
        handler=cmd_addon_add,
        description=(
            "Add one of the SKU's add-ons (svcctl catalogue) to a batch (--batch: every unit, "
            "activated now or later) or a direct licence. Each camera receives it at its next "
            "sync (a new activation at once) and is billed from then to the end of its term, "
            "pro rata of the SKU's term, as an add-on line. Idempotent."
        ),
        arguments=_arguments(addon=True),
    ),
    Command(
        "addon-remove",
        online=True,
        summary="remove an add-on from a batch or a direct licence",
        handler=cmd_addon_remove,
        description=(
            "Remove an add-on from a batch (--batch) or a direct licence: each camera loses "
            "it at its next sync. Nothing is billed back (a refund is a credit note). "
            "Idempotent."
        ),
        arguments=_arguments(addon=True, reason=True),
    ),
    Command(
        "addons",
        online=True,
        summary="list the add-ons of a batch or a licence",
        handler=cmd_addons,
        description=(
            "The add-ons sold for a batch (--batch) or a direct licence (a unit's licence id "
            "lists its batch's), active first, with their terms."
        ),
        arguments=_arguments(addon=False),
    ),
]
