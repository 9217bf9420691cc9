"""Device-side licensing module, vendored into camera firmware.

Standard library + ``cryptography`` only. Public API: contract §8.
"""

from __future__ import annotations

from .errors import (
    ActivationRequired,
    BadSignature,
    ClockRollback,
    Expired,
    LicenseError,
    NotEntitled,
    QuotaExceeded,
    Revoked,
    StreamLimit,
    WrongDevice,
)
from .token import key_fingerprint, verify_token

__version__ = "1.0.0"

__all__ = [
    "ActivationRequired",
    "BadSignature",
    "ClockRollback",
    "Expired",
    "LicenseError",
    "NotEntitled",
    "QuotaExceeded",
    "Revoked",
    "StreamLimit",
    "WrongDevice",
    "__version__",
    "key_fingerprint",
    "verify_token",
]
