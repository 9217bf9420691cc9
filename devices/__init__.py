"""Device-side licensing module, vendored into camera firmware.

Standard library + ``cryptography`` only. Public API: contract §8. Nothing here touches
the network except :func:`activate` and :meth:`Engine.sync`.
"""

from __future__ import annotations

from ._version import __version__
from .client import activate
from .engine import ACTIVE, EXPIRED, GRACE, Engine, Stream
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
from .hardware import Fingerprint, fingerprint
from .token import key_fingerprint, verify_token

__all__ = [
    "ACTIVE",
    "EXPIRED",
    "GRACE",
    "ActivationRequired",
    "BadSignature",
    "ClockRollback",
    "Engine",
    "Expired",
    "Fingerprint",
    "LicenseError",
    "NotEntitled",
    "QuotaExceeded",
    "Revoked",
    "Stream",
    "StreamLimit",
    "WrongDevice",
    "__version__",
    "activate",
    "fingerprint",
    "key_fingerprint",
    "verify_token",
]
