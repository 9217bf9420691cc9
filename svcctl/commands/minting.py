"""Offline: minting a device-bound licence with a signing key file, and inspecting a token
or licence file (its signature, its key's chain to a root); files only."""

from __future__ import annotations

import argparse
import os
import sys
import time

from devices import token as codec
from svccore import dates
from svcctl import EXIT_FAILED, EXIT_OK, OfflineError, certs, files, offline, output
from svcctl.commands.base import (
    Command,
    UsageError,
    non_negative,
    positive,
    read_license,
)


def _window(cert: dict) -> str:
    if not cert["not_after"]:
        return f"from {output.when(cert['not_before'])}, no end"
    return dates.span(cert["not_before"], cert["not_after"])


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
    license = read_license(args.source)  # a missing file is the first thing to say
    if args.pubkey is None and not args.root:
        raise UsageError("give the key to verify with: --pubkey FILE, --root FILE, or both")
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


def _mint_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sku", required=True, help="catalogue SKU")
    p.add_argument("--customer", required=True, help="customer id (CUST- prefix optional)")
    p.add_argument("--device", required=True, help="the camera's fingerprint (device id)")
    p.add_argument(
        "--days", type=non_negative, help="term in days (default: the SKU's; 0 = perpetual)"
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
    p.add_argument("--quota", type=non_negative, help="metered API calls (default: SKU's)")
    p.add_argument("--streams", type=positive, help="concurrent streams (default: SKU cap)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")


def _inspect_arguments(p: argparse.ArgumentParser) -> None:
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
        "--at", type=non_negative, metavar="UNIX", help="evaluate the state at this time"
    )


COMMANDS = [
    Command(
        "mint",
        online=False,
        summary="sign an air-gapped, device-bound licence with a signing key file",
        handler=cmd_mint,
        description="Sign a device-bound licence (act=optional) with a signing key file, with no "
        "service and no database. SKU modules and caps come from --catalogue (default: "
        "the seeded catalogue shipped with svcctl; `manage.py export_catalogue` or "
        "`svcctl catalogue --json` give the live one).",
        arguments=_mint_arguments,
    ),
    Command(
        "inspect",
        online=False,
        summary="decode and verify a token or licence file: claims, state, key",
        handler=cmd_inspect,
        description=(
            "Decode a token or licence file, verify its signature with --pubkey, or follow "
            "its signing key (kid) through the file's certificates to a --root as a device "
            "would, and print its claims, validity window, state (active, grace, expired), "
            "the key and the certificates. Exit status 1 when the signature does not verify "
            "or the key does not chain to a root."
        ),
        arguments=_inspect_arguments,
    ),
]
