"""Root keys and key certificates, offline.

A root key (``svcctl root-keygen``) lives on an offline machine, and firmware compiles in
its public key (``python -m devices vendor --root``). The root endorses each signing
key, the server's and the air-gap key ``svcctl mint`` signs with, with a key certificate
(``svcctl certify``; the ``SVCK1`` format and its checks are ``devices.keys``). ``mint``
puts its key's certificate into the licence file, and ``inspect --root`` follows the
chain as a device would.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from devices import keys as devkeys
from devices import token as codec
from svccore import authority, dates, licensefile
from svccore.keyfile import KeyFileError, read_private_key
from svccore.timeunits import DAY
from svcctl import OfflineError

CERT_SUFFIX = ".cert"


# --- key files -------------------------------------------------------------------------


def read_public_key(value: str) -> Ed25519PublicKey:
    """A public key from a file (PEM or base64url), or given inline as base64url."""
    path = Path(value)
    if path.is_file():
        text = path.read_text(encoding="ascii", errors="replace")
        if "PRIVATE KEY" in text:
            raise OfflineError(f"{value} is a private key; give the public key (keygen prints it)")
    else:
        text = value
    try:
        return codec.load_public_key(text)
    except ValueError as exc:
        if not path.exists() and not text.startswith("-----"):
            raise OfflineError(f"public key file {value} does not exist") from None
        raise OfflineError(
            f"{value} is not an Ed25519 public key (PEM or base64url): {exc}"
        ) from None


def read_signing_key(path: Path | str, *, root: bool = False):
    """A private key file, refused when readable by group or others (svccore.keyfile); a
    missing one names the svcctl command that makes it."""
    if root:
        what, create = "root key", f"svcctl root-keygen --out {path}"
    else:
        what, create = "signing key", f"svcctl keygen --out {path}"
    try:
        return read_private_key(path, what=what, create=create)
    except KeyFileError as exc:
        raise OfflineError(str(exc)) from None


def read_key_to_certify(path: Path | str) -> Ed25519PublicKey:
    """The public half of a private key file (mode-checked), or a public key file."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        raise OfflineError(f"key file {path} does not exist") from None
    except OSError as exc:
        raise OfflineError(f"cannot read key file {path}: {exc.strerror}") from None
    if "PRIVATE KEY" in text:
        return read_signing_key(path).public_key()
    return read_public_key(str(path))


def read_roots(values: Iterable[str]) -> dict[str, Ed25519PublicKey]:
    """Root public keys by key id, as ``devices.keys.parse_certificate`` takes them."""
    roots = {}
    for value in values:
        key = read_public_key(value)
        roots[codec.key_id(key)] = key
    return roots


# --- certificates ----------------------------------------------------------------------


def parse_date(text: str) -> int:
    """``YYYY-MM-DD`` as Unix seconds at 00:00 UTC of that day."""
    try:
        day = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD): {text!r}") from None
    return int(day.timestamp())


def window(
    *,
    now: int,
    not_before: int | None = None,
    not_after: int | None = None,
    days: int | None = None,
) -> tuple[int, int]:
    """A certificate's ``(nbf, exp)``: from ``not_before`` (00:00 UTC of that day, default
    ``now``) for ``days`` days, or through the whole UTC day ``not_after``, or with no
    end (0). ValueError for a window that ends before it starts or before ``now``."""
    start = now if not_before is None else not_before
    if days is not None:
        end = start + days * DAY
    elif not_after is not None:
        end = not_after + DAY - 1
    else:
        end = 0
    if end and end < start:
        raise ValueError(
            f"the certificate would end ({_day(end)}) before it starts ({_day(start)})"
        )
    if end and end < now:
        raise ValueError(f"the certificate would have ended already ({_day(end)})")
    return start, end


def _day(moment: int) -> str:
    return dates.moment(moment)


@dataclass(frozen=True)
class CertInfo:
    """What a certificate says, NOT verified (``devices.keys.parse_certificate`` does
    that): for display, and to check it names the right key before trusting it."""

    text: str
    kid: str
    key: str  # base64url of the raw public key it endorses
    root: str
    use: str
    issuer: str
    issued_at: int
    not_before: int
    not_after: int  # 0: no end

    def covers(self, moment: int) -> bool:
        return self.not_before <= moment and (not self.not_after or moment <= self.not_after)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kid": self.kid,
            "key": self.key,
            "key_fingerprint": codec.key_fingerprint(self.key),
            "root": self.root,
            "use": self.use,
            "issuer": self.issuer,
            "issued_at": self.issued_at,
            "not_before": self.not_before,
            "not_after": self.not_after,
        }


def describe(text: str) -> CertInfo:
    """The fields of a key certificate, read without checking its signature."""
    doc = devkeys.unverified_payload(text) if text.startswith(devkeys.CERT_PREFIX + ".") else {}
    try:
        key = codec.load_public_key(doc.get("key"))
        good = (
            doc.get("typ") == devkeys.CERT_TYPE
            and doc.get("kid") == codec.key_id(key)
            and doc.get("use") in devkeys.USES
            and isinstance(doc.get("root"), str)
            and all(type(doc.get(n)) is int and doc[n] >= 0 for n in ("iat", "nbf", "exp"))
        )
    except ValueError:
        good = False
    if not good:
        raise OfflineError("not a key certificate (SVCK1) of the expected shape")
    return CertInfo(
        text=text,
        kid=doc["kid"],
        key=codec.public_key_b64url(key),
        root=doc["root"],
        use=doc["use"],
        issuer=str(doc.get("iss", "")),
        issued_at=doc["iat"],
        not_before=doc["nbf"],
        not_after=doc["exp"],
    )


def certify(
    *,
    root_file: Path | str,
    key_file: Path | str,
    out: Path | str,
    use: str,
    not_before: int,
    not_after: int,
    issuer: str,
    now: int,
    force: bool = False,
) -> CertInfo:
    """Endorse the key in ``key_file`` with the root in ``root_file``: write a one-line
    ``SVCK1`` certificate to ``out`` (never over an existing file without ``force``)."""
    root = read_signing_key(root_file, root=True)
    public = read_key_to_certify(key_file)
    if codec.key_id(public) == codec.key_id(root.public_key()):
        raise OfflineError(
            f"{key_file} is the root key itself: a root endorses signing keys and signs "
            "nothing else; certify a key made with `svcctl keygen`"
        )
    text = authority.sign_certificate(
        root,
        public,
        issued_at=now,
        not_before=not_before,
        not_after=not_after,
        use=use,
        issuer=issuer,
    )
    try:
        licensefile.write_text(out, text + "\n", force=force)
    except licensefile.LicenseFileError as exc:
        raise OfflineError(str(exc)) from None
    return describe(text)


def default_certificate_path(key_file: Path | str) -> Path:
    """Where ``certify`` output for a key is looked for: ``airgap.pem`` -> ``airgap.cert``."""
    path = Path(key_file)
    return path.with_suffix(CERT_SUFFIX) if path.suffix == ".pem" else Path(f"{path}{CERT_SUFFIX}")


def read_certificates(path: Path | str) -> list[str]:
    """The certificate lines of a certificate file (one or more ``SVCK1`` lines)."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except FileNotFoundError:
        raise OfflineError(f"certificate file {path} does not exist") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise OfflineError(f"cannot read certificate file {path}: {exc}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not all(line.startswith(devkeys.CERT_PREFIX + ".") for line in lines):
        raise OfflineError(f"{path} is not a certificate file (SVCK1 lines, from `svcctl certify`)")
    return lines


def certificates_for_key(
    path: Path | str,
    public_key: Any,
    *,
    at: int,
    roots: dict[str, Ed25519PublicKey] | None = None,
) -> list[CertInfo]:
    """The certificates in ``path``, each checked to endorse ``public_key`` (its ``kid``
    and raw key) for a signature made at ``at``, and with ``roots`` verified under one of
    them, so a licence never ships with a certificate a device would refuse."""
    kid, raw = codec.key_id(public_key), codec.public_key_b64url(public_key)
    found = []
    for text in read_certificates(path):
        try:
            info = describe(text)
        except OfflineError as exc:
            raise OfflineError(f"{path}: {exc}") from None
        if (info.kid, info.key) != (kid, raw):
            raise OfflineError(
                f"{path} certifies key {info.kid}, not the signing key {kid}; give the "
                "certificate made for this key (--cert)"
            )
        if not info.covers(at):
            raise OfflineError(
                f"{path} certifies key {kid} from {_day(info.not_before)} to "
                f"{_day(info.not_after) if info.not_after else 'no end'}, not now: devices "
                "would refuse the licence (KEY_EXPIRED)"
            )
        if roots:
            try:
                devkeys.parse_certificate(text, roots)
            except devkeys.KeyNotTrusted as exc:
                raise OfflineError(f"{path}: {exc} ({exc.code})") from None
        found.append(info)
    return found
