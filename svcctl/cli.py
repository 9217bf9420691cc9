"""``svcctl``: operate the licensing authority from a terminal.

Exit status: 0 done, 1 failed (the server's or the tool's reason is printed), 2 usage.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence

from svcctl import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    OfflineError,
    commands,
)
from svcctl.client import ApiError
from svcctl.commands.base import DEFAULT_URL, UsageError

DESCRIPTION = """\
Operate the licensing authority: customers, batches, licences, revocation, fleet and
invoices through the HTTP admin API; air-gapped licences, token inspection and signing
keys offline, from files alone. `svcctl <command> --help` describes each command.
"""


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
  svcctl renew --batch <BATCH-ID> --dry-run       # the new end and the bill; renews nothing
  svcctl renew --batch <BATCH-ID> --key acme-renewal-2027 --yes  # same key again: no 2nd renewal
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

    for spec in commands.ordered():
        p = sub.add_parser(
            spec.name,
            description=textwrap.fill(spec.description or spec.summary, width=88),
            parents=parents[spec.online],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(handler=spec.handler)
        if spec.arguments is not None:
            spec.arguments(p)
        listed[spec.online].append((spec.name, spec.summary))

    width = max(len(name) for names in listed.values() for name, _ in names) + 2
    for group, names in ((online_group, listed[True]), (offline_group, listed[False])):
        group.description = "".join(f"{name:<{width}}{summary}\n" for name, summary in names)
    return parser


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
