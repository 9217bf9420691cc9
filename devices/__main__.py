"""Command line of the device module.

``python -m devices vendor --root ROOT.pub [--root ROOT2.pub] [--pubkey FILE] --out DIR``
writes ``DIR/devices``, a self-contained copy of this package with the root keys (and,
given ``--pubkey``, one directly trusted licence key) compiled in (PEM or unpadded
base64url accepted, contract §2). ``python -m devices fingerprint`` prints this device's
fingerprint, and ``python -m devices keyinfo --pubkey FILE`` a key's fingerprint as
``/healthz`` shows it, and its key id (``kid``).

The air-gapped file exchange (:mod:`devices.exchange`, docs/devices.md):
``python -m devices offline-request --batch-key FILE --state-dir DIR --out req.svcreq``
writes an activation request, ``python -m devices usage-export --state-dir DIR --out
usage.svcuse`` the spool's closed periods, and ``python -m devices offline-install
--state-dir DIR FILE`` verifies and installs an answer file (``.svcresp``, ``.svcrcpt``).
A refusal prints ``error: CODE: message`` and exits 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._version import __version__
from .errors import LicenseError
from .hardware import fingerprint
from .token import key_fingerprint, key_id, public_key_b64url

PACKAGE_DIR = Path(__file__).resolve().parent
PUBKEY_MODULE = "pubkey.py"
PUBKEY_TEMPLATE = '''"""The keys compiled into this build of the device module.

Written by ``python -m devices vendor``.
ROOT_KEYS: the roots of trust; a licence is accepted when its signing key (kid) chains
to one of them through a key certificate. {roots_note}
PUBLIC_KEY: a licence key trusted directly; {key_note}
An Engine's ``public_key=`` (the ``license_pubkey`` setting) overrides it.
"""

from __future__ import annotations

ROOT_KEYS: tuple[str, ...] = {roots}
PUBLIC_KEY: str | None = {key}
'''


def read_public_key(path: str) -> str:
    """The key in ``path`` as unpadded base64url of the raw 32 bytes."""
    try:
        text = Path(path).read_text("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"error: cannot read public key {path}: {exc}") from None
    if "PRIVATE KEY" in text:
        raise SystemExit(f"error: {path} is a private key; give its public key (.pub)")
    try:
        return public_key_b64url(text)
    except ValueError as exc:
        raise SystemExit(f"error: {path} is not an Ed25519 public key: {exc}") from None


def pubkey_module(roots: list[str], key: str | None) -> str:
    """Source of the vendored ``pubkey.py``: ``roots`` and ``key`` as base64url."""
    if len(roots) > 1:
        roots_source = "(\n" + "".join(f'    "{root}",\n' for root in roots) + ")"
    else:
        roots_source = "".join(f'("{root}",)' for root in roots) or "()"
    return PUBKEY_TEMPLATE.format(
        roots=roots_source,
        key=f'"{key}"' if key else "None",
        roots_note=(
            "Key ids " + ", ".join(key_id(root) for root in roots) + "."
            if roots
            else "None: this build trusts no root."
        ),
        key_note=f"fingerprint\n{key_fingerprint(key)}." if key else "none in this build.",
    )


def vendor(
    pubkey_file: str | None,
    out: str,
    *,
    force: bool = False,
    root_files: Sequence[str] = (),
) -> Path:
    if pubkey_file is None and not root_files:
        raise SystemExit("error: give --root (a root of trust), --pubkey, or both")
    key = read_public_key(pubkey_file) if pubkey_file is not None else None
    roots = list(dict.fromkeys(read_public_key(path) for path in root_files))
    target = Path(out).resolve() / PACKAGE_DIR.name
    if target == PACKAGE_DIR:
        raise SystemExit("error: --out would overwrite this package itself")
    if target.exists():
        if not force:
            raise SystemExit(f"error: {target} exists; pass --force to replace it")
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for source in sorted(PACKAGE_DIR.glob("*.py")):
        if source.name != PUBKEY_MODULE:
            shutil.copy2(source, target / source.name)
    (target / PUBKEY_MODULE).write_text(pubkey_module(roots, key), "ascii")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devices", description="Device module tools.")
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser(
        "vendor", help="copy this package with root keys and/or a public key compiled in"
    )
    cmd.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="FILE",
        help="root public key to trust (repeatable; PEM or base64url)",
    )
    cmd.add_argument("--pubkey", help="a licence public key to trust directly, PEM or base64url")
    cmd.add_argument("--out", required=True, help="directory to write devices/ into")
    cmd.add_argument("--force", action="store_true", help="replace an existing copy")
    commands.add_parser("fingerprint", help="print this device's fingerprint")
    cmd = commands.add_parser("keyinfo", help="print a public key's fingerprint and key id")
    cmd.add_argument("--pubkey", required=True)
    _exchange_commands(commands)
    args = parser.parse_args(argv)
    if args.command in EXCHANGE_COMMANDS:
        try:
            return _exchange(args)
        except LicenseError as exc:
            print(f"error: {exc.code}: {exc}", file=sys.stderr)
            return 2
    if args.command == "vendor":
        if args.pubkey is None and not args.root:
            parser.error("vendor needs --root (a root of trust), --pubkey, or both")
        target = vendor(args.pubkey, args.out, force=args.force, root_files=args.root)
        print(f"vendored devices {__version__} into {target}")
        for root in dict.fromkeys(read_public_key(path) for path in args.root):
            print(f"root key {root} fingerprint {key_fingerprint(root)} kid={key_id(root)}")
        if args.pubkey is not None:
            key = read_public_key(args.pubkey)
            print(f"public key {key} fingerprint {key_fingerprint(key)} kid={key_id(key)}")
            if args.root:
                print(
                    "note: with root keys compiled in, an Engine trusts only keys the roots "
                    "certify; PUBLIC_KEY is kept for code that reads it directly",
                    file=sys.stderr,
                )
    elif args.command == "fingerprint":
        found = fingerprint()
        print(f"{found.value} source={found.source}{' weak' if found.weak else ''}")
    else:
        key = read_public_key(args.pubkey)
        print(f"{key} {key_fingerprint(key)} kid={key_id(key)}")
    return 0


EXCHANGE_COMMANDS = ("offline-request", "usage-export", "offline-install")


def _exchange_commands(commands: Any) -> None:
    def device_options(cmd: Any) -> None:
        cmd.add_argument("--state-dir", required=True, help="the device's licence state directory")
        cmd.add_argument("--device-id", help="default: this device's fingerprint")

    def key_options(cmd: Any) -> None:
        cmd.add_argument("--pubkey", help="licence public key (a build without root keys)")

    cmd = commands.add_parser("offline-request", help="write an activation request file")
    cmd.add_argument("--batch-key", required=True, metavar="FILE", help="the batch key file")
    cmd.add_argument("--out", required=True, help="the request file to write (.svcreq)")
    cmd.add_argument("--text", action="store_true", help="print it as text too (for a QR code)")
    device_options(cmd)
    cmd = commands.add_parser("usage-export", help="write the spool's closed periods to a file")
    cmd.add_argument("--out", required=True, help="the usage file to write (.svcuse)")
    device_options(cmd)
    key_options(cmd)
    cmd = commands.add_parser("offline-install", help="verify and install an answer file")
    cmd.add_argument("file", help="an answer file (.svcresp or .svcrcpt)")
    device_options(cmd)
    key_options(cmd)


def _write_out(path: str, text: str) -> None:
    try:
        target = Path(path)
        target.write_text(text + "\n", "ascii")
        target.chmod(0o600)  # a usage export and a batch key are credentials
    except OSError as exc:
        raise SystemExit(f"error: cannot write {path}: {exc.strerror or exc}") from None


def _exchange(args: argparse.Namespace) -> int:
    from . import offline, offline_install, offline_request, usage_export

    engine = {"device_id": args.device_id}
    if getattr(args, "pubkey", None):
        engine["public_key"] = read_public_key(args.pubkey)
    if args.command == "offline-request":
        text = offline_request(
            offline.read_file(args.batch_key, "batch key"), args.state_dir, device_id=args.device_id
        )
        _write_out(args.out, text)
        print(f"wrote {args.out} ({len(text) + 1} bytes): carry it to the service")
        if args.text:
            print(text)
    elif args.command == "usage-export":
        text = usage_export(args.state_dir, **engine)
        _write_out(args.out, text)
        print(f"wrote {args.out} ({len(text) + 1} bytes): carry it to the service")
    else:
        summary = offline_install(
            offline.read_file(args.file, "answer file"), args.state_dir, **engine
        )
        print(" ".join(f"{name}={value}" for name, value in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
