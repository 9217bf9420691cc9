"""The fleet: every unit, paged or as CSV."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from svcctl import EXIT_OK, output
from svcctl.client import AdminClient, ApiError, segment
from svcctl.commands.base import (
    FLEET_LIMIT_MAX,
    Command,
    connect,
    fleet_limit,
    non_negative,
)


def _check_fleet_filters(client: AdminClient, args) -> None:
    """Refuse an unknown --customer or --batch: the fleet endpoint filters by them
    without checking, so an empty answer does not tell a typo from a customer (or batch)
    with no units. Asked only when the answer is empty."""
    if args.batch:
        client.get(f"batches/{segment(args.batch)}")  # 404: batch ... does not exist
    if args.customer:
        client.get(f"customers/{segment(args.customer)}")  # 404: customer ... does not exist


def _fleet_follow(client: AdminClient, first: dict[str, Any], query: dict[str, Any]) -> dict:
    """``first`` and every page after it, following ``next_cursor`` to the end, as one
    answer (``as_of`` of the first: later pages only reach further back)."""
    units, cursor, pages = list(first["units"]), first["next_cursor"], 1
    while cursor is not None:
        print(f"fleet: {len(units)} unit(s) in {pages} page(s), reading on", file=sys.stderr)
        page = client.get("fleet", **query, cursor=cursor)
        if page["next_cursor"] == cursor:
            raise ApiError(f"the service answered the same next_cursor twice: {cursor}")
        units += page["units"]
        cursor, pages = page["next_cursor"], pages + 1
    if pages > 1:
        print(f"fleet: {len(units)} unit(s) in {pages} page(s), done", file=sys.stderr)
    return {**first, "units": units, "count": len(units), "next_cursor": None}


class _CountingWriter:
    """Writes through to ``out``, counting the line ends that pass."""

    def __init__(self, out) -> None:
        self.out, self.lines = out, 0

    def write(self, data: bytes) -> int:
        self.lines += data.count(b"\n")
        return self.out.write(data)


def _fleet_csv(client: AdminClient, args, weak: str | None) -> int:
    """``fleet --csv FILE``: the export streamed to FILE (``-``: standard output), written
    beside it first and renamed when complete; the unit count on stderr."""
    refused = [f"--{name}" for name in ("cursor", "before", "limit") if getattr(args, name)]
    refused += [f"--{name}" for name in ("all", "json") if getattr(args, name)]
    if refused:
        raise ApiError(f"--csv writes every unit the filters select; not with {', '.join(refused)}")
    query = {
        "customer_id": args.customer,
        "batch_id": args.batch,
        "weak_binding": weak,
        "not_seen_days": args.not_seen_days,
    }
    if args.csv == "-":
        out = _CountingWriter(sys.stdout.buffer)
        size = client.download("fleet.csv", out, **query)
        sys.stdout.flush()
    else:
        partial = f"{args.csv}.part"
        with open(partial, "wb") as target:
            out = _CountingWriter(target)
            size = client.download("fleet.csv", out, **query)
        os.replace(partial, args.csv)
    units = max(0, out.lines - 1)  # the header, then one line per unit
    if not units:
        _check_fleet_filters(client, args)
    print(f"fleet: {units} unit(s), {size:,} bytes written to {args.csv}", file=sys.stderr)
    return EXIT_OK


def _state(unit: dict[str, Any]) -> str:
    """The unit's state in a word or two: revoked, suspended, past its lease end."""
    if unit["revoked"]:
        return "revoked"
    words = ["suspended"] if unit.get("suspended") else []
    lease_end = unit.get("lease_end")
    if lease_end:
        words.append(f"lease to {output.when(lease_end)}")
    return ", ".join(words)


def cmd_fleet(args) -> int:
    weak = "1" if args.weak else "0" if args.strong else None
    client = connect(args)
    if args.csv is not None:
        return _fleet_csv(client, args, weak)
    query = {
        "customer_id": args.customer,
        "batch_id": args.batch,
        "weak_binding": weak,
        "not_seen_days": args.not_seen_days,
        "limit": args.limit,
    }
    result = client.get("fleet", **query, before=args.before, cursor=args.cursor)
    if not result["units"]:
        _check_fleet_filters(client, args)
    if args.all:
        result = _fleet_follow(client, result, query)
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.table(
        ["activated", "last seen", "device", "licence", "batch", "customer", "sku", "source"]
        + ["weak", "state"],
        (
            [
                output.when(u["activated_at"]),
                output.when(u.get("last_seen_at")),
                u["device_id"],
                u["license_id"],
                u["batch_id"],
                u["customer_id"],
                u["sku"],
                u["fingerprint_source"] or "-",
                "WEAK" if u["weak_binding"] else "",
                _state(u),
            ]
            for u in result["units"]
        ),
    )
    print(f"\n{result['count']} unit(s)")
    if result["next_cursor"] is not None:
        print(f"more: the same command with --cursor {result['next_cursor']} (or --all)")
    return EXIT_OK


def _fleet_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--customer", help="only this customer's units")
    p.add_argument("--batch", help="only this batch's units")
    p.add_argument(
        "--not-seen-days",
        type=non_negative,
        metavar="D",
        help="only units not seen for more than D days (no status fetch, usage upload or "
        "activation since), or never seen",
    )
    weak = p.add_mutually_exclusive_group()
    weak.add_argument(
        "--weak", action="store_true", help="only weak-binding units (MAC fingerprint)"
    )
    weak.add_argument("--strong", action="store_true", help="only strongly bound units")
    position = p.add_mutually_exclusive_group()
    position.add_argument(
        "--cursor",
        help="the units after a previous answer's last: its next cursor, as printed",
    )
    position.add_argument(
        "--before",
        type=non_negative,
        metavar="UNIX",
        help="units activated before this Unix second (whole seconds: paging by it skips "
        "the rest of a second; prefer --cursor)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="follow the next cursor to the last unit, one call per page (progress on stderr)",
    )
    p.add_argument(
        "--csv",
        metavar="FILE",
        help="write every unit the filters select to FILE as CSV (- for standard output), "
        "streamed by the service in one call (GET /v1/admin/fleet.csv): for whole fleets",
    )
    p.add_argument(
        "--limit",
        type=fleet_limit,
        metavar="N",
        help=f"units per call, 1..{FLEET_LIMIT_MAX} (default {FLEET_LIMIT_MAX})",
    )


COMMANDS = [
    Command(
        "fleet",
        online=True,
        summary="list activated units, most recent first",
        handler=cmd_fleet,
        description="Activated units, most recent first (activated_at, then activation id), "
        f"at most --limit per call (default and at most {FLEET_LIMIT_MAX}). A page with more after "
        "it ends with its next cursor: go on with --cursor, or list every unit with --all.",
        arguments=_fleet_arguments,
    ),
]
