"""Command line of the device module.

``python -m devices vendor --pubkey FILE --out DIR`` writes ``DIR/devices``, a
self-contained copy of this package with the licence public key compiled in (PEM or
unpadded base64url accepted, contract §2). ``python -m devices fingerprint`` prints this
device's fingerprint, and ``python -m devices keyinfo --pubkey FILE`` a key's fingerprint
as ``/healthz`` shows it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ._version import __version__
from .hardware import fingerprint
from .token import key_fingerprint, public_key_b64url

PACKAGE_DIR = Path(__file__).resolve().parent
PUBKEY_MODULE = "pubkey.py"
PUBKEY_TEMPLATE = '''"""The licence public key compiled into this build of the device module.

Written by ``python -m devices vendor``; key fingerprint {fingerprint}.
An Engine's ``public_key=`` (the ``license_pubkey`` setting) overrides it.
"""

from __future__ import annotations

PUBLIC_KEY: str | None = "{key}"
'''


def read_public_key(path: str) -> str:
    """The key in ``path`` as unpadded base64url of the raw 32 bytes."""
    try:
        text = Path(path).read_text("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"error: cannot read public key {path}: {exc}") from None
    try:
        return public_key_b64url(text)
    except ValueError as exc:
        raise SystemExit(f"error: {path} is not an Ed25519 public key: {exc}") from None


def vendor(pubkey_file: str, out: str, *, force: bool = False) -> Path:
    key = read_public_key(pubkey_file)
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
    text = PUBKEY_TEMPLATE.format(key=key, fingerprint=key_fingerprint(key))
    (target / PUBKEY_MODULE).write_text(text, "ascii")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devices", description="Device module tools.")
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("vendor", help="copy this package with a public key compiled in")
    cmd.add_argument("--pubkey", required=True, help="public key file, PEM or base64url")
    cmd.add_argument("--out", required=True, help="directory to write devices/ into")
    cmd.add_argument("--force", action="store_true", help="replace an existing copy")
    commands.add_parser("fingerprint", help="print this device's fingerprint")
    cmd = commands.add_parser("keyinfo", help="print a public key's fingerprint")
    cmd.add_argument("--pubkey", required=True)
    args = parser.parse_args(argv)
    if args.command == "vendor":
        target = vendor(args.pubkey, args.out, force=args.force)
        key = read_public_key(args.pubkey)
        print(f"vendored devices {__version__} into {target}")
        print(f"public key {key} fingerprint {key_fingerprint(key)}")
    elif args.command == "fingerprint":
        found = fingerprint()
        print(f"{found.value} source={found.source}{' weak' if found.weak else ''}")
    else:
        key = read_public_key(args.pubkey)
        print(f"{key} {key_fingerprint(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
