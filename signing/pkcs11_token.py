"""The PKCS#11 token behind :class:`signing.signers.Pkcs11Signer` (and ``manage.py
keygen``): its configuration, the module loaded once per process and the lock every call
into it is made under (see :mod:`signing.signers` for why), the PIN, the token and a
logged-in session, the key pair under a label, and making one on the token."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pkcs11
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings
from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
from pkcs11.exceptions import PKCS11Error
from pkcs11.util.ec import encode_named_curve_parameters

from config.errors import SignerUnavailable

# Ed25519 is named by its OID (RFC 8410); tokens implementing PKCS#11 3.0 before the
# OID was settled take the printable curve name instead.
ED25519_OID = "1.3.101.112"
ED25519_PRINTABLE = b"\x13\x0cedwards25519"


@dataclass(frozen=True)
class Pkcs11Config:
    module: str
    token_label: str
    key_label: str
    pin_file: str  # "": the PIN is in the environment (SVC_PKCS11_PIN)
    timeout: float
    sessions: int

    def describe(self) -> str:
        return f"PKCS#11 token {self.token_label!r} (module {self.module})"


def pkcs11_config(*, key_label: str | None = None) -> Pkcs11Config:
    return Pkcs11Config(
        module=str(settings.SVC_PKCS11_MODULE),
        token_label=settings.SVC_PKCS11_TOKEN_LABEL,
        key_label=key_label or settings.SVC_PKCS11_KEY_LABEL,
        pin_file=str(settings.SVC_PKCS11_PIN_FILE or ""),
        timeout=settings.SVC_PKCS11_TIMEOUT,
        sessions=settings.SVC_PKCS11_SESSIONS,
    )


_libraries: dict[str, Any] = {}
_libraries_lock = threading.Lock()
# Held around every call into a module (signing.signers says why): module path -> lock.
_module_locks: dict[str, threading.RLock] = {}


# The least time a new process's first connection to the token gets (see Pkcs11Signer).
CONNECT_SECONDS = 15.0


def module_lock(module: str) -> threading.RLock:
    with _libraries_lock:
        return _module_locks.setdefault(module, threading.RLock())


def library(module: str) -> Any:
    """The PKCS#11 module at ``module``, loaded once per process (a module is initialised
    once per process; a reconnect finalises and initialises it again)."""
    with _libraries_lock:
        lib = _libraries.get(module)
        if lib is None:
            if not Path(module).is_file():
                raise SignerUnavailable(f"PKCS#11 module {module} (SVC_PKCS11_MODULE) not found")
            try:
                lib = pkcs11.lib(module)
            except (PKCS11Error, RuntimeError, OSError) as exc:
                raise SignerUnavailable(
                    f"PKCS#11 module {module} could not be loaded ({error_name(exc)})"
                ) from None
            _libraries[module] = lib
        return lib


def read_pin(config: Pkcs11Config) -> str:
    """The user PIN, read now from ``SVC_PKCS11_PIN_FILE`` (mode 600, like a key file) or
    the environment's ``SVC_PKCS11_PIN``. Errors name where it was looked for, never it."""
    if not config.pin_file:
        pin = os.environ.get("SVC_PKCS11_PIN", "")
        if not pin:
            raise SignerUnavailable("no PIN: set SVC_PKCS11_PIN_FILE or SVC_PKCS11_PIN")
        return pin
    path = Path(config.pin_file)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SignerUnavailable(
            f"PIN file {path} (SVC_PKCS11_PIN_FILE) unreadable ({type(exc).__name__})"
        ) from None
    if mode & 0o077:
        raise SignerUnavailable(
            f"PIN file {path} has mode {mode:03o}: readable by group or others; "
            f"run `chmod 600 {path}`"
        )
    pin = text.strip("\r\n")
    if not pin:
        raise SignerUnavailable(f"PIN file {path} (SVC_PKCS11_PIN_FILE) is empty")
    return pin


class TokenAbsent(SignerUnavailable):
    """The module lists no token with the label: unplugged, mislabelled, or (SoftHSM)
    unreadable for a moment while another process writes it."""


def find_token(lib: Any, config: Pkcs11Config) -> Any:
    try:
        return lib.get_token(token_label=config.token_label)
    except pkcs11.NoSuchToken:
        raise TokenAbsent(
            f"{config.describe()} is not present (unplugged, or no token has that label)"
        ) from None
    except pkcs11.MultipleTokensReturned:
        raise SignerUnavailable(
            f"more than one token is labelled {config.token_label!r} "
            f"(module {config.module}); give each a unique label"
        ) from None


def login(token: Any, config: Pkcs11Config, pin: str, *, rw: bool = False) -> Any:
    """A session on ``token`` logged in as its user with ``pin``."""
    try:
        return token.open(rw=rw, user_pin=pin)
    except pkcs11.UserAlreadyLoggedIn:
        return token.open(rw=rw)  # this process is logged in already: sessions share it
    except (pkcs11.PinIncorrect, pkcs11.PinInvalid, pkcs11.PinLenRange):
        raise SignerUnavailable(pin_refused(config)) from None
    except pkcs11.PinLocked:
        raise SignerUnavailable(
            f"{config.describe()} is locked: its user PIN is blocked after wrong PINs; "
            "the token's security officer must unlock it"
        ) from None


def pin_refused(config: Pkcs11Config) -> str:
    source = config.pin_file or "SVC_PKCS11_PIN"
    return (
        f"{config.describe()} refused the PIN from {source}; it is not tried again "
        "until it changes (a token locks its PIN after a few wrong ones)"
    )


def public_key_of(session: Any, config: Pkcs11Config) -> Ed25519PublicKey:
    """The Ed25519 public key labelled ``config.key_label`` on the token."""
    try:
        public = session.get_key(object_class=ObjectClass.PUBLIC_KEY, label=config.key_label)
    except pkcs11.NoSuchKey:
        raise SignerUnavailable(
            f"no public key labelled {config.key_label!r} (SVC_PKCS11_KEY_LABEL) on "
            f"{config.describe()}; create the key pair with `python manage.py keygen`"
        ) from None
    except pkcs11.MultipleObjectsReturned:
        raise SignerUnavailable(
            f"more than one public key is labelled {config.key_label!r} on {config.describe()}"
        ) from None
    point = bytes(public[Attribute.EC_POINT])
    # CKA_EC_POINT is a DER OCTET STRING of the 32 raw bytes; some tokens give them bare.
    if len(point) == 34 and point[:2] == b"\x04\x20":
        point = point[2:]
    if len(point) != 32:
        raise SignerUnavailable(
            f"key {config.key_label!r} on {config.describe()} is not an Ed25519 key"
        )
    return Ed25519PublicKey.from_public_bytes(point)


def private_key_of(session: Any, config: Pkcs11Config) -> Any:
    try:
        return session.get_key(object_class=ObjectClass.PRIVATE_KEY, label=config.key_label)
    except pkcs11.NoSuchKey:
        raise SignerUnavailable(
            f"no private key labelled {config.key_label!r} (SVC_PKCS11_KEY_LABEL) on "
            f"{config.describe()}; create the key pair with `python manage.py keygen`"
        ) from None
    except pkcs11.MultipleObjectsReturned:
        raise SignerUnavailable(
            f"more than one private key is labelled {config.key_label!r} on {config.describe()}"
        ) from None


def generate_key(config: Pkcs11Config, *, force: bool = False) -> Ed25519PublicKey:
    """Create an Ed25519 key pair inside the token, labelled ``config.key_label``: the
    private half sensitive and never extractable. An existing pair under the label is
    kept (SignerUnavailable) unless ``force``, which destroys it first."""
    with module_lock(config.module):
        return _generate_key(config, force=force)


def _generate_key(config: Pkcs11Config, *, force: bool) -> Ed25519PublicKey:
    lib = library(config.module)
    token = find_token(lib, config)
    with login(token, config, read_pin(config), rw=True) as session:
        existing = [
            obj
            for kind in (ObjectClass.PRIVATE_KEY, ObjectClass.PUBLIC_KEY)
            for obj in session.get_objects(
                {Attribute.CLASS: kind, Attribute.LABEL: config.key_label}
            )
        ]
        if existing and not force:
            raise SignerUnavailable(
                f"{config.describe()} already holds a key labelled {config.key_label!r}; "
                "pass --force to destroy it (every licence it signed stops verifying) or "
                "choose another --label"
            )
        for obj in existing:
            obj.destroy()
        last: PKCS11Error | None = None
        for params in (encode_named_curve_parameters(ED25519_OID), ED25519_PRINTABLE):
            try:
                session.generate_keypair(
                    KeyType.EC_EDWARDS,
                    0,
                    store=True,
                    label=config.key_label,
                    mechanism=Mechanism.EC_EDWARDS_KEY_PAIR_GEN,
                    public_template={Attribute.EC_PARAMS: params, Attribute.VERIFY: True},
                    private_template={
                        Attribute.SENSITIVE: True,
                        Attribute.EXTRACTABLE: False,
                        Attribute.SIGN: True,
                        Attribute.PRIVATE: True,
                    },
                )
                break
            except PKCS11Error as exc:
                last = exc
        else:
            raise SignerUnavailable(
                f"{config.describe()} cannot create an Ed25519 key ({error_name(last)}); it needs "
                "CKM_EC_EDWARDS_KEY_PAIR_GEN and CKM_EDDSA (PKCS#11 3.0)"
            )
        return public_key_of(session, config)


def error_name(exc: BaseException | None) -> str:
    """A PKCS#11 error by its class name (CKR_...): its text is often empty."""
    if exc is None:
        return "unknown error"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
