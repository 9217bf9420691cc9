"""Exception hierarchy of the device module.

Every error a firmware integrator can see subclasses :class:`LicenseError` and carries a
stable ``code`` (contract §8) so firmware can branch on it without parsing messages.
"""

from __future__ import annotations


class LicenseError(Exception):
    code = "LICENSE_ERROR"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code


class ActivationRequired(LicenseError):
    code = "ACTIVATION_REQUIRED"


class BadSignature(LicenseError):
    code = "BAD_SIGNATURE"


class WrongDevice(LicenseError):
    code = "WRONG_DEVICE"


class ClockRollback(LicenseError):
    code = "LICENSE_CLOCK_ROLLBACK"


class Expired(LicenseError):
    code = "LICENSE_EXPIRED"


class Revoked(LicenseError):
    code = "LICENSE_REVOKED"


class NotEntitled(LicenseError):
    code = "NOT_ENTITLED"


class StreamLimit(LicenseError):
    code = "STREAM_LIMIT"


class QuotaExceeded(LicenseError):
    code = "QUOTA_EXCEEDED"


class SyncRequired(LicenseError):
    """The device's local licence state (revocation list, state file) is missing, damaged
    or does not cover the licence: analytics wait for a successful ``Engine.sync``."""

    code = "SYNC_REQUIRED"


class InvalidArgument(LicenseError, ValueError):
    """An argument of the wrong type or out of range (a firmware integration error):
    nothing was counted, written or sent. Also a ValueError, as such errors are in
    Python."""

    code = "BAD_ARGUMENT"
