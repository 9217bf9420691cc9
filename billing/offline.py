"""Usage by file (issue 44): a usage export of an air-gapped camera (``SVCE1``,
:mod:`devices.offline`), read from the portal, the console, ``svcctl`` or the API, is
stored by exactly the rules of ``POST /v1/usage`` (:func:`billing.ingestion.usage_ingest`:
the licence in the file authenticates it; identity, duplicates, conflicts, bounds) and
answered by a signed answer file holding the usage receipt and the licence's newest
signed status, which is the unit's check-in (its lease starts again) and how a camera
that never reaches the service learns a revocation or a hold.

A revoked licence's export stores nothing (as ``POST /v1/usage`` refuses it) and is
answered with the status alone: the camera learns the revocation at that exchange.
Reading the same file again stores nothing new (its records are duplicates) and answers
the same receipt's content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from billing.ingestion import unit_token_claims, usage_ingest
from config.errors import Forbidden, InvalidInput, NotFound
from devices import offline
from devices.errors import LicenseError
from licensing import revocations
from licensing.models import License, OfflineExchange
from licensing.services.offline import answer_sign, exchange_record, offline_activate

_SPACE = re.compile(r"\s+")


def usage_file_ingest(
    *, export_text: Any, channel: str, customer_id: str | None = None, actor: str = ""
) -> dict[str, Any]:
    """Store a usage export's records and answer it: ``{answer, license_id, device_id,
    accepted, duplicates, conflicts, refused, revoked}``. ``customer_id`` (the portal,
    the customer API): another customer's licence is refused as not found. Raises
    InvalidInput for a damaged file, Unauthorized (401) for a licence that does not
    verify, Forbidden for one bound to another device or not on file."""
    try:
        export = offline.parse_export(export_text)
    except LicenseError as exc:
        raise InvalidInput(f"{exc.code}: {exc}; nothing was stored") from None
    claims = unit_token_claims(export.token)
    if customer_id is not None and claims.get("sub") != customer_id:
        raise NotFound("no such licence: the usage file's licence is not one of this customer's")
    if (claims["lic"], claims["dev"]) != (export.license_id, export.device_id):
        raise Forbidden(
            f"the usage file names licence {export.license_id} on device {export.device_id}, "
            f"its licence is {claims['lic']} bound to {claims['dev']}; nothing was stored"
        )
    revoked = License.objects.filter(pk=claims["lic"], revoked_at__isnull=False).exists()
    result: dict[str, Any] = {"accepted": 0, "duplicates": 0, "conflicts": [], "refused": []}
    if not revoked:
        result = usage_ingest(
            token=export.token,
            device_id=export.device_id,
            records=export.records,
            nonce=export.nonce,
        )
    status = revocations.license_status(
        license_id=claims["lic"], device_id=export.device_id, check_in=True
    )
    answer = answer_sign(
        kind=offline.USAGE,
        device_id=export.device_id,
        license_id=claims["lic"],
        nonce=export.nonce,
        status=status["status"],
        certificates=status["certificates"],
        receipt=result.get("receipt"),
    )
    exchange_record(
        license_id=claims["lic"],
        device_id=export.device_id,
        kind=OfflineExchange.Kind.USAGE,
        nonce=export.nonce,
        channel=channel,
        actor=actor,
    )
    return {
        **{name: value for name, value in result.items() if name != "receipt"},
        "answer": answer,
        "license_id": claims["lic"],
        "device_id": export.device_id,
        "revoked": status["revoked"],
    }


@dataclass(frozen=True)
class OfflineFileAnswer:
    """What a page answers for an uploaded file: the answer file and a line saying what
    the exchange did."""

    filename: str
    answer: str
    message: str


def offline_file_answer(
    *, text: str, channel: str, customer_id: str | None = None, actor: str = ""
) -> OfflineFileAnswer:
    """Answer a file from an air-gapped camera whatever its kind (the portal's and the
    console's one upload field): an activation request (:func:`offline_activate`) or a
    usage export (:func:`usage_file_ingest`); InvalidInput for anything else."""
    kind = _SPACE.sub("", text or "")[:6]
    scope = {"channel": channel, "customer_id": customer_id, "actor": actor}
    if kind == f"{offline.REQUEST_PREFIX}.":
        done = offline_activate(request_text=text, **scope)
        seat = (
            "already on file: no seat taken"
            if done.result.reactivated
            else f"a seat taken ({done.result.batch_units_remaining} left on the batch)"
        )
        return OfflineFileAnswer(
            filename=f"{_file_stem(done.device_id)}.svcresp",
            answer=done.answer,
            message=f"Activation of {done.device_id}: licence {done.result.license_id}, {seat}.",
        )
    if kind == f"{offline.EXPORT_PREFIX}.":
        result = usage_file_ingest(export_text=text, **scope)
        said = (
            "revoked: nothing stored; the answer tells the camera"
            if result["revoked"]
            else f"{result['accepted']} records stored, {result['duplicates']} already held, "
            f"{len(result['conflicts'])} conflicts, {len(result['refused'])} refused"
        )
        return OfflineFileAnswer(
            filename=f"{_file_stem(result['device_id'])}.svcrcpt",
            answer=result["answer"],
            message=f"Usage of {result['device_id']} (licence {result['license_id']}): {said}.",
        )
    raise InvalidInput(
        "not a file from an air-gapped camera: an activation request starts with SVCQ1., a "
        "usage file with SVCE1. (python -m devices offline-request / usage-export)"
    )


def _file_stem(device_id: str) -> str:
    """A file name of the device id: what a download may carry in its name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", device_id)[:64] or "camera"
