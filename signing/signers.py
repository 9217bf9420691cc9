"""Signers: what holds the authority's private key and makes its Ed25519 signatures.

Every signature the service makes (licences, batch keys, revocation-list pages, usage
receipts) goes through one signer, chosen by ``SVC_SIGNER``:

- ``file`` (the default, what ``make run`` uses): the PEM key of
  ``SVC_SIGNING_KEY_FILE``, read into this process.
- ``pkcs11``: a key that never leaves a PKCS#11 token (an HSM, a network HSM or cloud
  KMS with a PKCS#11 module, SoftHSM2 in development), signing with ``CKM_EDDSA``. The
  process holds the token's public key and a few logged-in sessions, never the private
  key; the PIN is read from ``SVC_PKCS11_PIN_FILE`` or ``SVC_PKCS11_PIN`` when the
  process logs in, and never logged or kept in settings.

A signer has the surface the device codec uses of cryptography's ``Ed25519PrivateKey``
(``sign(data) -> bytes``, ``public_key()``), so ``devices.token`` and
``devices.documents`` sign through either unchanged.

A PKCS#11 token that is unplugged, locked or too slow makes ``sign`` raise
:class:`config.errors.SignerUnavailable` (503 with ``Retry-After``) within
``SVC_PKCS11_TIMEOUT`` seconds; whatever transaction was signing rolls back with it. The
signer reconnects by itself (finalising and initialising the module again, logging in
again) on the next signature after a failure, at most once per :data:`RETRY_SECONDS`,
and checks that the key under the label is still the one it started with. A PIN the
token refused is never tried again until it changes: a real token locks after a few
wrong PINs.

Concurrency: signatures run on this process's pool of ``SVC_PKCS11_SESSIONS`` threads,
each with its own session opened once and reused. python-pkcs11 initialises the module
without OS locking (``C_Initialize(NULL)``), which promises the module one caller at a
time, and SoftHSM2 then runs without locks (concurrent calls crash it): so every call
into a module is made under that module's lock
(:func:`signing.pkcs11_token.module_lock`), one at a time per process. Processes
(gunicorn workers) sign in parallel. A reconnect waits until no signature is in flight.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from pkcs11 import Mechanism
from pkcs11.exceptions import PKCS11Error

from config.errors import SignerUnavailable
from signing.pkcs11_token import (
    CONNECT_SECONDS,
    Pkcs11Config,
    TokenAbsent,
    error_name,
    find_token,
    library,
    login,
    module_lock,
    pin_refused,
    pkcs11_config,
    private_key_of,
    public_key_of,
    raw_public,
    read_pin,
)
from svccore.keyfile import KeyFileError, read_private_key

log = logging.getLogger(__name__)

FILE = "file"
PKCS11 = "pkcs11"
# After a failed reconnect, each process tries the token again at most this often.
RETRY_SECONDS = 1.0
# /healthz probes the token with a signature; one that passed this recently stands.
CHECK_REUSE_SECONDS = 1.0
PROBE = b"svc-licensing signer probe"

T = TypeVar("T")


class Signer(Protocol):
    """What the service signs with: the duck-typed surface of ``Ed25519PrivateKey`` the
    device codec uses, plus what /healthz reports."""

    kind: str

    def sign(self, data: bytes) -> bytes: ...

    def public_key(self) -> Ed25519PublicKey: ...

    def check(self) -> None: ...

    def close(self) -> None: ...


# --- configuration ------------------------------------------------------------------


def configured() -> tuple[str, Any]:
    """The signer the settings ask for, as a hashable value: (kind, path or config)."""
    if settings.SVC_SIGNER == PKCS11:
        return PKCS11, pkcs11_config()
    return FILE, str(settings.SVC_SIGNING_KEY_FILE)


def load(kind: str, config: Any) -> Signer:
    """A signer for ``configured()``'s value. ImproperlyConfigured when the key cannot be
    used at all (no file, no such token or key, a refused PIN): start-up stops on it."""
    if kind == PKCS11:
        try:
            return Pkcs11Signer(config)
        except SignerUnavailable as exc:
            raise ImproperlyConfigured(exc.detail) from None
    return FileSigner(config)


# --- the file signer ------------------------------------------------------------------


class FileSigner:
    """The Ed25519 key of a PEM file (mode 600), held in this process."""

    kind = FILE

    def __init__(self, path: str) -> None:
        try:
            self.key: Ed25519PrivateKey = read_private_key(path)
        except KeyFileError as exc:
            raise ImproperlyConfigured(str(exc)) from None
        self._public = self.key.public_key()
        self.path = path

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data)

    def public_key(self) -> Ed25519PublicKey:
        return self._public

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass


# --- PKCS#11: the signer ------------------------------------------------------------------


class Pkcs11Signer:
    """Signs with the token's key through a pool of sessions; see the module docstring.

    Connecting (at construction) reads the public key and proves the pair with a test
    signature; a token that cannot sign then raises SignerUnavailable."""

    kind = PKCS11

    def __init__(self, config: Pkcs11Config) -> None:
        self.config = config
        self._cond = threading.Condition()
        self._in_flight = 0
        self._reconnecting = False
        self._broken = True  # not connected yet
        self._problem = f"{config.describe()} not connected yet"
        self._retry_at = 0.0
        self._generation = 0
        self._pid = 0
        self._token: Any = None
        self._login_session: Any = None
        self._refused_pin = ""  # digest of the PIN the token refused
        self._public: Ed25519PublicKey | None = None
        self._checked_at = float("-inf")
        self._local = threading.local()
        self._module_lock = module_lock(config.module)
        self._pool = ThreadPoolExecutor(config.sessions, thread_name_prefix="pkcs11-signer")
        # Connecting is once per process and may wait for the token while sibling
        # workers connect at the same moment: it gets CONNECT_SECONDS when
        # SVC_PKCS11_TIMEOUT is shorter, and a token the module does not list is looked
        # for again (a reinitialised module each RETRY_SECONDS) until then, so that a
        # worker started while the token is briefly out of view does not stop the server.
        # A token that cannot sign (a refused PIN, no such key) stops it at once.
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            try:
                self._run(self._probe, timeout=max(config.timeout, CONNECT_SECONDS))
                break
            except TokenAbsent:
                if time.monotonic() + RETRY_SECONDS > deadline:
                    self.close()
                    raise
                time.sleep(RETRY_SECONDS)
            except SignerUnavailable:
                self.close()
                raise

    # the public surface

    def sign(self, data: bytes) -> bytes:
        return self._run(lambda: self._sign(data))

    def public_key(self) -> Ed25519PublicKey:
        assert self._public is not None  # set by the connection the constructor made
        return self._public

    def check(self) -> None:
        """SignerUnavailable unless the token signs now (a probe signature; one that
        passed within CHECK_REUSE_SECONDS stands)."""
        if time.monotonic() - self._checked_at < CHECK_REUSE_SECONDS:
            return
        self.sign(PROBE)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # one call on the pool, bounded by the timeout

    def _run(self, call: Callable[[], T], timeout: float | None = None) -> T:
        if self._pid and os.getpid() != self._pid:
            self._after_fork()
        timeout = self.config.timeout if timeout is None else timeout
        future: Future[T] = self._pool.submit(self._with_token, call)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            future.cancel()  # when it is still queued behind stuck ones
            log.error("%s did not sign within %s s", self.config.describe(), timeout)
            raise SignerUnavailable(
                f"signing key unavailable: {self.config.describe()} did not answer within "
                f"{timeout:g} s (SVC_PKCS11_TIMEOUT)"
            ) from None

    def _after_fork(self) -> None:
        """A forked child (gunicorn --preload) inherits neither the pool's threads nor
        usable sessions: a new pool, and a reconnect (which initialises the module in
        this process) on the first signature."""
        self._cond = threading.Condition()
        self._in_flight, self._reconnecting = 0, False
        self._broken, self._retry_at = True, 0.0
        self._problem = f"{self.config.describe()} not connected in this process yet"
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self.config.sessions, thread_name_prefix="pkcs11-signer")

    def _with_token(self, call: Callable[[], T]) -> T:
        """Run ``call`` (on a pool thread) with this thread's session ready, reconnecting
        first when the token failed; a failure of a session that had worked reconnects
        and tries once more, so the first request after the token returns succeeds."""
        failures = reconnects = 0
        while True:
            with self._cond:
                while self._reconnecting:
                    self._cond.wait()
                if self._broken:
                    if time.monotonic() < self._retry_at or reconnects >= 2:
                        raise SignerUnavailable(f"signing key unavailable: {self._problem}")
                    self._reconnecting = True
                    while self._in_flight:
                        self._cond.wait()
                    generation = -1
                else:
                    self._in_flight += 1
                    generation = self._generation
            if generation < 0:
                reconnects += 1
                try:
                    with self._module_lock:
                        self._reconnect()
                finally:
                    with self._cond:
                        self._reconnecting = False
                        self._cond.notify_all()
                continue
            try:
                with self._module_lock:
                    return call()
            except SignerUnavailable as exc:  # the key is gone from the token
                self._failed(exc.detail)
                raise
            except PKCS11Error as exc:
                problem = f"{self.config.describe()} failed ({error_name(exc)})"
                with self._cond:
                    if generation == self._generation and not self._broken:
                        self._broken = True
                        self._problem = problem
                        self._retry_at = 0.0
                        self._checked_at = float("-inf")
                        log.error("signing key unavailable: %s", problem)
                failures += 1
                if failures >= 2:
                    raise SignerUnavailable(f"signing key unavailable: {problem}") from None
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _reconnect(self) -> None:
        """Finalise and initialise the module, find the token, log in and find the key
        (on a pool thread, with no signature in flight). On failure the signer stays
        broken until RETRY_SECONDS have passed."""
        config = self.config
        try:
            lib = library(config.module)
            if self._generation or self._pid:
                lib.reinitialize()  # drops every session: a token that came back is seen
            self._pid = os.getpid()
            token = find_token(lib, config)
            pin = read_pin(config)
            digest = hashlib.sha256(pin.encode()).hexdigest()
            if digest == self._refused_pin:
                raise SignerUnavailable(pin_refused(config))
            try:
                session = login(token, config, pin)
            except SignerUnavailable:
                self._refused_pin = digest
                raise
            public = public_key_of(session, config)
            if self._public is not None and raw_public(public) != raw_public(self._public):
                raise SignerUnavailable(
                    f"the key labelled {config.key_label!r} on {config.describe()} is not "
                    "the key this process started with; restart the service to sign with it"
                )
        except SignerUnavailable as exc:
            self._failed(exc.detail)
            raise
        except PKCS11Error as exc:
            self._failed(f"{config.describe()} failed ({error_name(exc)})")
            raise SignerUnavailable(f"signing key unavailable: {self._problem}") from None
        with self._cond:
            self._token, self._login_session = token, session
            self._public = self._public or public
            self._generation += 1
            self._broken = False
            self._problem = ""
        log.info("%s connected (key %r)", config.describe(), config.key_label)

    def _failed(self, problem: str) -> None:
        with self._cond:
            self._broken = True
            self._checked_at = float("-inf")
            self._problem = problem.removeprefix("signing key unavailable: ")
            self._retry_at = time.monotonic() + RETRY_SECONDS
        log.error("signing key unavailable: %s", self._problem)

    def _session_key(self) -> Any:
        """This pool thread's private-key handle, on a session of the current connection."""
        local = self._local
        if getattr(local, "generation", None) != self._generation:
            session = self._token.open()  # logged in: the login session's state
            try:
                local.key = private_key_of(session, self.config)
            except SignerUnavailable:
                session.close()
                raise
            local.session, local.generation = session, self._generation
        return local.key

    def _sign(self, data: bytes) -> bytes:
        signature = bytes(self._session_key().sign(data, mechanism=Mechanism.EDDSA))
        self._checked_at = time.monotonic()
        return signature

    def _probe(self) -> None:
        """Sign a probe and verify it under the token's public key: the two halves under
        the label belong together."""
        signature = self._sign(PROBE)
        try:
            self.public_key().verify(signature, PROBE)
        except InvalidSignature:
            raise SignerUnavailable(
                f"the private and public keys labelled {self.config.key_label!r} on "
                f"{self.config.describe()} are not one pair"
            ) from None
