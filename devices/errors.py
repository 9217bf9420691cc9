"""Exception hierarchy of the device module.

Every error a firmware integrator can see subclasses :class:`LicenseError` and carries a
stable ``code`` (contract §8) so firmware can branch on it without parsing messages.
"""

from __future__ import annotations


class Code:
    """Every ``code`` a :class:`LicenseError` carries, named once: raise sites and
    firmware write ``Code.STATE_LOCKED``, never the string (docs/devices.md lists each
    with what it means; tests/test_one_home.py holds the two together)."""

    ACTIVATION_FAILED = "ACTIVATION_FAILED"
    ACTIVATION_REQUIRED = "ACTIVATION_REQUIRED"
    BAD_ARGUMENT = "BAD_ARGUMENT"
    BAD_PUBLIC_KEY = "BAD_PUBLIC_KEY"
    BAD_REQUEST = "BAD_REQUEST"
    BAD_RESPONSE = "BAD_RESPONSE"
    BAD_SIGNATURE = "BAD_SIGNATURE"
    BAD_URL = "BAD_URL"
    BATCH_EXHAUSTED = "BATCH_EXHAUSTED"
    CLOCK_INVALID = "CLOCK_INVALID"
    INSECURE_URL = "INSECURE_URL"
    KEY_CERT_INVALID = "KEY_CERT_INVALID"
    KEY_EXPIRED = "KEY_EXPIRED"
    KEY_NOT_TRUSTED = "KEY_NOT_TRUSTED"
    KEY_REVOKED = "KEY_REVOKED"
    KEY_UNKNOWN = "KEY_UNKNOWN"
    KEY_UNTRUSTED_ROOT = "KEY_UNTRUSTED_ROOT"
    KEY_WRONG_USE = "KEY_WRONG_USE"
    LICENSE_CLOCK_ROLLBACK = "LICENSE_CLOCK_ROLLBACK"
    LICENSE_ERROR = "LICENSE_ERROR"
    LICENSE_EXPIRED = "LICENSE_EXPIRED"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    LICENSE_REVOKED = "LICENSE_REVOKED"
    LIST_BAD_SIGNATURE = "LIST_BAD_SIGNATURE"
    LIST_FROM_FUTURE = "LIST_FROM_FUTURE"
    LIST_REJECTED = "LIST_REJECTED"
    LIST_STALE = "LIST_STALE"  # no longer raised: sync reports summary["stale"]
    LIST_WRONG_LICENSE = "LIST_WRONG_LICENSE"
    NETWORK_ERROR = "NETWORK_ERROR"
    NOT_ENTITLED = "NOT_ENTITLED"
    NOT_STARTED = "NOT_STARTED"
    NO_FINGERPRINT = "NO_FINGERPRINT"
    NO_PUBLIC_KEY = "NO_PUBLIC_KEY"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"
    RECEIPT_INVALID = "RECEIPT_INVALID"
    REDIRECT_REFUSED = "REDIRECT_REFUSED"
    REFRESH_FAILED = "REFRESH_FAILED"
    REFRESH_INVALID = "REFRESH_INVALID"
    STATE_CORRUPT = "STATE_CORRUPT"
    STATE_LOCKED = "STATE_LOCKED"
    STATE_UNREADABLE = "STATE_UNREADABLE"
    STATE_UNWRITABLE = "STATE_UNWRITABLE"
    STREAM_LIMIT = "STREAM_LIMIT"
    SUSPENDED = "SUSPENDED"
    SYNC_FAILED = "SYNC_FAILED"
    SYNC_REQUIRED = "SYNC_REQUIRED"
    TRIAL_USED = "TRIAL_USED"
    UPLOAD_REFUSED = "UPLOAD_REFUSED"
    USAGE_OUT_OF_RANGE = "USAGE_OUT_OF_RANGE"
    WRONG_DEVICE = "WRONG_DEVICE"

    @classmethod
    def all(cls) -> frozenset[str]:
        return frozenset(v for k, v in vars(cls).items() if k.isupper())


class LicenseError(Exception):
    """Every refusal of the module: ``code`` is one of :class:`Code` (a stable string
    firmware may switch on) and the message says what to do."""

    code = Code.LICENSE_ERROR

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code


class ActivationRequired(LicenseError):
    """The token is a batch key or not bound to a device: exchange it first
    (:func:`devices.activate`)."""

    code = Code.ACTIVATION_REQUIRED


class BadSignature(LicenseError):
    """A token, certificate or signed document that does not verify under the
    trusted keys (also a revoked signing key: code ``KEY_REVOKED``)."""

    code = Code.BAD_SIGNATURE


class WrongDevice(LicenseError):
    """The licence is bound to another device's fingerprint."""

    code = Code.WRONG_DEVICE


class ClockRollback(LicenseError):
    """The device's clock is behind the high-water mark the module keeps: correct
    the clock (a sync corrects a mark a bad clock pushed ahead)."""

    code = Code.LICENSE_CLOCK_ROLLBACK


class Expired(LicenseError):
    """The licence is past its term and grace, or not valid yet."""

    code = Code.LICENSE_EXPIRED


class Revoked(LicenseError):
    """A signed status or revocation list says the licence is revoked."""

    code = Code.LICENSE_REVOKED


class LeaseExpired(LicenseError):
    """The device's clock (its high-water mark) passed the check-in lease end of the
    newest signed status it holds: analytics wait for a successful ``Engine.sync``
    (the video path keeps running)."""

    code = Code.LEASE_EXPIRED


class Suspended(LicenseError):
    """The newest signed status says an operator suspended the licence (its own hold,
    its batch key's or its customer's): analytics refuse until a sync learns it is
    reinstated (the video path keeps running)."""

    code = Code.SUSPENDED


class NotEntitled(LicenseError):
    """The licence does not switch on the module asked for."""

    code = Code.NOT_ENTITLED


class StreamLimit(LicenseError):
    """Opening another stream would pass ``lim.max_streams``."""

    code = Code.STREAM_LIMIT


class QuotaExceeded(LicenseError):
    """Counting would pass ``lim.api_calls``: nothing was counted."""

    code = Code.QUOTA_EXCEEDED


class SyncRequired(LicenseError):
    """The device's local licence state (revocation list, state file) is missing, damaged
    or does not cover the licence: analytics wait for a successful ``Engine.sync``."""

    code = Code.SYNC_REQUIRED


class InvalidArgument(LicenseError, ValueError):
    """An argument of the wrong type or out of range (a firmware integration error):
    nothing was counted, written or sent. Also a ValueError, as such errors are in
    Python."""

    code = Code.BAD_ARGUMENT
