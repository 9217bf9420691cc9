"""Device-side licensing module, vendored into camera firmware.

Standard library + ``cryptography`` only. Public API: contract §8. Nothing here touches
the network except :func:`activate` and :meth:`Engine.sync`, and the networking modules
are imported only when one of them is first called, so a firmware that never syncs
never loads them.
"""

from __future__ import annotations

from ._version import __version__
from .engine import Engine
from .errors import (
    ActivationRequired,
    BadSignature,
    ClockRollback,
    Code,
    Expired,
    InvalidArgument,
    LeaseExpired,
    LicenseError,
    NotEntitled,
    QuotaExceeded,
    Revoked,
    StreamLimit,
    Suspended,
    SyncRequired,
    WrongDevice,
)
from .exchange import offline_request
from .hardware import Fingerprint, fingerprint
from .streams import Stream
from .term import ACTIVE, EXPIRED, GRACE, NOT_YET_VALID, REVOKED, license_state
from .token import key_fingerprint, verify_token


def activate(*args, **kwargs) -> str:  # noqa: ANN002, ANN003 - see client.activate
    from .client import activate as exchange

    return exchange(*args, **kwargs)


activate.__doc__ = "Exchange a batch key for a unit token: see :func:`devices.client.activate`."


def usage_export(state_dir, **engine_kwargs) -> str:  # noqa: ANN001, ANN003
    """:meth:`Engine.usage_export` of the engine of ``state_dir`` (``engine_kwargs`` as
    :class:`Engine` takes them), for a device whose engine is not running."""
    with Engine(state_dir, **engine_kwargs) as engine:
        return engine.usage_export()


def offline_install(answer: str, state_dir, **engine_kwargs) -> dict:  # noqa: ANN001, ANN003
    """:meth:`Engine.offline_install` of ``answer`` (the text of an answer file) by the
    engine of ``state_dir``, for a device whose engine is not running."""
    with Engine(state_dir, **engine_kwargs) as engine:
        return engine.offline_install(answer)


__all__ = [
    "ACTIVE",
    "EXPIRED",
    "GRACE",
    "NOT_YET_VALID",
    "REVOKED",
    "ActivationRequired",
    "BadSignature",
    "ClockRollback",
    "Code",
    "Engine",
    "Expired",
    "Fingerprint",
    "InvalidArgument",
    "LeaseExpired",
    "LicenseError",
    "NotEntitled",
    "QuotaExceeded",
    "Revoked",
    "Stream",
    "StreamLimit",
    "Suspended",
    "SyncRequired",
    "WrongDevice",
    "__version__",
    "activate",
    "fingerprint",
    "key_fingerprint",
    "license_state",
    "offline_install",
    "offline_request",
    "usage_export",
    "verify_token",
]
