"""Licences: issue, revoke, suspend and reinstate, release a seat, renew, what ends soon,
register one minted offline."""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from devices import token as codec
from devices.errors import BadSignature
from svcctl import EXIT_FAILED, EXIT_OK, OfflineError, files, output
from svcctl.commands.base import (
    CLOCK_SLACK,
    Command,
    UsageError,
    connect,
    non_negative,
    positive,
    read_license,
    save_token,
    token_saved,
)


def cmd_license(args) -> int:
    body: dict[str, Any] = {
        "customer_id": args.customer,
        "sku": args.sku,
        "device_id": args.device,
        "activation": args.activation,
    }
    for name, value in (
        ("term_days", args.days),
        ("api_quota", args.quota),
        ("max_streams", args.streams),
        ("max_offline_days", args.max_offline_days),
    ):
        if value is not None:
            body[name] = value
    client = connect(args)
    files.refuse_existing(args.token_out, "--token-out", force=args.force)  # before issuing
    result = client.post("licenses", body)
    problem = save_token(args, result["token"])
    if args.json:
        output.print_json(result)
        return token_saved(problem)
    output.fields(
        [
            ("licence", result["license_id"]),
            ("customer", result["customer_id"]),
            ("sku", result["sku"]),
            ("device", result["device_id"]),
            ("activation", result["activation"]),
            # The service's answer names no currency yet: the currency's decimals then
            # default to two.
            ("unit price", output.money(result["unit_price"], result.get("currency", ""))),
            ("expires", output.when(result["expires_at"], zero="never (perpetual)")),
        ]
    )
    print("\ntoken:")
    print(result["token"])
    return token_saved(problem)


def _revoked_before(result: dict[str, Any], *, reason: str, asked_at: int | None) -> bool:
    """Whether the revoke API's answer is an earlier revocation rather than this one.

    The API is idempotent: revoking again answers the first revocation, its time and
    reason. So the licence was revoked before when the reason is not the one sent (the
    service trims it), or when the time is before the service's clock read just before
    asking."""
    if result["reason"] != reason.strip():
        return True
    return asked_at is not None and result["revoked_at"] < asked_at - CLOCK_SLACK


def cmd_revoke(args) -> int:
    client = connect(args)
    asked_at = client.server_time()
    result = client.post("revoke", {"license_id": args.license_id, "reason": args.reason})
    already = _revoked_before(result, reason=args.reason, asked_at=asked_at)
    if args.json:
        output.print_json({**result, "already_revoked": already})
    elif already:
        print(
            f"{result['license_id']} already revoked at {output.when(result['revoked_at'])} "
            f"({result['reason'] or 'no reason given'}); nothing changed"
        )
    else:
        output.fields(
            [
                ("licence", result["license_id"]),
                ("revoked", output.when(result["revoked_at"])),
                ("reason", result["reason"]),
            ]
        )
    return EXIT_OK


def _hold_body(args) -> dict[str, Any]:
    named = [v for v in (args.license_id, args.batch, args.customer) if v]
    if len(named) != 1:
        raise UsageError("name exactly one of a licence id, --batch or --customer")
    if args.batch:
        return {"batch_id": args.batch}
    if args.customer:
        return {"customer_id": args.customer}
    return {"license_id": args.license_id}


def _hold_printed(args, result: dict[str, Any], done: str) -> int:
    if args.json:
        output.print_json(result)
        return EXIT_OK
    what = f"{result['scope']} {result['target']}"
    if not result["changed"]:
        print(f"{what} was already {done}; nothing changed")
        return EXIT_OK
    pairs = [(result["scope"], result["target"]), ("customer", result["customer_id"])]
    if result["suspended"]:
        pairs += [("suspended", output.when(result["suspended_at"])), ("reason", result["reason"])]
    else:
        pairs += [("reinstated", "yes: cameras resume analytics at their next sync")]
    output.fields(pairs)
    return EXIT_OK


def cmd_suspend(args) -> int:
    body = _hold_body(args) | {"reason": args.reason}
    return _hold_printed(args, connect(args).post("suspend", body), "suspended")


def cmd_reinstate(args) -> int:
    body = _hold_body(args) | {"reason": args.reason or ""}
    return _hold_printed(args, connect(args).post("reinstate", body), "not suspended")


def cmd_release(args) -> int:
    if bool(args.license_id) == bool(args.batch or args.device):
        raise UsageError("name the camera by its licence id, or by --batch and --device")
    if not args.license_id and not (args.batch and args.device):
        raise UsageError("--batch and --device go together")
    seat = (
        {"license_id": args.license_id}
        if args.license_id
        else {"batch_id": args.batch, "device_id": args.device}
    )
    result = connect(args).post("seats/release", {**seat, "reason": args.reason})
    if args.json:
        output.print_json(result)
        return EXIT_OK
    if result["already_released"]:
        print(
            f"{result['license_id']} (device {result['device_id']}) already released at "
            f"{output.when(result['released_at'])} ({result['reason']}); nothing changed"
        )
        return EXIT_OK
    output.fields(
        [
            ("licence", f"{result['license_id']} (revoked)"),
            ("device", result["device_id"]),
            ("batch", result["batch_id"]),
            ("released", output.when(result["released_at"])),
            ("reason", result["reason"]),
            ("units remaining", str(result["batch_units_remaining"])),
            (
                "releases",
                f"{result['releases_in_window']} of {result['release_limit']} allowed in "
                f"{result['window_days']} days",
            ),
        ]
    )
    print("the next camera activated on the batch takes this seat as a transfer (not billed)")
    return EXIT_OK


def _renewal_fields(result: dict) -> list[tuple[str, str]]:
    """What a renewal did, or its quote would do: the target, the old and new end, the
    term."""
    target = (
        ("batch", result["batch_id"]) if result["batch_id"] else ("licence", result["license_id"])
    )
    return [
        target,
        ("customer", result["customer_id"]),
        ("sku", result["sku"]),
        ("previous end", output.when(result["previous_expires_at"])),
        ("new end", output.when(result["expires_at"])),
        ("term", f"{result['term_days']} days ({result['basis'].replace('_', ' ')})"),
    ]


def _bill(result: dict) -> str:
    currency = result["currency"]
    price = output.money(result["unit_price"], currency)
    return f"{result['units']} x {price} = {output.money(result['amount'], currency)}"


def cmd_renew(args) -> int:
    if bool(args.license_id) == bool(args.batch):
        raise UsageError("name what to renew: --batch B-..., or a direct licence id")
    client = connect(args)
    target: dict[str, Any] = (
        {"batch_id": args.batch} if args.batch else {"license_id": args.license_id}
    )
    if args.dry_run or not args.yes:
        # What renewing would do now, from the service (nothing renewed, nothing billed).
        quote = client.post("renew/quote", {"term_days": args.days} | target)
        if args.dry_run:
            if args.json:
                output.print_json(quote)
                return EXIT_OK
            output.fields([*_renewal_fields(quote), ("would bill", _bill(quote))])
            print("dry run: nothing renewed, nothing billed")
            return EXIT_OK
        what = (
            f"batch {quote['batch_id']}" if quote["batch_id"] else f"licence {quote['license_id']}"
        )
        question = (
            f"renew {what} of {quote['customer_name']} ({quote['customer_id']}) to "
            f"{output.when(quote['expires_at'])} ({quote['term_days']} days), billing "
            f"{_bill(quote)}?"
        )
        if not sys.stdin.isatty():
            raise UsageError(f"{question} Pass --yes to confirm (no terminal to ask on)")
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing renewed", file=sys.stderr)
            return EXIT_FAILED
    key = args.key or f"svcctl-{uuid.uuid4()}"
    body: dict[str, Any] = {"idempotency_key": key, "term_days": args.days} | target
    result = client.post("renew", body)
    if args.json:
        output.print_json(result)
        return EXIT_OK
    if result["replayed"]:
        when = output.when(result["renewed_at"])
        print(f"already renewed with key {key} at {when}; nothing renewed again")
    output.fields([*_renewal_fields(result), ("billed", _bill(result)), ("key", key)])
    return EXIT_OK


def cmd_expiring(args) -> int:
    result = connect(args).get("expiring", days=args.days)
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.table(
        ["ends", "state", "batch / licence", "customer", "sku", "activated"],
        [
            (
                output.when(item["expires_at"]),
                "in grace" if item["in_grace"] else "running",
                item["batch_id"] or item["license_id"],
                f"{item['customer_name']} ({item['customer_id']})",
                item["sku"],
                f"{item['units_activated']} of {item['units_purchased']}",
            )
            for item in result["items"]
        ],
    )
    print(f"\n{result['count']} ending within {result['days']} days or in grace")
    return EXIT_OK


def cmd_register(args) -> int:
    client = connect(args)
    license = read_license(args.source)
    try:
        codec.decode_unverified(license.token)
    except BadSignature as exc:  # refuse before asking the server
        raise OfflineError(f"{args.source} holds no licence token: {exc}") from None
    result = client.post("licenses/register", {"token": license.token})
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.fields(
        [
            ("licence", result["license_id"]),
            ("customer", result["customer_id"]),
            ("sku", result["sku"]),
            ("device", result["device_id"]),
            ("expires", output.when(result["expires_at"], zero="never (perpetual)")),
            ("kid", result.get("kid") or "-"),
            ("registered", "yes" if result.get("registered") else "no"),
        ]
    )
    return EXIT_OK


def _license_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id")
    p.add_argument("sku", help="catalogue SKU")
    p.add_argument("device", help="the camera's fingerprint (device id); * = unbound key")
    p.add_argument(
        "--days", type=non_negative, help="term in days (default: the SKU's; 0 = perpetual)"
    )
    p.add_argument(
        "--quota", type=non_negative, help="metered API calls (default: SKU's; 0 = unmetered)"
    )
    p.add_argument("--streams", type=positive, help="concurrent streams (default: SKU cap)")
    p.add_argument(
        "--max-offline-days",
        type=positive,
        help="check-in lease: days the camera may run analytics without a sync (default: "
        "the SKU's)",
    )
    p.add_argument(
        "--activation",
        choices=["optional", "required"],
        default="optional",
        help="optional (default): works air-gapped; required: must activate online",
    )
    p.add_argument(
        "--token-out",
        metavar="FILE",
        help="also write the licence token to FILE, mode 600 (it is a credential); an "
        "existing FILE is refused, before anything is issued, unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --token-out file")


def _revoke_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("license_id", help="licence id, LIC-...")
    p.add_argument("--reason", required=True, help="why (recorded and shown to operators)")


def _hold_arguments(reason_required: bool):
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("license_id", nargs="?", help="a licence id, LIC-...")
        p.add_argument("--batch", help="a batch, B-... (all its units)")
        p.add_argument("--customer", help="a customer, CUST-... (all its licences)")
        p.add_argument(
            "--reason", required=reason_required, help="why (recorded and shown to operators)"
        )

    return add


def _release_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("license_id", nargs="?", help="the camera's unit licence id, LIC-...")
    p.add_argument("--batch", help="the batch, B-... (with --device instead of a licence id)")
    p.add_argument("--device", help="the camera's device id on that batch")
    p.add_argument("--reason", required=True, help="why (recorded and shown to operators)")


def _renew_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("license_id", nargs="?", help="a direct licence id, LIC-...")
    p.add_argument("--batch", help="the batch to renew, B-...")
    p.add_argument("--days", type=positive, help="days to add (default: the SKU's term)")
    p.add_argument("--key", help="idempotency key (default: a new random one, printed)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="show the new end and what would be billed; renew nothing",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _expiring_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", type=positive, default=30, help="window in days (default 30)")


def _register_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source", metavar="licence_file", help="licence or token file from mint (- = stdin)"
    )


COMMANDS = [
    Command(
        "license",
        online=True,
        summary="issue a direct licence for one camera",
        handler=cmd_license,
        description="Issue a direct, device-bound licence (the end-user path) through the service.",
        arguments=_license_arguments,
    ),
    Command(
        "revoke",
        online=True,
        summary="revoke a licence, with a reason",
        handler=cmd_revoke,
        description=(
            "Revoke a licence (unit, direct or batch key). Usage reporting stops at once; "
            "the camera stops at its next start after fetching the revocation list. "
            "Idempotent."
        ),
        arguments=_revoke_arguments,
    ),
    Command(
        "suspend",
        online=True,
        summary="suspend a licence, a batch or a customer, with a reason",
        handler=cmd_suspend,
        description=(
            "Suspend a licence, a batch key (all its units, --batch) or a customer (all its "
            "licences, --customer): cameras refuse analytics (SUSPENDED) at their next sync, "
            "video keeps running, seats and per-unit charges stay. Reversible with "
            "reinstate, unlike revoke. Idempotent."
        ),
        arguments=_hold_arguments(True),
    ),
    Command(
        "reinstate",
        online=True,
        summary="lift a suspension",
        handler=cmd_reinstate,
        description=(
            "Lift the suspension of a licence, a batch (--batch) or a customer (--customer): "
            "cameras resume analytics at their next sync (unless another suspension still "
            "covers them). Idempotent."
        ),
        arguments=_hold_arguments(False),
    ),
    Command(
        "release",
        online=True,
        summary="release the seat of a dead or replaced camera",
        handler=cmd_release,
        description=(
            "Give the seat of a dead or replaced camera back to its batch: its unit licence "
            "is revoked with the reason, and the next camera activated on the batch takes "
            "the seat as a transfer, not billed again. Name the camera by its licence id, "
            "or by --batch and --device. A policy bounds releases per batch (the service's "
            "SVC_SEAT_RELEASE_POLICY, 5% of its units per 30 days by default); a refusal "
            "says when the next release is possible. Idempotent: again prints the first "
            "release."
        ),
        arguments=_release_arguments,
    ),
    Command(
        "renew",
        online=True,
        summary="renew a batch or a direct licence for another term",
        handler=cmd_renew,
        description=(
            "Renew a batch (--batch; its cameras fetch their renewed licences at their next "
            "sync) or a direct licence (its licence id) for --days more (default: the SKU's "
            "term). Before its end the term runs from that end, after it but within grace "
            "from the old end, after grace from now. Billed once, as a renewal line: units "
            "activated now x the batch's unit price (1 x the licence's). --key makes the "
            "request idempotent: the same key again prints the first renewal and renews "
            "nothing more; without it a new key is made and printed (reuse it to retry "
            "safely). Asks first, naming the new end and the bill (--yes: do not ask; "
            "without a terminal --yes is required); --dry-run prints them and renews "
            "nothing."
        ),
        arguments=_renew_arguments,
    ),
    Command(
        "expiring",
        online=True,
        summary="list batches and licences ending soon",
        handler=cmd_expiring,
        description=(
            "Batches and direct licences, not revoked, ending within --days (default 30) or "
            "ended and still in their grace period, soonest first, with their customers and "
            "activated units: what to renew."
        ),
        arguments=_expiring_arguments,
    ),
    Command(
        "register",
        online=True,
        summary="register an offline-minted licence, so it can be revoked",
        handler=cmd_register,
        description=(
            "Register a licence minted offline (svcctl mint) with the service, so it is "
            "listed and can be revoked like any other. Sends the token (the file's first "
            "line)."
        ),
        arguments=_register_arguments,
    ),
]
