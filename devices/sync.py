"""Talking to the service: :meth:`Syncing.sync` uploads closed usage periods, fetches the
signed status of the licence held and a renewed licence, and applies the signed receipt.

:class:`Syncing` is one part of :class:`devices.engine.Engine` (a mixin sharing its
state).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from . import status as statuses
from .bounds import MAX_RECORDS_PER_UPLOAD
from .documents import LicenseStatus, UsageReceipt, parse_receipt, status_etag
from .errors import (
    BadSignature,
    Code,
    InvalidArgument,
    LicenseError,
    Revoked,
)
from .keys import split_license_file
from .persistence import unwritable
from .spool import CONFLICT, REFUSED, conflict, counts_of, period_key
from .state import (
    STATUS_FILE,
    TOKEN_FILE,
    atomic_write_bytes,
)
from .token import decode_unverified, verify_token

log = logging.getLogger("devices")  # the engine's logger, as in devices.engine

DEFAULT_TIMEOUT = 10.0


def _renewal_problem(held: dict[str, Any], renewed: dict[str, Any], device_id: str) -> str:
    """What makes ``renewed`` unfit to replace the licence ``held`` ("" when nothing):
    it must be the same licence, customer and SKU, bound to this device, and end no
    earlier (0: perpetual, the latest)."""
    for name in ("lic", "sub", "sku"):
        if renewed.get(name) != held.get(name):
            return f"another licence ({name} {renewed.get(name)!r}, held {held.get(name)!r})"
    if renewed["act"] == "required" or renewed["dev"] != device_id:
        return f"a licence not bound to this device (dev {renewed['dev']!r})"

    def end(claims: dict[str, Any]) -> float:
        return math.inf if not claims["exp"] else claims["exp"]

    if end(renewed) < end(held):
        return f"a licence ending earlier ({renewed['exp']}) than the one held ({held['exp']})"
    return ""


def revoked_message(held: LicenseStatus) -> str:
    return (
        f"licence {held.license_id} is revoked (revoked at {held.revoked_at}; signed status "
        f"at revocation-list sequence {held.seq})"
    )


class Syncing:
    """The network part of an :class:`Engine`."""

    def sync(
        self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT, allow_http: bool = False
    ) -> dict[str, Any]:
        """Upload up to ``MAX_RECORDS_PER_UPLOAD`` (1000) spooled records, fetch the signed
        status of the licence held, then fetch the licence again when the service has a
        newer token for it (a renewal).

        ``timeout`` bounds the whole call, every request and every byte of every answer
        (at most one day); the video path never waits on it.

        The three are independent: each is attempted even when another fails, usage
        first. A spooled record is deleted only when a usage receipt signed by the
        authority, bound to this upload's nonce, holds it with exactly the counts sent;
        a forged or missing receipt costs nothing, and one holding other counts sets the
        record aside (``summary["conflicts"]``, ``["refused"]``: :mod:`devices.spool`).
        A status is accepted only when it verifies, names this licence and device and is
        newer than the one held (:mod:`devices.status`); it takes effect at once on the
        running engine; one no newer is kept out and reported (``summary["stale"]``). A
        renewed licence is installed only when it verifies like any token and is the
        same licence for this device, ending no earlier; it replaces ``license.token``
        atomically and takes effect at once (``summary["license"]``: ``"renewed"``,
        ``"current"``, or ``"kept"`` when anything was wrong: the licence held stays).

        When the verified status says the licence held is revoked, raises
        :class:`Revoked` (always, whatever else failed; ``summary["revoked"]`` is True);
        when it says suspended, :class:`Suspended` (``summary["suspended"]`` True; a later
        sync after reinstatement returns normally). ``summary["lease_end"]`` is the
        check-in lease end of the newest status held, when it has one;
        when the held licence's signing key is revoked, BadSignature ``KEY_REVOKED``.
        Otherwise raises the first failure after all were tried: LicenseError
        (``NETWORK_ERROR``, ``SYNC_FAILED``, ``UPLOAD_REFUSED``, ``RECEIPT_INVALID``,
        ``LIST_*``, ``REFRESH_*``, ``INSECURE_URL`` for ``http://`` unless
        ``allow_http``), BadSignature (401 on upload), InvalidArgument for a bad
        ``base_url`` or ``timeout``. Every exception carries the
        summary on ``exc.summary``.
        """
        if not isinstance(base_url, str):
            raise InvalidArgument(f"base_url must be a string, not {type(base_url).__name__}")
        from . import client  # the networking modules load on first use only

        # One deadline for the whole sync: every request below ends by it (InvalidArgument
        # unless 0 < timeout <= 1 day). Pass it on as `timeout=` to the client functions.
        timeout = client.Deadline.after(timeout)

        base = client.endpoint(base_url, "", allow_http=allow_http)
        with self._lock:
            now = self._now()
            if self._claims is not None and now >= self._period_end:
                self._advance(now)
            token = self._token
            if token is None:  # not started: the licence file, token and certificates
                token, certificates = split_license_file(self._read_token_file())
                self._learn_certificates(certificates)
        license_id = decode_unverified(token)["lic"]
        summary: dict[str, Any] = {
            "accepted": 0, "duplicates": 0, "conflicts": 0, "refused": 0, "deferred": 0,
            "stale": False,
        }  # fmt: skip
        errors: list[LicenseError] = []
        rebound = False
        if decode_unverified(token)["dev"] != self.device_id:
            # A repaired camera whose device id changed (issue 45): its licence is
            # rebound first, so the upload and status below speak for the new id.
            try:
                if self._refresh_license(client, base, token, timeout) == "renewed":
                    token, rebound = split_license_file(self._read_token_file())[0], True
            except LicenseError as exc:
                errors.append(exc)
        try:
            self._upload(client, base, token, license_id, summary, timeout)
        except LicenseError as exc:
            errors.append(exc)
        try:
            summary["stale"] = self._refresh_status(client, base, license_id, timeout)
        except LicenseError as exc:
            errors.append(exc)
        summary["license"] = "kept"
        held = self._statuses.get(license_id)
        # A revoked licence has nothing to fetch: the signed status has the last word.
        if held is None or not held.revoked:
            try:
                summary["license"] = self._refresh_license(client, base, token, timeout)
                if rebound and summary["license"] == "current":
                    summary["license"] = "renewed"  # re-signed to this device, above
            except LicenseError as exc:
                errors.append(exc)
        with self._lock:
            if not errors:
                self._problems = []
            self._update_blocked()
            self._judge()
            refusal = self._refused() if self._refusal is not None else None
        summary["pending"] = len(self._spool)
        summary["set_aside"] = len(self._spool.aside) + len(self._spool.conflicts)
        summary["revoked"] = held is not None and held.revoked
        held_now = self._statuses.get(license_id)  # the status this sync may have replaced
        # Only when set: a status without the issue-42 fields leaves the summary as before.
        if held_now is not None and held_now.suspended:
            summary["suspended"] = True
        if held_now is not None and held_now.lease_end:
            summary["lease_end"] = held_now.lease_end
        summary["list_seq"] = held.seq if held is not None else None
        summary["errors"] = [exc.code for exc in errors]
        if summary["revoked"] and held is not None:
            refusal = Revoked(revoked_message(held))
        raised = refusal or (errors[0] if errors else None)
        if raised is not None:
            raised.summary = summary  # type: ignore[attr-defined]
            raise raised
        return summary

    def _upload(
        self,
        client: Any,
        base: str,
        token: str,
        license_id: str,
        summary: dict[str, Any],
        timeout: Any,  # a client.Deadline
    ) -> None:
        import secrets

        with self._lock:
            batch = self._spool.batch(MAX_RECORDS_PER_UPLOAD)
            # An empty upload still earns a receipt: the signed time and usage total a
            # lost state or a clock pushed ahead needs.
            wanted = self._restore_pending or self._hwm > self._now() + self._leeway
        if not batch and not wanted:
            return
        nonce = secrets.token_urlsafe(16)
        status, payload = client.upload_usage(
            base,
            unit_token=token,
            device_id=self.device_id,
            license_id=license_id,
            records=batch,
            nonce=nonce,
            timeout=timeout,
            allow_http=True,  # `base` was checked against the caller's choice
        )
        if status == 403:  # not evidence: only a signed status revokes
            raise LicenseError(
                f"usage upload refused: {client.detail(status, payload)}; {len(batch)} records "
                "kept",
                code=Code.UPLOAD_REFUSED,
            )
        if status == 401:
            raise BadSignature(f"usage upload refused: {client.detail(status, payload)}")
        if status != 200:
            raise LicenseError(
                f"usage upload failed: {client.detail(status, payload)}", code=Code.SYNC_FAILED
            )
        try:
            with self._lock:
                self._learn_certificates(payload.get("certificates"))
            receipt = parse_receipt(payload.get("receipt"), self._keys)
        except LicenseError as exc:
            raise LicenseError(
                f"usage upload answered without a valid receipt ({exc}); "
                f"{len(batch)} records kept for the next sync",
                code=Code.RECEIPT_INVALID,
            ) from None
        if (receipt.nonce, receipt.device_id, receipt.license_id) != (
            nonce,
            self.device_id,
            license_id,
        ):
            raise LicenseError(
                "usage receipt is for another upload, device or licence; "
                f"{len(batch)} records kept for the next sync",
                code=Code.RECEIPT_INVALID,
            )
        covered, aside = self._settle(receipt, batch, license_id)
        for name in ("accepted", "duplicates"):
            value = payload.get(name)
            summary[name] = value if type(value) is int else 0
        summary["conflicts"] = sum(entry["why"] == CONFLICT for entry in aside)
        summary["refused"] = len(aside) - summary["conflicts"]
        summary["deferred"] = len(batch) - len(covered) - len(aside)
        if aside:
            log.warning(
                "%d usage records set aside: the service holds other counts for %d of their "
                "periods and refused %d for good (before the licence's life); they stay in "
                "%s and count against the quota",
                len(aside),
                summary["conflicts"],
                summary["refused"],
                self._spool.aside_path.name,
            )

    def _settle(
        self, receipt: UsageReceipt, batch: list[dict[str, int]], license_id: str
    ) -> tuple[list[dict[str, int]], list[dict[str, Any]]]:
        """Apply a verified receipt of ``batch`` (the records sent): the records it holds
        with exactly the counts sent leave the spool, those held with other counts or
        refused for good move aside; returns ``(covered, aside)``. Shared by :meth:`sync`
        and the file exchange (:mod:`devices.exchange`)."""
        # The set-aside rule (devices.spool): a record leaves the spool as delivered only
        # when the receipt holds exactly the counts sent; other counts, or a refusal for
        # good, move it aside; anything the receipt does not name stays to be sent again.
        covered: list[dict[str, int]] = []
        aside: list[dict[str, Any]] = []
        for record in batch:
            key, counts = period_key(record), counts_of(record)
            if receipt.holds(key, counts):
                covered.append(record)
            elif key in receipt.refused:
                aside.append(conflict(record, license_id, None, REFUSED))
            elif receipt.records.get(key) is not None:
                aside.append(conflict(record, license_id, receipt.records[key], CONFLICT))
        with self._lock:
            # The receipt first, then the spool: a crash in between counts the covered
            # records twice (they are sent again as duplicates), never zero times.
            self._apply_receipt(receipt)
            if aside:
                self._spool.set_conflicts_aside(aside)
            self._spool.remove(covered)
            self._compact_journal()
        return covered, aside

    def _apply_receipt(self, receipt: UsageReceipt) -> None:
        """Take the authority's signed time and usage total (the lock is held)."""
        signed = receipt.issued_at
        if self._hwm > signed + self._leeway:
            log.warning(
                "clock high-water mark %d was ahead of the authority's signed time %d "
                "(a bad clock date); corrected",
                self._hwm,
                signed,
            )
            self._hwm = signed
        self._hwm = max(self._hwm, signed)
        self._receipts[receipt.license_id] = receipt
        floor = self._usage_floor(receipt.license_id)
        if receipt.license_id == self._lic:
            self._used = max(self._used, floor)
            self._reserved = max(self._reserved, self._used)
        else:
            used = self._quota_reserved.get(receipt.license_id, 0)
            self._quota_reserved[receipt.license_id] = max(used, floor)
        self._restore_pending = False
        self._receipt = receipt.text
        self._persist(None)

    def _refresh_status(self, client: Any, base: str, license_id: str, timeout: Any) -> bool:
        """Fetch and keep the signed status of the licence in the token file and of the
        licence running, when they differ (``GET /v1/revocations/status``, conditional
        on the status held: a 304 keeps it as it is). True when an
        answer was no newer than the status held (a replay, or a node that read the
        list a moment earlier): it is kept as it was, and nothing else changes."""
        stale = False
        wanted = [license_id] if self._lic in (None, license_id) else [license_id, self._lic]
        for lic in wanted:
            held = self._statuses.get(lic)
            code, payload = client.fetch_status(
                base,
                license_id=lic,
                device_id=self.device_id,
                if_none_match=status_etag(held.text) if held is not None else "",
                timeout=timeout,
                allow_http=True,
            )
            if code == 304 and held is not None:
                # The status held is the current one (issue 46): it stays as it is, and
                # so does everything it says (its signing time, its lease end). Nothing
                # about a 304 is evidence, so it moves no floor and no clock mark.
                continue
            if code != 200:
                raise LicenseError(
                    f"licence status of {lic} unavailable: {client.detail(code, payload)}; the "
                    "status held is kept",
                    code=Code.SYNC_FAILED,
                )
            with self._lock:
                self._learn_certificates(payload.get("certificates"))
                if self._status_take(payload.get("status"), lic):
                    stale = True
        return stale

    def _status_take(self, text: Any, lic: str) -> bool:
        """Accept the signed status ``text`` of ``lic`` (the lock is held): kept, its
        floor written, effective at once. True when it verifies but is no newer than
        the one held (it changes nothing); ListRejected when it is refused. Shared by
        :meth:`sync` and the file exchange (:mod:`devices.exchange`)."""
        status = statuses.accept(
            text,
            self._keys,
            license_id=lic,
            device_id=self.device_id,
            held=self._statuses.get(lic),
            now=self._now(),
            leeway=self._leeway,
        )
        if status is None:  # valid, but not newer than the one held
            return True
        kept = statuses.keep(self._statuses, status)
        self._write(self.state_dir / STATUS_FILE, statuses.to_json(kept))
        self._statuses, self._status_why = kept, ""
        self._keys.revoked = self._keys.revoked | status.revoked_keys
        self._raise_mark(status.issued_at)
        self._persist(None)  # the newest status's floor goes to state.json
        if status.revoked:
            log.warning("%s; analytics stopped, video continues", revoked_message(status))
        return False

    def _refresh_license(self, client: Any, base: str, token: str, timeout: Any) -> str:
        """Fetch the held licence again (``GET /v1/license``); install a renewed one.
        ``"current"`` (304), ``"renewed"``, or raises with the licence held kept."""
        status, payload = client.fetch_license(
            base,
            token=token,
            device_id=self.device_id,
            timeout=timeout,
            allow_http=True,
            components=getattr(self, "components", None),
        )
        if status == 304:
            return "current"
        if status != 200:
            raise LicenseError(
                f"licence refresh failed: {client.detail(status, payload)}; the licence held "
                "is kept",
                code=Code.REFRESH_FAILED,
            )
        with self._lock:
            self._learn_certificates(payload.get("certificates"))
        renewed = payload.get("token")
        held = decode_unverified(token)
        try:
            if not isinstance(renewed, str):
                raise LicenseError("the answer carries no token", code=Code.REFRESH_INVALID)
            claims = verify_token(renewed, self._keys)
        except LicenseError as exc:
            raise LicenseError(
                f"licence refresh answered a token that does not verify ({exc}); the "
                "licence held is kept",
                code=Code.REFRESH_INVALID,
            ) from None
        problem = _renewal_problem(held, claims, self.device_id)
        if problem:
            raise LicenseError(
                f"licence refresh answered {problem}; the licence held is kept",
                code=Code.REFRESH_INVALID,
            )
        with self._lock:
            # The file first: a crash leaves the old licence or the new one, never none.
            try:
                atomic_write_bytes(self.state_dir / TOKEN_FILE, renewed.encode("ascii") + b"\n")
            except OSError as exc:
                raise unwritable(self.state_dir / TOKEN_FILE, exc) from None
            if self._lic == claims["lic"]:
                self._install(renewed, claims, self._now())
            log.info("licence %s renewed: ends at %d", claims["lic"], claims["exp"])
        return "renewed"
