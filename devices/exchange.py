"""The file exchange of an air-gapped camera (issue 44): what :mod:`devices.sync` does
over the network, done with files a technician carries (formats: :mod:`devices.offline`).

* :func:`offline_request` writes an activation request (the batch key, this device's id
  and fingerprint source, a nonce); the service answers the unit licence, its signed
  status and the key certificates.
* :meth:`Exchanging.usage_export` writes the spool's closed periods with the licence as
  authentication; the service answers a signed usage receipt and the licence's status.
* :meth:`Exchanging.offline_install` installs either answer after verifying what the
  online path verifies: the answer's signature and the certificates chaining its key to
  the roots, the licence's signature and device binding, the status (newer than the one
  held, for this licence and device), the receipt's nonce, device and licence. Records
  leave the spool only when the receipt holds them with exactly the counts sent.

An answer must name a request or export of this state directory that awaits one
(``offline.json``); installing it ends the wait, so a replayed answer changes nothing
and is refused (``RECEIPT_INVALID``), as is one for another device (``WRONG_DEVICE``)
or a tampered one (``BAD_SIGNATURE``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import offline
from .bounds import MAX_RECORDS_PER_UPLOAD, path_argument, shown
from .documents import parse_receipt
from .errors import Code, InvalidArgument, LicenseError, WrongDevice
from .hardware import EXPLICIT, MAX_DEVICE_ID, fingerprint
from .keys import split_license_file
from .persistence import unwritable
from .spool import period_key
from .state import STATE_FILE, TOKEN_FILE, atomic_write_bytes
from .token import MAX_TOKEN_CHARS, decode_unverified, verify_token


def offline_request(
    batch_token: str,
    state_dir: str | Path,
    *,
    device_id: str | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """The text of an activation request for this device (``device_id`` default: its
    fingerprint), remembered in ``state_dir`` as awaiting its answer. Nothing is sent;
    no seat is taken until the service reads the file."""
    if not isinstance(batch_token, str) or not 0 < len(batch_token.strip()) <= MAX_TOKEN_CHARS:
        raise InvalidArgument(f"batch_token must be a batch key of 1-{MAX_TOKEN_CHARS} characters")
    directory = path_argument(state_dir, "state_dir")
    if device_id is None:
        found = fingerprint()
        device_id, source, weak = found.value, found.source, found.weak
    elif not isinstance(device_id, str) or not 0 < len(device_id) <= MAX_DEVICE_ID:
        raise InvalidArgument(
            f"device_id must be a string of 1-{MAX_DEVICE_ID} characters or None, not "
            f"{shown(device_id)}"
        )
    else:
        source, weak = EXPLICIT, False
    token = split_license_file(batch_token)[0]
    nonce = offline.new_nonce()
    text = offline.request_text(
        batch_token=token, device_id=device_id, source=source, weak=weak, nonce=nonce,
        now=int(clock()),
    )  # fmt: skip
    try:
        directory.mkdir(parents=True, exist_ok=True)
        offline.await_answer(directory, kind=offline.ACTIVATION, nonce=nonce)
    except OSError as exc:
        raise unwritable(directory / offline.OFFLINE_FILE, exc) from None
    return text


class Exchanging:
    """The file-exchange part of an :class:`devices.engine.Engine` (a mixin)."""

    def usage_export(self) -> str:
        """The text of a usage export: up to ``MAX_RECORDS_PER_UPLOAD`` closed periods of
        the spool (an empty export is an exchange too: it brings the licence's newest
        status and signed time back), remembered as awaiting its receipt."""
        with self._lock:
            now = self._now()
            if self._claims is not None and now >= self._period_end:
                self._advance(now)
            token = self._token
            if token is None:  # not started: the licence file
                token, certificates = split_license_file(self._read_token_file())
                self._learn_certificates(certificates)
            records = self._spool.batch(MAX_RECORDS_PER_UPLOAD)
        license_id = decode_unverified(token)["lic"]
        nonce = offline.new_nonce()
        text = offline.export_text(
            token=token, device_id=self.device_id, license_id=license_id, nonce=nonce,
            records=records, now=int(now),
        )  # fmt: skip
        try:
            offline.await_answer(
                self.state_dir, kind=offline.USAGE, nonce=nonce, license_id=license_id
            )
        except OSError as exc:
            raise unwritable(self.state_dir / offline.OFFLINE_FILE, exc) from None
        return text

    def offline_install(self, text: Any) -> dict[str, Any]:
        """Verify and install an answer file (activation or usage); returns a summary
        ``{kind, license_id, ...}``. Raises BadSignature (tampered, truncated, unsigned
        or untrusted), WrongDevice, ``RECEIPT_INVALID`` (answers nothing awaited here,
        or a receipt for another upload), ``LIST_*`` for a status refused, ``BAD_RESPONSE``
        for a signed answer of an unexpected shape. Nothing is changed when it raises.

        After an activation answer, open the engine anew to start the licence."""
        with self._lock:
            self._learn_certificates(offline.answer_certificates(text))
        answer = offline.parse_answer(text, self._keys)
        if answer.device_id != self.device_id:
            raise WrongDevice(
                f"this answer is for device {answer.device_id!r}, this is {self.device_id!r}; "
                "nothing was changed"
            )
        if not offline.awaited(self.state_dir, answer):
            raise offline.not_awaited(answer)
        if answer.kind == offline.ACTIVATION:
            summary = self._install_activation(answer)
        else:
            summary = self._install_usage(answer)
        offline.answered(self.state_dir, answer.nonce)
        held = self._statuses.get(answer.license_id)
        summary["revoked"] = held is not None and held.revoked
        summary["suspended"] = held is not None and held.suspended
        if held is not None and held.lease_end:
            summary["lease_end"] = held.lease_end
        return summary

    def _install_activation(self, answer: offline.OfflineAnswer) -> dict[str, Any]:
        claims = verify_token(answer.token, self._keys)
        if claims["act"] == "required" or claims["dev"] != self.device_id:
            raise WrongDevice(
                f"the licence in this answer is bound to {claims['dev']!r}, this device is "
                f"{self.device_id!r}; nothing was changed"
            )
        if claims["lic"] != answer.license_id:
            raise LicenseError("the answer's licence and its token differ", code=Code.BAD_RESPONSE)
        with self._lock:
            if not answer.reactivated and not (self.state_dir / STATE_FILE).exists():
                # A new licence has used nothing: no usage total to restore (the state
                # file the status's floor is written to says so; an engine opened anew
                # then starts, as after activate()).
                self._restore_pending = False
            stale = self._status_take(answer.status, answer.license_id)
            try:
                atomic_write_bytes(
                    self.state_dir / TOKEN_FILE, answer.token.encode("ascii") + b"\n"
                )
            except OSError as exc:
                raise unwritable(self.state_dir / TOKEN_FILE, exc) from None
        return {
            "kind": answer.kind,
            "license_id": answer.license_id,
            "reactivated": answer.reactivated,
            "stale": stale,
        }

    def _install_usage(self, answer: offline.OfflineAnswer) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "kind": answer.kind, "license_id": answer.license_id, "removed": 0, "set_aside": 0,
        }  # fmt: skip
        with self._lock:
            self._status_take(answer.status, answer.license_id)
        if answer.receipt:
            try:
                receipt = parse_receipt(answer.receipt, self._keys)
            except LicenseError as exc:
                raise LicenseError(
                    f"the answer's usage receipt is not valid ({exc})", code=Code.RECEIPT_INVALID
                ) from None
            if (receipt.nonce, receipt.device_id, receipt.license_id) != (
                answer.nonce,
                self.device_id,
                answer.license_id,
            ):
                raise LicenseError(
                    "the usage receipt is for another export, device or licence",
                    code=Code.RECEIPT_INVALID,
                )
            with self._lock:
                named = [
                    record
                    for record in self._spool.batch(len(self._spool))
                    if period_key(record) in receipt.records
                    or period_key(record) in receipt.refused
                ]
            covered, aside = self._settle(receipt, named, answer.license_id)
            summary["removed"], summary["set_aside"] = len(covered), len(aside)
        with self._lock:
            self._update_blocked()
            self._judge()
        summary["pending"] = len(self._spool)
        return summary
