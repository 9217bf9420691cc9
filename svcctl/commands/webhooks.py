"""Webhook endpoints and the event log: register, list, show, delete, rotate a secret,
enable, send again; list events."""

from __future__ import annotations

import argparse
from typing import Any

from svccore import dates
from svccore.timeunits import iso_utc
from svcctl import EXIT_OK, output
from svcctl.client import segment
from svcctl.commands.base import Command, UsageError, connect

ACTIONS = ("list", "add", "show", "delete", "rotate", "enable", "redeliver")


def _when(seconds: int) -> str:
    if not seconds:
        return "-"
    return dates.moment(seconds)


def _state(hook: dict[str, Any]) -> str:
    if not hook["enabled"]:
        return "disabled"
    return f"failing ({hook['attempts']} attempts)" if hook["failing_since"] else "delivering"


def _show(hook: dict[str, Any], args) -> None:
    if args.json:
        output.print_json(hook)
        return
    pairs = [
        ("webhook", hook["webhook_id"]),
        ("url", hook["url"]),
        ("events", ", ".join(hook["events"])),
        ("customer", hook["customer_id"] or "every customer"),
        ("state", _state(hook)),
    ]
    if hook.get("disabled_reason"):
        pairs.append(("disabled", hook["disabled_reason"]))
    if "secret" in hook:
        pairs.append(("secret", f"{hook['secret']}  (shown only now)"))
    output.fields(pairs)
    if hook.get("recent_attempts"):
        print()
        output.table(
            ["at (UTC)", "event", "attempt", "result", "latency", "error or answer"],
            (
                [
                    _when(a["at"]),
                    a["event_id"],
                    a["attempt"],
                    "ok" if a["ok"] else (a["status_code"] or "failed"),
                    f"{a['latency_ms']} ms",
                    (a["error"] or a["response_excerpt"])[:60],
                ]  # fmt: skip
                for a in hook["recent_attempts"]
            ),
        )


def cmd_webhooks(args) -> int:
    client = connect(args)
    action = args.action
    if action == "list":
        hooks = client.get("webhooks")["webhooks"]
        if args.json:
            output.print_json(hooks)
        else:
            output.table(
                ["webhook", "url", "events", "customer", "state"],
                (
                    [
                        h["webhook_id"],
                        h["url"],
                        ", ".join(h["events"]),
                        h["customer_id"] or "-",
                        _state(h),
                    ]
                    for h in hooks
                ),  # fmt: skip
            )
        return EXIT_OK
    if action == "add":
        body: dict[str, Any] = {"url": args.target, "events": args.events.split(",")}
        if args.customer:
            body["customer_id"] = args.customer
        _show(client.post("webhooks", body), args)
        return EXIT_OK
    path = f"webhooks/{segment(args.target)}"
    if action == "show":
        _show(client.get(path), args)
    elif action == "delete":
        client.delete(path)
        print(f"webhook {args.target} deleted")
    elif action == "rotate":
        _show(client.post(f"{path}/rotate-secret", {}), args)
    elif action == "enable":
        _show(client.post(f"{path}/enable", {}), args)
    elif action == "redeliver":
        _show(client.post(f"{path}/redeliver", {"event_id": args.event}), args)
    return EXIT_OK


def _webhooks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="what to do: " + ", ".join(ACTIONS))
    p.add_argument(
        "target", nargs="?", default=None,
        help="add: the endpoint's URL (https://...); show, delete, rotate, enable, "
        "redeliver: the webhook id (wh_...)",
    )  # fmt: skip
    p.add_argument(
        "--events", default="*",
        help='add: comma-separated event types, or "*" for every type (default)',
    )  # fmt: skip
    p.add_argument("--customer", help="add: only this customer's events")
    p.add_argument("--event", help="redeliver: the event (evt_...) to send again, then later ones")


def _data(data: dict) -> str:
    """An event's data for a person: ``key=value`` pairs, times (``*_at``, Unix seconds
    in the JSON) as ISO 8601 UTC, an end of 0 as ``never``."""
    return ", ".join(
        f"{k}={iso_utc(v) if k.endswith('_at') and isinstance(v, int) else v}"
        for k, v in data.items()
        if k != "customer_id"
    )


def cmd_events(args) -> int:
    page = connect(args).get(
        "events", type=args.type, customer_id=args.customer, limit=args.limit, cursor=args.cursor
    )
    if args.json:
        output.print_json(page)
        return EXIT_OK
    output.table(
        ["created (UTC)", "event", "type", "customer", "data"],
        (
            [_when(e["created_at"]), e["id"], e["type"], e["customer_id"] or "-",
             _data(e["data"])[:120]]
            for e in page["events"]
        ),
    )  # fmt: skip
    if page["next_cursor"]:
        print(f"\nmore: --cursor {page['next_cursor']}")
    return EXIT_OK


def _events_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type", help="only this event type (e.g. license.revoked)")
    p.add_argument("--customer", help="only this customer's events")
    p.add_argument("--limit", type=int, default=50, help="events per page (default 50, max 500)")
    p.add_argument("--cursor", help="the next page: the cursor the last page printed")


def _checked(handler):
    def run(args) -> int:
        needs_target = args.action not in ("list",)
        if needs_target and not args.target:
            what = "the endpoint's URL" if args.action == "add" else "the webhook id (wh_...)"
            raise UsageError(f"webhooks {args.action} needs {what}")
        if args.action == "redeliver" and not args.event:
            raise UsageError("webhooks redeliver needs --event evt_...")
        return handler(args)

    return run


COMMANDS = [
    Command(
        "webhooks",
        online=True,
        summary="register, list and manage webhook endpoints",
        handler=_checked(cmd_webhooks),
        description="Webhook endpoints receive the service's events, signed as Standard "
        "Webhooks, in order, at least once. add prints the secret (whsec_...) once; rotate "
        "prints a new one (the old one signs too for a while); enable resumes a disabled "
        "endpoint; redeliver --event sends an event and every later one again.",
        arguments=_webhooks_arguments,
    ),
    Command(
        "events",
        online=True,
        summary="list the event log, newest first",
        handler=cmd_events,
        description="The event log (activations, revocations, renewals, thresholds, "
        "invoices, ...), newest first, --limit per page; filter by --type and --customer.",
        arguments=_events_arguments,
    ),
]
