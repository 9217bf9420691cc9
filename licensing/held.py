"""The licence a device holds, as the service checks it when the device presents it as
its credential (``Authorization: Bearer``): on usage upload (``billing.ingestion``) and
on a licence refresh (``licensing.services.renewals``). One set of rules for both:

- the token's claims must already verify under a key of the authority (the caller
  verifies, answering 401 otherwise);
- it is bound to the ``device_id`` of the request, and is not a batch key;
- its licence is on file, as a unit, direct or offline licence of the same customer and
  device;
- it is byte for byte a token this authority issued for that licence (the current one,
  or one a renewal replaced): a validly signed variant is refused and recorded as a
  possible signing-key compromise (``licensing.exact_tokens``);
- the licence is not revoked.

Every refusal is 403 naming the licence, but a malformed ``device_id`` (400).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from config.errors import Forbidden, InvalidInput
from licensing.exact_tokens import token_check_issued
from licensing.models import License, token_digest
from svccore.claims import device_id_problem
from svccore.timeunits import unix


@dataclass(frozen=True)
class HeldLicense:
    """What the service has on file for the licence a device presented."""

    license_id: str
    kind: str
    customer_id: str
    sku: str
    token: str  # the current token (a renewal may have replaced the one presented)
    token_sha256: str
    expires_at: dt.datetime | None
    batch_expires_at: dt.datetime | None  # a unit's batch: its end after renewals
    issued_at: dt.datetime  # a unit licence: when its device activated
    addons_version: int = 0  # a unit: its batch's add-ons version its token carries
    batch_addons_version: int = 0  # a unit's batch: its add-ons version now
    trial: bool = False  # the token on file is a trial's (licensing.trials)


def license_held(
    *, claims: dict[str, Any], token: str, device_id: Any, revoked_means: str = ""
) -> HeldLicense:
    """The licence on file for a presented, verified ``token``, or Forbidden (see the
    module's rules). ``revoked_means`` finishes the refusal of a revoked licence (e.g.
    "usage is no longer accepted")."""
    if not isinstance(device_id, str):
        raise InvalidInput(
            "device_id is missing"
            if device_id is None
            else f"device_id must be a string, not {type(device_id).__name__}"
        )
    problem = device_id_problem(device_id)
    if problem:
        raise InvalidInput(f"device_id {problem}")
    license_id = claims["lic"]
    if claims["dev"] == "*" or "batch" in claims:
        raise Forbidden(
            f"licence {license_id} is an unbound batch key; a device presents the unit "
            "licence it received from POST /v1/activate"
        )
    if claims["dev"] != device_id:
        raise Forbidden(
            f"licence {license_id} is bound to device {claims['dev']!r}, not {device_id!r}"
        )
    row = (
        License.objects.filter(pk=license_id)
        .values_list(
            "kind",
            "customer_id",
            "sku",
            "device_id",
            "revoked_at",
            "token",
            "token_sha256",
            "expires_at",
            "batch__expires_at",
            "issued_at",
            "addons_version",
            "batch__addons_version",
            "trial",
        )
        .first()
    )
    if row is None:
        raise Forbidden(f"licence {license_id} is not on file with this authority")
    (kind, customer_id, sku, bound_to, revoked_at, current, stored, expires_at, batch_end,
     issued_at, addons_version, batch_addons_version, trial) = row  # fmt: skip
    token_check_issued(
        license_id=license_id,
        token_sha256=token_digest(token),
        stored_sha256=stored,
        claims=claims,
    )
    if kind == License.Kind.BATCH_KEY or bound_to != device_id or customer_id != claims["sub"]:
        raise Forbidden(f"licence {license_id} on file does not match the token presented")
    if revoked_at is not None:
        suffix = f"; {revoked_means}" if revoked_means else ""
        raise Forbidden(f"licence {license_id} was revoked at {unix(revoked_at)}{suffix}")
    return HeldLicense(
        license_id,
        kind,
        customer_id,
        sku,
        current,
        stored,
        expires_at,
        batch_end,
        issued_at,
        addons_version,
        batch_addons_version or 0,
        trial,
    )
