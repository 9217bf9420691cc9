"""Offline: signing keys, root keys and the certificates a root gives a signing key (files
only). Minting and inspecting licences: :mod:`svcctl.commands.minting`."""

from __future__ import annotations

import argparse
import os
import sys
import time

from devices import token as codec
from svcctl import EXIT_OK, certs, files, offline, output
from svcctl.commands.base import (
    Command,
    UsageError,
    date_arg,
    positive,
)


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


def _keygen_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", required=True, metavar="FILE", help="private key file to create (mode 600)"
    )
    p.add_argument("--public-out", metavar="FILE", help="also write the public key (PEM, mode 644)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing files: licences signed by the old key stop verifying",
    )


def _root_keygen_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", required=True, metavar="FILE", help="private root key file to create (mode 600)"
    )
    p.add_argument("--public-out", metavar="FILE", help="also write the public key (PEM, mode 644)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing files: devices trusting the old root refuse everything it endorsed",
    )


def _certify_arguments(p: argparse.ArgumentParser) -> None:
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
    end.add_argument("--days", type=positive, help="valid for N days from --not-before")
    end.add_argument(
        "--not-after", type=date_arg, metavar="YYYY-MM-DD", help="valid through this UTC day"
    )
    p.add_argument(
        "--not-before", type=date_arg, metavar="YYYY-MM-DD", help="valid from 00:00 UTC of this day"
    )
    p.add_argument(
        "--issuer",
        default=os.environ.get("SVC_ISSUER", offline.DEFAULT_ISSUER),
        help="iss field (default: $SVC_ISSUER or svc-licensing)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out file")


COMMANDS = [
    Command(
        "keygen",
        online=False,
        summary="create an Ed25519 signing key (mode 600)",
        handler=cmd_keygen,
        description=(
            "Create an Ed25519 signing key (PKCS#8 PEM, mode 600) and print its public key "
            "and fingerprint. Refuses to overwrite an existing file without --force. Same "
            "code as `manage.py keygen`."
        ),
        arguments=_keygen_arguments,
    ),
    Command(
        "root-keygen",
        online=False,
        summary="create a root key (mode 600), for an offline machine",
        handler=cmd_root_keygen,
        description=(
            "Create an Ed25519 root key (PKCS#8 PEM, mode 600) and print its key id (kid) "
            "and fingerprint. Firmware compiles in its public key (python -m devices vendor "
            "--root); the root only endorses signing keys (svcctl certify) and belongs on "
            "an offline machine, never on the server. Refuses to overwrite an existing file "
            "without --force."
        ),
        arguments=_root_keygen_arguments,
    ),
    Command(
        "certify",
        online=False,
        summary="endorse a signing key with the root: a key certificate",
        handler=cmd_certify,
        description=(
            "Sign a key certificate (SVCK1, one line) for --key with the root key: devices "
            "that trust the root then trust licences signed by that key within the "
            "certificate's window. A certificate covers signatures made from --not-before "
            "(default: now) to its end (default: none), so for a key that has already "
            "signed licences give the date it was created."
        ),
        arguments=_certify_arguments,
    ),
]
