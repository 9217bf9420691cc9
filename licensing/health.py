"""``GET /healthz``: whether this node can sign (its signing key and certificate) and
reach its database."""

from __future__ import annotations

import logging
import time

from django.db import connection
from django.http import HttpRequest, JsonResponse

from config import clock, sharedcache
from config.errors import SignerUnavailable
from signing import keyring

log = logging.getLogger(__name__)

# A load balancer may poll /healthz many times a second: a database check that passed
# less than this long ago in this process stands (a failed one is never reused).
DB_CHECK_REUSE_SECONDS = 1.0
_db_passed_at = [float("-inf")]  # time.monotonic() of this process's last passed check


def _database_ok() -> bool:
    if time.monotonic() - _db_passed_at[0] < DB_CHECK_REUSE_SECONDS:
        return True
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        log.exception("healthz: database unavailable")
        _db_passed_at[0] = float("-inf")
        return False
    _db_passed_at[0] = time.monotonic()
    return True


def healthz(request: HttpRequest) -> JsonResponse:
    """``{ok, public_key (fingerprint of the active signing key), kid, signer, time,
    cache}``;
    503 with ``detail`` when the key, its certificate, its token (``signer`` pkcs11: a
    probe signature, one that passed within a second standing) or the database is
    unusable (a database check that passed within :data:`DB_CHECK_REUSE_SECONDS` is
    reused)."""
    body = {
        "ok": True,
        "public_key": "",
        "kid": "",
        "signer": "",
        "time": int(clock.now().timestamp()),
    }
    try:
        active = keyring.active_key()
        body["public_key"] = active.fingerprint
        body["kid"] = active.kid
        body["signer"] = active.signer.kind
        active.signer.check()  # SignerUnavailable unless it can sign now
    except SignerUnavailable as exc:
        body["ok"] = False
        body["detail"] = exc.detail
    except Exception:
        log.exception("healthz: signing key unavailable")
        body["ok"] = False
        body["detail"] = "signing key unavailable; the service log has the details"
    if not _database_ok():
        body["ok"] = False
        body.setdefault("detail", "database unavailable; the service log has the details")
    if body["ok"]:
        try:
            problem = keyring.active_key_problem()
        except Exception:
            log.exception("healthz: signing keys unreadable")
            problem = "signing keys unreadable; the service log has the details"
        if problem:
            body["ok"] = False
            body["detail"] = problem
    # The shared cache is an optimisation: without it this node still serves correctly
    # (config.sharedcache), so it is reported, not a reason to take the node out.
    body["cache"] = sharedcache.state()
    return JsonResponse(body, status=200 if body["ok"] else 503)
