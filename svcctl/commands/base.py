"""What every command shares: its description (:class:`Command`), the argument types,
the connection to the service, saving a token to a file and reading a licence file."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from svccore.paging import FLEET_PAGE_MAX
from svcctl import EXIT_FAILED, EXIT_OK, OfflineError, certs, files, offline
from svcctl.client import AdminClient


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, whether it talks to the service, the one-line summary of
    ``svcctl --help``, the function that runs it, its longer description (default: the
    summary) and the function that adds its arguments."""

    name: str
    online: bool
    summary: str
    handler: Callable[[argparse.Namespace], int]
    description: str | None = None
    arguments: Callable[[argparse.ArgumentParser], None] | None = None


DEFAULT_URL = "http://127.0.0.1:8000"


CLOCK_SLACK = 1


FLEET_LIMIT_MAX = FLEET_PAGE_MAX  # the service's, svccore.paging


class UsageError(Exception):
    pass


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def positive(text: str) -> int:
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def fleet_limit(text: str) -> int:
    value = positive(text)
    if value > FLEET_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be <= {FLEET_LIMIT_MAX}, not {value}")
    return value


def date_arg(text: str) -> int:
    try:
        return certs.parse_date(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def connect(args) -> AdminClient:
    url = args.url or os.environ.get("SVC_URL") or DEFAULT_URL
    key = args.admin_key or os.environ.get("SVC_ADMIN_KEY")
    if not key:
        raise UsageError("no admin key: set SVC_ADMIN_KEY or pass --admin-key")
    return AdminClient(url, key, timeout=args.timeout)


def save_token(args, token: str) -> str:
    """Write ``--token-out`` (mode 600). The service has issued the token already, so a
    refusal is returned, for :func:`token_saved` to report once the token is printed,
    rather than raised."""
    if not args.token_out:
        return ""
    try:
        files.write_secret(args.token_out, token + "\n", option="--token-out", force=args.force)
    except OfflineError as exc:
        return str(exc)
    return ""


def token_saved(problem: str) -> int:
    if not problem:
        return EXIT_OK
    print(f"svcctl: error: {problem}; the token is in the output above", file=sys.stderr)
    return EXIT_FAILED


def read_license(source: str):
    if source == "-":
        return offline.parse_license(sys.stdin.read())
    return offline.read_license(source)
