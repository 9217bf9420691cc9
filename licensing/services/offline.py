"""Air-gapped activation by file (issue 44): an activation request (``SVCQ1``,
:mod:`devices.offline`) read from the portal, the console, ``svcctl`` or the API takes
the seat exactly as ``POST /v1/activate`` does (:func:`unit_activate`: the same rules,
billing event, refusals and codes; the same request again answers the same licence and
takes no second seat) and is answered by a signed answer file (``SVCA1``): the unit
licence, its signed status (with its check-in lease) and the key certificates.

The answer's signing and the exchange's row come after the seat's commit; if either
fails, the request read again answers the licence the seat bought (a re-activation, not
billed again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from config import clock
from config.errors import InvalidInput, NotFound
from devices import offline
from devices.errors import LicenseError
from licensing.models import License, OfflineExchange
from licensing.services.activation import ActivationResult, batch_key_customer, unit_activate
from signing import keyring
from svccore.timeunits import unix

CHANNELS = ("api", "customer-api", "portal", "console")


@dataclass(frozen=True)
class OfflineActivation:
    answer: str
    result: ActivationResult
    device_id: str


def request_read(text: Any) -> offline.OfflineRequest:
    """A request file's content, or InvalidInput naming the device module's code."""
    try:
        return offline.parse_request(text)
    except LicenseError as exc:
        raise InvalidInput(f"{exc.code}: {exc}; nothing was taken") from None


def answer_sign(
    *,
    kind: str,
    device_id: str,
    license_id: str,
    nonce: str,
    status: str,
    certificates: list[str],
    **parts: Any,
) -> str:
    """An answer file (``SVCA1``) signed by the active key; ``parts`` are the kind's own
    (``token`` and ``reactivated``, or ``receipt``)."""
    payload = {
        "typ": offline.ANSWER_TYPE,
        "kind": kind,
        "iss": settings.SVC_ISSUER,
        "dev": device_id,
        "lic": license_id,
        "nonce": nonce,
        "iat": unix(clock.now()),
        "status": status,
        "certificates": certificates,
        **{name: value for name, value in parts.items() if value is not None},
    }
    return keyring.sign_document(offline.ANSWER_PREFIX, payload)


def exchange_record(
    *,
    license_id: str,
    device_id: str,
    kind: str,
    nonce: str,
    channel: str,
    actor: str = "",
    seat_taken: bool = False,
) -> None:
    """Note one file exchange of a unit (once per file: reading it again is not another)."""
    customer_id = License.objects.filter(pk=license_id).values_list("customer_id", flat=True)
    try:
        with transaction.atomic():
            OfflineExchange.objects.get_or_create(
                license_id=license_id,
                kind=kind,
                nonce=nonce,
                defaults={
                    "customer_id": customer_id[0],
                    "device_id": device_id,
                    "channel": channel,
                    "actor": actor[:150],
                    "seat_taken": seat_taken,
                },
            )
    except IntegrityError:  # the same file read twice at once: one row
        pass


def offline_activate(
    *,
    request_text: Any,
    channel: str,
    customer_id: str | None = None,
    actor: str = "",
    client_ip: str | None = None,
) -> OfflineActivation:
    """Read an activation request and answer it (see the module docstring).
    ``customer_id`` (the portal, the customer API): a batch of another customer is
    refused as not found, before anything is taken. Raises what :func:`unit_activate`
    raises (402 exhausted, 403 bad, revoked or held key, 400), and InvalidInput for a
    damaged or truncated file."""
    request = request_read(request_text)
    if customer_id is not None and batch_key_customer(request.batch_token) != customer_id:
        raise NotFound("no such batch key: the request's batch is not one of this customer's")
    result = unit_activate(
        batch_token=request.batch_token,
        device_id=request.device_id,
        fingerprint_source=request.fingerprint_source,
        weak_binding=request.weak_binding,
        sdk_version=request.sdk_version,
        client_ip=client_ip,
        positioned=True,
    )
    position = result.position
    assert position is not None  # positioned=True
    # The same file read again answers as it did the first time: a request whose first
    # reading took the seat still says "new licence", so the camera starts from zero.
    first_took_seat = OfflineExchange.objects.filter(
        license_id=result.license_id,
        kind=OfflineExchange.Kind.ACTIVATION,
        nonce=request.nonce,
        seat_taken=True,
    ).exists()
    answer = answer_sign(
        kind=offline.ACTIVATION,
        device_id=request.device_id,
        license_id=result.license_id,
        nonce=request.nonce,
        status=position.status,
        certificates=position.certificates,
        token=result.token,
        reactivated=result.reactivated and not first_took_seat,
    )
    exchange_record(
        license_id=result.license_id,
        device_id=request.device_id,
        kind=OfflineExchange.Kind.ACTIVATION,
        nonce=request.nonce,
        channel=channel,
        actor=actor,
        seat_taken=not result.reactivated,
    )
    return OfflineActivation(answer=answer, result=result, device_id=request.device_id)
