"""The service's URLs plus the floors the benchmarks measure it against, served by the
same gunicorn with the same settings and middleware:

- ``GET /bench/django``: a bare Django view (no database, no cache);
- ``GET /bench/floor``: a bare DRF view (no database, no cache); ``POST`` to it takes
  an activation's request and does nothing with it;
- ``GET /bench/query``: the same plus one ``SELECT 1`` round trip to the database;
- ``POST /bench/activate``: a hand-written activation, the least a new activation can
  do: verify the batch key (no cache), take the seat by one conditional UPDATE, sign the
  unit licence, write the licence and its activation by one INSERT statement, commit.
  It checks nothing else (revocation, exact token, expiry, a device already on file).
"""

from __future__ import annotations

import hashlib
import json
import time

from django.db import connection, transaction
from django.http import JsonResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import handler500
from config.urls import urlpatterns as service_urlpatterns
from devices import token as codec
from signing import keyring
from svccore import authority, ids

__all__ = ["handler500", "urlpatterns"]

SEAT_SQL = (
    "UPDATE licensing_batch SET units_activated = units_activated + 1 "
    "WHERE id = %s AND units_activated < units_purchased "
    "RETURNING units_purchased - units_activated, customer_id, sku, unit_price, currency, "
    "expires_at"
)
UNIT_SQL = """
WITH unit AS (
    INSERT INTO licensing_license (id, kind, customer_id, sku, device_id, activation,
        batch_id, issued_at, expires_at, grace_days, unit_price, currency, claims, token,
        token_sha256, revoke_reason)
    VALUES (%s, 'unit', %s, %s, %s, 'optional', %s, to_timestamp(%s), %s, %s, %s, %s,
        %s, %s, %s, '')
    RETURNING id, issued_at
)
INSERT INTO licensing_activation (batch_id, device_id, license_id, fingerprint_source,
    weak_binding, sdk_version, activated_at, client_ip)
SELECT %s, %s, id, '', false, '', issued_at, NULL FROM unit
"""


def floor_django(request):
    return JsonResponse({"ok": True})


class FloorApi(APIView):
    def get(self, request):
        return Response({"ok": True})

    def post(self, request):  # the same request as an activation, body left unread
        return Response({"ok": True})


class FloorQueryApi(APIView):
    """A bare DRF view plus one round trip to the database: what any request that must
    read one fact the database holds (a re-activation) pays at least."""

    def get(self, request):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return Response({"ok": True})


class FloorActivateApi(APIView):
    def post(self, request):
        device_id = request.data["device_id"]
        claims = codec.verify_token(request.data["batch_token"], keyring.public_key())
        batch_id = claims["batch"]["id"]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(SEAT_SQL, [batch_id])
            seat = cursor.fetchone()
            if seat is None:
                return Response({"detail": f"batch {batch_id} is exhausted"}, status=402)
            remaining, customer_id, sku, price, currency, expires_at = seat
            now = int(time.time())
            unit = {**claims, "lic": ids.license_id(), "dev": device_id, "act": "optional"}
            unit.update(iat=now, nbf=now)
            del unit["batch"]
            token = authority.encode_token(unit, keyring.signing_key())
            cursor.execute(
                UNIT_SQL,
                [
                    unit["lic"], customer_id, sku, device_id, batch_id, now, expires_at,
                    unit["grace_days"], price, currency, json.dumps(unit), token,
                    hashlib.sha256(token.encode()).hexdigest(), batch_id, device_id,
                ],
            )  # fmt: skip
        return Response(
            {"unit_token": token, "license_id": unit["lic"], "batch_units_remaining": remaining}
        )


urlpatterns = [
    path("bench/django", floor_django),
    path("bench/floor", FloorApi.as_view()),
    path("bench/query", FloorQueryApi.as_view()),
    path("bench/activate", FloorActivateApi.as_view()),
    *service_urlpatterns,
]
