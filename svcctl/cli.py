"""``svcctl``: operate the licensing authority from a terminal.

Exit status: 0 done, 1 failed (the server's or the tool's reason is printed), 2 usage.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from devices import token as codec
from devices.errors import BadSignature
from svcctl import EXIT_FAILED, EXIT_OK, EXIT_USAGE, OfflineError, certs, files, offline, output
from svcctl.client import AdminClient, ApiError, segment

DEFAULT_URL = "http://127.0.0.1:8000"
# Seconds the clocks of the service's nodes may differ by (revoke: was it revoked before?).
CLOCK_SLACK = 1
# Units per fleet call the service answers at most (GET /v1/admin/fleet's limit).
FLEET_LIMIT_MAX = 1000

DESCRIPTION = """\
Operate the licensing authority: customers, batches, licences, revocation, fleet and
invoices through the HTTP admin API; air-gapped licences, token inspection and signing
keys offline, from files alone. `svcctl <command> --help` describes each command.
"""

# Every line runs as written, in this order, against a fresh install (the customer is
# created with a chosen id); <...> marks a value to fill in. tests/operators/
# test_svcctl.py runs them all but register, which needs the key installed first.
EPILOG = """\
examples, online (<...> is a value to fill in):
  export SVC_URL=https://licensing.example.com SVC_ADMIN_KEY=<operator key>
  svcctl customer "Acme Cameras" --kind oem --contact ops@acme.example --id ACME
  svcctl batch CUST-ACME VISION-PRO 100 --token-out acme.batchkey  # prints the batch id
  svcctl batch-status <BATCH-ID>                   # the B-... id batch printed
  svcctl fleet --customer CUST-ACME --weak --all   # every page (--cursor: the next one)
  svcctl license CUST-ACME DETECT-STD cam-0001 --days 30           # prints the licence id
  svcctl revoke <LICENCE-ID> --reason "device stolen"  # the LIC-... id license printed
  svcctl release --batch <BATCH-ID> --device cam-0001 --reason "camera replaced"  # activated
  svcctl expiring --days 400                       # batches and licences ending soon
  svcctl renew --batch <BATCH-ID> --key acme-renewal-2027  # the same key again: no 2nd renewal
  svcctl invoice CUST-ACME --days 30 --csv acme.csv

examples, offline (the root key belongs on an offline machine):
  svcctl root-keygen --out root.pem --public-out root.pub
  svcctl keygen --out airgap.pem --public-out airgap.pub
  svcctl certify --root root.pem --key airgap.pub --out airgap.cert --use offline
  svcctl mint --sku DETECT-STD --customer CUST-ACME --device cam-0042 --days 365 \\
      --key airgap.pem --out cam-0042.lic      # finds airgap.cert beside the key
  svcctl inspect cam-0042.lic --root root.pub

then online, once the service has the key's certificate (manage.py key_install airgap.cert):
  svcctl register cam-0042.lic
"""


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own exit status for usage errors is 2
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Leaves out the bare ``<command>`` row: the commands are listed, grouped online and
    offline, in the sections :func:`build_parser` writes."""

    def add_argument(self, action: argparse.Action) -> None:
        if action.dest != "command":
            super().add_argument(action)


def _add_json(group, *, suppress: bool) -> None:
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print JSON for scripts instead of a table",
    )


def _add_service(group, *, suppress: bool) -> None:
    """The options of the commands that talk to the service."""
    group.add_argument(
        "--url",
        default=argparse.SUPPRESS if suppress else None,
        help=f"service base URL (default: $SVC_URL or {DEFAULT_URL})",
    )
    group.add_argument(
        "--admin-key",
        default=argparse.SUPPRESS if suppress else None,
        help="operator API key (default: $SVC_ADMIN_KEY); prefer the environment variable, "
        "command lines are visible to other users",
    )
    group.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=argparse.SUPPRESS if suppress else 30.0,
        help="HTTP timeout in seconds (default 30)",
    )


def _common(*, online: bool) -> argparse.ArgumentParser:
    """Options accepted before or after the subcommand (``svcctl --json fleet`` and
    ``svcctl fleet --json``); on subcommands their defaults are suppressed so they do not
    undo a value given before the subcommand. Only online commands take the service's."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("common options")
    _add_json(group, suppress=True)
    if online:
        _add_service(group, suppress=True)
    return parent


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _fleet_limit(text: str) -> int:
    value = _positive(text)
    if value > FLEET_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be <= {FLEET_LIMIT_MAX}, not {value}")
    return value


def _date(text: str) -> int:
    try:
        return certs.parse_date(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="svcctl",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
        add_help=False,  # -h goes below the commands, with the other options
    )
    # Sections in the order they print; the command lists are filled in below.
    online_group = parser.add_argument_group(
        "online commands (talk to the service: --url or $SVC_URL, --admin-key or $SVC_ADMIN_KEY)"
    )
    offline_group = parser.add_argument_group(
        "offline commands (files only: no service, no database)"
    )
    general = parser.add_argument_group("options")
    general.add_argument("-h", "--help", action="help", help="show this help and exit")
    _add_json(general, suppress=False)
    _add_service(
        parser.add_argument_group("options of the online commands (also after the command)"),
        suppress=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=_Parser)
    parents = {True: [_common(online=True)], False: [_common(online=False)]}
    listed: dict[bool, list[tuple[str, str]]] = {True: [], False: []}

    def command(online: bool, name: str, summary: str, handler: Callable, description: str):
        p = sub.add_parser(
            name,
            description=textwrap.fill(description or summary, width=88),
            parents=parents[online],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(handler=handler)
        listed[online].append((name, summary))
        return p

    def online_command(name: str, summary: str, handler: Callable, description: str = ""):
        return command(True, name, summary, handler, description)

    def offline_command(name: str, summary: str, handler: Callable, description: str = ""):
        return command(False, name, summary, handler, description)

    p = online_command(
        "customer",
        "create a customer; prints its id (CUST-...)",
        cmd_customer,
        "Create a customer. Prints its id (CUST-...), which every other command takes.",
    )
    p.add_argument("name", help="customer name")
    p.add_argument("--kind", required=True, choices=["oem", "end_user"], help="customer kind")
    p.add_argument("--contact", default="", help="contact address")
    p.add_argument("--id", help="choose the id (stored with the CUST- prefix); default: random")

    p = online_command(
        "batch",
        "sell a customer a batch of units; prints the batch key",
        cmd_batch,
        "Issue a batch of UNITS seats of SKU to CUSTOMER. Prints the batch key: send it to "
        "the customer; each camera exchanges it for its own licence on first boot.",
    )
    p.add_argument("customer", help="customer id, e.g. CUST-ACME")
    p.add_argument("sku", help="catalogue SKU, e.g. VISION-PRO (see `svcctl catalogue`)")
    p.add_argument("units", type=_positive, help="units purchased")
    p.add_argument(
        "--days", type=_non_negative, help="term in days (default: the SKU's; 0 = perpetual)"
    )
    p.add_argument(
        "--token-out",
        metavar="FILE",
        help="also write the batch key to FILE, mode 600 (it is a credential); an existing "
        "FILE is refused, before anything is sold, unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --token-out file")

    p = online_command(
        "license",
        "issue a direct licence for one camera",
        cmd_license,
        "Issue a direct, device-bound licence (the end-user path) through the service.",
    )
    p.add_argument("customer", help="customer id")
    p.add_argument("sku", help="catalogue SKU")
    p.add_argument("device", help="the camera's fingerprint (device id); * = unbound key")
    p.add_argument(
        "--days", type=_non_negative, help="term in days (default: the SKU's; 0 = perpetual)"
    )
    p.add_argument(
        "--quota", type=_non_negative, help="metered API calls (default: SKU's; 0 = unmetered)"
    )
    p.add_argument("--streams", type=_positive, help="concurrent streams (default: SKU cap)")
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

    p = online_command(
        "revoke",
        "revoke a licence, with a reason",
        cmd_revoke,
        "Revoke a licence (unit, direct or batch key). Usage reporting stops at once; the "
        "camera stops at its next start after fetching the revocation list. Idempotent.",
    )
    p.add_argument("license_id", help="licence id, LIC-...")
    p.add_argument("--reason", required=True, help="why (recorded and shown to operators)")

    p = online_command(
        "release",
        "release the seat of a dead or replaced camera",
        cmd_release,
        "Give the seat of a dead or replaced camera back to its batch: its unit licence is "
        "revoked with the reason, and the next camera activated on the batch takes the seat "
        "as a transfer, not billed again. Name the camera by its licence id, or by --batch "
        "and --device. A policy bounds releases per batch (the service's "
        "SVC_SEAT_RELEASE_POLICY, 5%% of its units per 30 days by default); a refusal says "
        "when the next release is possible. Idempotent: again prints the first release.",
    )
    p.add_argument("license_id", nargs="?", help="the camera's unit licence id, LIC-...")
    p.add_argument("--batch", help="the batch, B-... (with --device instead of a licence id)")
    p.add_argument("--device", help="the camera's device id on that batch")
    p.add_argument("--reason", required=True, help="why (recorded and shown to operators)")

    p = online_command(
        "renew",
        "renew a batch or a direct licence for another term",
        cmd_renew,
        "Renew a batch (--batch; its cameras fetch their renewed licences at their next "
        "sync) or a direct licence (its licence id) for --days more (default: the SKU's "
        "term). Before its end the term runs from that end, after it but within grace from "
        "the old end, after grace from now. Billed once, as a renewal line: units activated "
        "now x the batch's unit price (1 x the licence's). --key makes the request "
        "idempotent: the same key again prints the first renewal and renews nothing more; "
        "without it a new key is made and printed (reuse it to retry safely).",
    )
    p.add_argument("license_id", nargs="?", help="a direct licence id, LIC-...")
    p.add_argument("--batch", help="the batch to renew, B-...")
    p.add_argument("--days", type=_positive, help="days to add (default: the SKU's term)")
    p.add_argument("--key", help="idempotency key (default: a new random one, printed)")

    p = online_command(
        "expiring",
        "list batches and licences ending soon",
        cmd_expiring,
        "Batches and direct licences, not revoked, ending within --days (default 30) or "
        "ended and still in their grace period, soonest first, with their customers and "
        "activated units: what to renew.",
    )
    p.add_argument("--days", type=_positive, default=30, help="window in days (default 30)")

    p = online_command(
        "fleet",
        "list activated units, most recent first",
        cmd_fleet,
        "Activated units, most recent first (activated_at, then activation id), at most "
        f"--limit per call (default and at most {FLEET_LIMIT_MAX}). A page with more after "
        "it ends with its next cursor: go on with --cursor, or list every unit with --all.",
    )
    p.add_argument("--customer", help="only this customer's units")
    p.add_argument("--batch", help="only this batch's units")
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
        type=_non_negative,
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
        type=_fleet_limit,
        metavar="N",
        help=f"units per call, 1..{FLEET_LIMIT_MAX} (default {FLEET_LIMIT_MAX})",
    )

    p = online_command(
        "batch-status", "units purchased, activated and remaining of a batch", cmd_batch_status
    )
    p.add_argument("batch_id", help="batch id, B-...")

    p = online_command("usage", "usage totals of a licence", cmd_usage)
    p.add_argument("license_id", help="licence id, LIC-...")

    p = online_command(
        "invoice",
        "rate (preview) a customer's invoice; --csv exports it",
        cmd_invoice,
        "Rate CUSTOMER's invoice for the last --days days (nothing is stored).",
    )
    p.add_argument("customer", help="customer id")
    p.add_argument("--days", type=_positive, default=30, help="period in days, 1-3660 (default 30)")
    p.add_argument(
        "--csv",
        metavar="FILE",
        help="export the lines as CSV to FILE (- = stdout); an existing FILE is refused "
        "unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --csv file")

    online_command(
        "catalogue",
        "the SKU catalogue (--json makes a catalogue file for mint)",
        cmd_catalogue,
        "The live catalogue. `svcctl catalogue --json > catalogue.json` makes a catalogue "
        "file for `svcctl mint --catalogue`.",
    )

    p = offline_command(
        "mint",
        "sign an air-gapped, device-bound licence with a signing key file",
        cmd_mint,
        "Sign a device-bound licence (act=optional) with a signing key file, with no "
        "service and no database. SKU modules and caps come from --catalogue (default: "
        "the seeded catalogue shipped with svcctl; `manage.py export_catalogue` or "
        "`svcctl catalogue --json` give the live one).",
    )
    p.add_argument("--sku", required=True, help="catalogue SKU")
    p.add_argument("--customer", required=True, help="customer id (CUST- prefix optional)")
    p.add_argument("--device", required=True, help="the camera's fingerprint (device id)")
    p.add_argument(
        "--days", type=_non_negative, help="term in days (default: the SKU's; 0 = perpetual)"
    )
    p.add_argument("--key", required=True, metavar="FILE", help="private signing key (PEM)")
    p.add_argument(
        "--cert",
        metavar="FILE",
        help="the key's certificate (svcctl certify); default: the key file's name with "
        ".cert for .pem, if that file exists. Without one, devices with a root keyring "
        "refuse the licence (KEY_UNKNOWN)",
    )
    p.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="FILE",
        help="root public key to verify the certificate with (repeatable)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="licence file to write, mode 600 (the token is the camera's credential): the "
        "token, then the key's certificate line(s); an existing FILE is refused unless --force",
    )
    p.add_argument("--catalogue", metavar="FILE", help='catalogue file ({"skus": [...]})')
    p.add_argument(
        "--issuer",
        default=os.environ.get("SVC_ISSUER", offline.DEFAULT_ISSUER),
        help="iss claim (default: $SVC_ISSUER or svc-licensing)",
    )
    p.add_argument("--quota", type=_non_negative, help="metered API calls (default: SKU's)")
    p.add_argument("--streams", type=_positive, help="concurrent streams (default: SKU cap)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")

    p = offline_command(
        "inspect",
        "decode and verify a token or licence file: claims, state, key",
        cmd_inspect,
        "Decode a token or licence file, verify its signature with --pubkey, or follow its "
        "signing key (kid) through the file's certificates to a --root as a device would, "
        "and print its claims, validity window, state (active, grace, expired), the key and "
        "the certificates. Exit status 1 when the signature does not verify or the key "
        "does not chain to a root.",
    )
    p.add_argument(
        "source",
        metavar="token_file",
        help="file holding the token, or a licence file (token, then certificates); - = stdin",
    )
    p.add_argument(
        "--pubkey",
        metavar="FILE",
        help="public key file, PEM or base64url (or the base64url key itself)",
    )
    p.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="FILE",
        help="root public key a device trusts (repeatable); the key must chain to one",
    )
    p.add_argument(
        "--at", type=_non_negative, metavar="UNIX", help="evaluate the state at this time"
    )

    p = offline_command(
        "keygen",
        "create an Ed25519 signing key (mode 600)",
        cmd_keygen,
        "Create an Ed25519 signing key (PKCS#8 PEM, mode 600) and print its public key and "
        "fingerprint. Refuses to overwrite an existing file without --force. Same code as "
        "`manage.py keygen`.",
    )
    p.add_argument(
        "--out", required=True, metavar="FILE", help="private key file to create (mode 600)"
    )
    p.add_argument("--public-out", metavar="FILE", help="also write the public key (PEM, mode 644)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing files: licences signed by the old key stop verifying",
    )

    p = offline_command(
        "root-keygen",
        "create a root key (mode 600), for an offline machine",
        cmd_root_keygen,
        "Create an Ed25519 root key (PKCS#8 PEM, mode 600) and print its key id (kid) and "
        "fingerprint. Firmware compiles in its public key (python -m devices vendor --root); "
        "the root only endorses signing keys (svcctl certify) and belongs on an offline "
        "machine, never on the server. Refuses to overwrite an existing file without --force.",
    )
    p.add_argument(
        "--out", required=True, metavar="FILE", help="private root key file to create (mode 600)"
    )
    p.add_argument("--public-out", metavar="FILE", help="also write the public key (PEM, mode 644)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing files: devices trusting the old root refuse everything it endorsed",
    )

    p = offline_command(
        "certify",
        "endorse a signing key with the root: a key certificate",
        cmd_certify,
        "Sign a key certificate (SVCK1, one line) for --key with the root key: devices that "
        "trust the root then trust licences signed by that key within the certificate's "
        "window. A certificate covers signatures made from --not-before (default: now) to its "
        "end (default: none), so for a key that has already signed licences give the date it "
        "was created.",
    )
    p.add_argument("--root", required=True, metavar="FILE", help="private root key (PEM)")
    p.add_argument(
        "--key",
        required=True,
        metavar="FILE",
        help="the signing key: its private key (.pem, mode 600) or its public key (.pub)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="certificate file to write (public, mode 644); an existing FILE is refused "
        "unless --force",
    )
    p.add_argument(
        "--use",
        choices=["online", "offline"],
        default="online",
        help="online (default): the server's key, signs licences, list pages and receipts; "
        "offline: an air-gap minting key, signs licences only",
    )
    end = p.add_mutually_exclusive_group()
    end.add_argument("--days", type=_positive, help="valid for N days from --not-before")
    end.add_argument(
        "--not-after", type=_date, metavar="YYYY-MM-DD", help="valid through this UTC day"
    )
    p.add_argument(
        "--not-before", type=_date, metavar="YYYY-MM-DD", help="valid from 00:00 UTC of this day"
    )
    p.add_argument(
        "--issuer",
        default=os.environ.get("SVC_ISSUER", offline.DEFAULT_ISSUER),
        help="iss field (default: $SVC_ISSUER or svc-licensing)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out file")

    p = online_command(
        "register",
        "register an offline-minted licence, so it can be revoked",
        cmd_register,
        "Register a licence minted offline (svcctl mint) with the service, so it is listed "
        "and can be revoked like any other. Sends the token (the file's first line).",
    )
    p.add_argument(
        "source", metavar="licence_file", help="licence or token file from mint (- = stdin)"
    )

    width = max(len(name) for names in listed.values() for name, _ in names) + 2
    for group, names in ((online_group, listed[True]), (offline_group, listed[False])):
        group.description = "".join(f"{name:<{width}}{summary}\n" for name, summary in names)
    return parser


# --- online ----------------------------------------------------------------------------


def _client(args) -> AdminClient:
    url = args.url or os.environ.get("SVC_URL") or DEFAULT_URL
    key = args.admin_key or os.environ.get("SVC_ADMIN_KEY")
    if not key:
        raise UsageError("no admin key: set SVC_ADMIN_KEY or pass --admin-key")
    return AdminClient(url, key, timeout=args.timeout)


def _save_token(args, token: str) -> str:
    """Write ``--token-out`` (mode 600). The service has issued the token already, so a
    refusal is returned, for :func:`_token_saved` to report once the token is printed,
    rather than raised."""
    if not args.token_out:
        return ""
    try:
        files.write_secret(args.token_out, token + "\n", option="--token-out", force=args.force)
    except OfflineError as exc:
        return str(exc)
    return ""


def _token_saved(problem: str) -> int:
    if not problem:
        return EXIT_OK
    print(f"svcctl: error: {problem}; the token is in the output above", file=sys.stderr)
    return EXIT_FAILED


def cmd_customer(args) -> int:
    body: dict[str, Any] = {"name": args.name, "kind": args.kind, "contact": args.contact}
    if args.id:
        body["id"] = args.id
    result = _client(args).post("customers", body)
    if args.json:
        output.print_json(result)
    else:
        output.fields([("customer", result["customer_id"]), ("name", result.get("name", ""))])
    return EXIT_OK


def cmd_batch(args) -> int:
    body = {"customer_id": args.customer, "sku": args.sku, "units": args.units}
    if args.days is not None:
        body["term_days"] = args.days
    client = _client(args)
    files.refuse_existing(args.token_out, "--token-out", force=args.force)  # before selling
    result = client.post("batches", body)
    problem = _save_token(args, result["batch_token"])
    if args.json:
        output.print_json(result)
        return _token_saved(problem)
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
    return _token_saved(problem)


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
    ):
        if value is not None:
            body[name] = value
    client = _client(args)
    files.refuse_existing(args.token_out, "--token-out", force=args.force)  # before issuing
    result = client.post("licenses", body)
    problem = _save_token(args, result["token"])
    if args.json:
        output.print_json(result)
        return _token_saved(problem)
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
    return _token_saved(problem)


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
    client = _client(args)
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
    result = _client(args).post("seats/release", {**seat, "reason": args.reason})
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


def cmd_renew(args) -> int:
    if bool(args.license_id) == bool(args.batch):
        raise UsageError("name what to renew: --batch B-..., or a direct licence id")
    key = args.key or f"svcctl-{uuid.uuid4()}"
    body: dict[str, Any] = {"idempotency_key": key, "term_days": args.days}
    body |= {"batch_id": args.batch} if args.batch else {"license_id": args.license_id}
    result = _client(args).post("renew", body)
    if args.json:
        output.print_json(result)
        return EXIT_OK
    if result["replayed"]:
        when = output.when(result["renewed_at"])
        print(f"already renewed with key {key} at {when}; nothing renewed again")
    currency = result["currency"]
    target = (
        ("batch", result["batch_id"]) if result["batch_id"] else ("licence", result["license_id"])
    )
    price, amount = (
        output.money(result["unit_price"], currency),
        output.money(result["amount"], currency),
    )
    output.fields(
        [
            target,
            ("customer", result["customer_id"]),
            ("sku", result["sku"]),
            ("previous end", output.when(result["previous_expires_at"])),
            ("ends", output.when(result["expires_at"])),
            ("term", f"{result['term_days']} days ({result['basis'].replace('_', ' ')})"),
            ("billed", f"{result['units']} x {price} = {amount}"),
            ("key", key),
        ]
    )
    return EXIT_OK


def cmd_expiring(args) -> int:
    result = _client(args).get("expiring", days=args.days)
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
    query = {"customer_id": args.customer, "batch_id": args.batch, "weak_binding": weak}
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


def cmd_fleet(args) -> int:
    weak = "1" if args.weak else "0" if args.strong else None
    client = _client(args)
    if args.csv is not None:
        return _fleet_csv(client, args, weak)
    query = {
        "customer_id": args.customer,
        "batch_id": args.batch,
        "weak_binding": weak,
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
        ["activated", "device", "licence", "batch", "customer", "sku", "source", "weak", "revoked"],
        (
            [
                output.when(u["activated_at"]),
                u["device_id"],
                u["license_id"],
                u["batch_id"],
                u["customer_id"],
                u["sku"],
                u["fingerprint_source"] or "-",
                "WEAK" if u["weak_binding"] else "",
                "revoked" if u["revoked"] else "",
            ]
            for u in result["units"]
        ),
    )
    print(f"\n{result['count']} unit(s)")
    if result["next_cursor"] is not None:
        print(f"more: the same command with --cursor {result['next_cursor']} (or --all)")
    return EXIT_OK


def cmd_batch_status(args) -> int:
    result = _client(args).get(f"batches/{segment(args.batch_id)}")
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


def cmd_usage(args) -> int:
    result = _client(args).get(f"usage/{segment(args.license_id)}")
    if args.json:
        output.print_json(result)
    else:
        output.fields([(name, value) for name, value in result.items()])
    return EXIT_OK


def cmd_invoice(args) -> int:
    client = _client(args)
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
    result = _client(args).get("catalogue")
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


def _read_license(source: str):
    if source == "-":
        return offline.parse_license(sys.stdin.read())
    return offline.read_license(source)


def cmd_register(args) -> int:
    client = _client(args)
    license = _read_license(args.source)
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


# --- offline ---------------------------------------------------------------------------


def _window(cert: dict) -> str:
    return f"{output.when(cert['not_before'])} to {output.when(cert['not_after'], zero='no end')}"


def cmd_mint(args) -> int:
    files.refuse_existing(args.out, "--out", force=args.force)
    entry = offline.catalogue_entry(args.sku, args.catalogue)
    now = int(time.time())
    public = offline.load_signing_key(args.key).public_key()
    cert_file = args.cert
    if cert_file is None and certs.default_certificate_path(args.key).is_file():
        cert_file = str(certs.default_certificate_path(args.key))
    roots = certs.read_roots(args.root)
    if codec.key_id(public) in roots:
        raise OfflineError(
            f"{args.key} is a root key: a root only endorses signing keys (svcctl certify); "
            "mint with a certified signing key"
        )
    if cert_file is None and roots:
        raise OfflineError(
            f"--root given but no certificate for key {codec.key_id(public)}: pass --cert "
            f"(looked for {certs.default_certificate_path(args.key)})"
        )
    found = certs.certificates_for_key(cert_file, public, at=now, roots=roots) if cert_file else []
    token, claims = offline.mint(
        entry=entry,
        customer=args.customer,
        device_id=args.device,
        key_file=args.key,
        out=args.out,
        days=args.days,
        issuer=args.issuer,
        max_streams=args.streams,
        api_quota=args.quota,
        force=args.force,
        now=now,
        certificates=[c.text for c in found],
    )
    kid = codec.key_id(public)
    if not found:
        print(
            f"svcctl: warning: no certificate for signing key {kid} (looked for "
            f"{certs.default_certificate_path(args.key)}): devices with a root keyring will "
            "refuse this licence (KEY_UNKNOWN); only builds with this key compiled in accept "
            "it. Endorse the key with `svcctl certify` and mint again.",
            file=sys.stderr,
        )
    if args.json:
        output.print_json(
            {
                "license_id": claims["lic"],
                "out": args.out,
                "claims": claims,
                "kid": kid,
                "certificate": cert_file,
                "certificates": [c.as_dict() for c in found],
            }
        )
        return EXIT_OK
    output.fields(
        [
            ("licence", claims["lic"]),
            ("customer", claims["sub"]),
            ("sku", claims["sku"]),
            ("device", claims["dev"]),
            ("modules", ", ".join(m for m, on in claims["ent"].items() if on)),
            ("expires", output.when(claims["exp"], zero="never (perpetual)")),
            ("kid", kid),
            (
                "certificate",
                ", ".join(f"{cert_file} (root {c.root}, use {c.use})" for c in found)
                or "NONE (see warning)",
            ),
            ("written to", args.out),
        ]
    )
    return EXIT_OK


def _chain_row(report: dict) -> str:
    chain = report["chain"]
    if chain["trusted"]:
        return f"ok: key {report['kid']} certified by root {chain['root']} (use {chain['use']})"
    return f"REFUSED {chain['code']}: {chain['error']}"


def _certificate_row(cert: dict) -> str:
    if not cert["readable"]:
        return f"UNREADABLE: {cert['error']}"
    verdict = {
        True: "verified",
        False: f"REFUSED {cert['code']}",
        None: "not verified (no --root)",
    }[cert["verified"]]
    return f"key {cert['kid']}, use {cert['use']}, {_window(cert)}, root {cert['root']}: {verdict}"


def cmd_inspect(args) -> int:
    if args.pubkey is None and not args.root:
        raise UsageError("give the key to verify with: --pubkey FILE, --root FILE, or both")
    license = _read_license(args.source)
    public_key = certs.read_public_key(args.pubkey) if args.pubkey is not None else None
    roots = list(certs.read_roots(args.root).values())
    report = offline.inspect(
        license.token, public_key, now=args.at, roots=roots, certificates=license.certificates
    )
    if args.json:
        output.print_json(report)
    else:
        claims = report["claims"]
        lim = claims["lim"]
        rows = [
            (
                "signature",
                "valid" if report["signature_valid"] else "INVALID: " + report["signature_error"],
            ),
            ("kid", report["kid"] or "none (token names no signing key)"),
            ("key fingerprint", report["key_fingerprint"] or "-"),
        ]
        if report["chain"] is not None:
            rows.append(("root chain", _chain_row(report)))
        rows += [("certificate", _certificate_row(c)) for c in report["certificates"]]
        rows += [
            ("state", report["state"] + ("" if report["signature_valid"] else " (unverified)")),
            ("kind", report["kind"]),
            ("licence", claims["lic"]),
            ("sku", claims["sku"]),
            ("customer", claims["sub"]),
            ("issuer", claims["iss"]),
            ("device", claims["dev"]),
            ("activation", claims["act"]),
            ("modules", ", ".join(m for m, on in sorted(claims["ent"].items()) if on) or "none"),
            (
                "limits",
                f"streams {lim['max_streams']}, fps {lim['max_fps']}, "
                f"api calls {lim['api_calls'] or 'unmetered'}",
            ),
            ("issued", output.when(claims["iat"])),
            ("valid from", output.when(claims["nbf"])),
            ("expires", output.when(claims["exp"], zero="never (perpetual)")),
            ("grace", f"{claims['grace_days']} days"),
            ("grace until", output.when(report["grace_until"], zero="-")),
        ]
        if "batch" in claims:
            rows.append(("batch", f"{claims['batch']['id']} ({claims['batch']['units']} units)"))
        output.fields(rows)
    if report["chain"] is not None and not report["chain"]["trusted"]:
        print(
            f"svcctl: error: signing key {report['kid']} does not chain to a given root: "
            f"{report['chain']['error']} ({report['chain']['code']})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not report["signature_valid"]:
        print(
            f"svcctl: error: signature does not verify with key {report['key_fingerprint']}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _print_new_key(result: dict, *, what: str) -> None:
    print(f"{what}: {result['private_key']} (mode 600)")
    if result["public_key_file"]:
        print(f"public key file: {result['public_key_file']}")
    print(f"public key (base64url): {result['public_key']}")
    print(result["public_key_pem"].rstrip())
    print(f"kid: {result['kid']}")
    print(f"fingerprint (sha256): {result['fingerprint']}")


def _refuse_existing_keys(args) -> None:
    files.refuse_existing(args.out, "--out", force=args.force)
    files.refuse_existing(args.public_out, "--public-out", force=args.force)


def cmd_keygen(args) -> int:
    _refuse_existing_keys(args)
    result = offline.keygen(args.out, force=args.force, public_out=args.public_out)
    if args.json:
        output.print_json(result)
    else:
        _print_new_key(result, what="private key")
    return EXIT_OK


def cmd_root_keygen(args) -> int:
    _refuse_existing_keys(args)
    result = offline.keygen(args.out, force=args.force, public_out=args.public_out)
    if args.json:
        output.print_json(result)
    else:
        _print_new_key(result, what="root key")
    print(
        f"svcctl: warning: {args.out} is a ROOT key: keep it on an offline machine (or "
        "offline media), never on the server; it only signs key certificates "
        "(svcctl certify). Firmware compiles in its public key "
        "(python -m devices vendor --root).",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_certify(args) -> int:
    files.refuse_existing(args.out, "--out", force=args.force)
    now = int(time.time())
    try:
        not_before, not_after = certs.window(
            now=now, not_before=args.not_before, not_after=args.not_after, days=args.days
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    info = certs.certify(
        root_file=args.root,
        key_file=args.key,
        out=args.out,
        use=args.use,
        not_before=not_before,
        not_after=not_after,
        issuer=args.issuer,
        now=now,
        force=args.force,
    )
    if args.json:
        output.print_json({"certificate": args.out, **info.as_dict()})
        return EXIT_OK
    output.fields(
        [
            ("certificate", args.out),
            ("kid", info.kid),
            ("fingerprint", codec.key_fingerprint(info.key)),
            ("use", info.use),
            ("root", info.root),
            ("valid from", output.when(info.not_before)),
            ("valid until", output.when(info.not_after, zero="no end")),
            ("issuer", info.issuer),
        ]
    )
    return EXIT_OK


# Options whose value may be key material: a base64url key begins with "-" one time in
# 64, which argparse would otherwise read as an option of its own.
KEY_VALUED_OPTIONS = frozenset({"--pubkey"})
BASE64URL_KEY = re.compile(r"[A-Za-z0-9_-]{43}")  # a raw Ed25519 public key, unpadded


def _attach_key_values(argv: Sequence[str]) -> list[str]:
    """``--pubkey -6zn...`` -> ``--pubkey=-6zn...`` so that any key spells the same."""
    joined: list[str] = []
    items = iter(argv)
    for item in items:
        if item in KEY_VALUED_OPTIONS:
            value = next(items, None)
            if value is not None and value.startswith("-") and BASE64URL_KEY.fullmatch(value):
                joined.append(f"{item}={value}")
                continue
            joined.append(item)
            if value is not None:
                joined.append(value)
            continue
        joined.append(item)
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_key_values(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"svcctl: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ApiError, OfflineError) as exc:
        print(f"svcctl: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
