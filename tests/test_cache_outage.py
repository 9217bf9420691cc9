"""A shared-cache outage ends well (issue 22, item 1): real gunicorn with CACHE_URL on a
Redis of the test's own, stopped and started again under load. Activations (through the
activation limit), list polling and usage uploads keep being answered, never with a 500;
every activation answered 200 is exactly one seat taken and every seat taken was
answered; /healthz says what the cache is doing; recovery needs no restart."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest

from tests.conftest import start_gunicorn, start_private_redis, stop_gunicorn

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

UNITS = 400


def call(url: str, method: str = "GET", body: dict | None = None, **headers: str):
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_redis_stopped_and_started_under_load(tmp_path, customer, settings):
    (tmp_path / "redis").mkdir()
    redis = start_private_redis(tmp_path / "redis")
    service = start_gunicorn(
        tmp_path,
        CACHE_URL=redis.url,
        SVC_ACTIVATION_ALLOWLIST="",  # every activation goes through the limit
        SVC_ACTIVATION_RATE="100000/10s",
    )
    try:
        batch = service.admin(
            "POST",
            "/v1/admin/batches",
            {"customer_id": customer.id, "sku": "VISION-PRO", "units": UNITS},
        )
        statuses: Counter[tuple[str, int]] = Counter()
        activated: list[str] = []
        tokens: list[tuple[str, str, str]] = []
        stop = threading.Event()
        lock = threading.Lock()
        devices = iter(range(10**6))

        def activations() -> None:
            while not stop.is_set():
                device = f"cam-{next(devices):05d}"
                status, body = call(
                    f"{service.url}/v1/activate",
                    "POST",
                    {"batch_token": batch["batch_token"], "device_id": device},
                )
                with lock:
                    statuses["activate", status] += 1
                    if status == 200:
                        activated.append(device)
                        tokens.append((device, body["license_id"], body["unit_token"]))
                if status == 402:
                    return

        def revoking() -> None:
            """The list's head keeps moving, so its answers are built anew (and cached)."""
            revoked = 0
            while not stop.is_set():
                with lock:
                    target = tokens[-1][1] if len(tokens) > 40 + revoked else None
                if target is not None:
                    status, _ = call(
                        f"{service.url}/v1/admin/revoke",
                        "POST",
                        {"license_id": target, "reason": "outage test"},
                        **{"X-Admin-Key": service.admin_key},
                    )
                    with lock:
                        statuses["revoke", status] += 1
                    revoked += 1
                time.sleep(0.05)

        def polling() -> None:
            while not stop.is_set():
                status, body = call(f"{service.url}/v1/revocations?since=0")
                with lock:
                    statuses["list", status] += 1
                head = body.get("seq", 0) if status == 200 else 0
                status, _ = call(f"{service.url}/v1/revocations?since={max(head - 1, 0)}")
                with lock:
                    statuses["list", status] += 1
                status, _ = call(f"{service.url}/healthz")
                with lock:
                    statuses["healthz", status] += 1

        uploads: list[tuple[str, int]] = []
        not_stored: list[dict] = []  # records a 200 answer refused or found in conflict
        # One-second records from just under an hour before the first activation, each
        # period once: within every licence's life (contract §7), none in the future.
        base = int(time.time()) - 3500

        def usage() -> None:
            n = 0
            while not stop.is_set():
                with lock:
                    held = list(tokens[:20])
                for device, license_id, token in held:
                    n += 1
                    record = {
                        "period_start": base + n,
                        "period_end": base + n + 1,
                        "inferences": 3, "frames": 1, "stream_seconds": 0, "events": 0,
                    }  # fmt: skip
                    status, body = call(
                        f"{service.url}/v1/usage",
                        "POST",
                        {"device_id": device, "license_id": license_id, "records": [record],
                         "nonce": f"n{n}"},
                        Authorization=f"Bearer {token}",
                    )  # fmt: skip
                    with lock:
                        statuses["usage", status] += 1
                        if status == 200:
                            uploads.append((license_id, record["period_start"]))
                            not_stored.extend(body["refused"] + body["conflicts"])
                time.sleep(0.01)

        loads = (activations, activations, revoking, polling, usage)
        workers = [threading.Thread(target=f) for f in loads]
        for worker in workers:
            worker.start()
        time.sleep(1.0)
        redis.stop()  # the outage, under load
        time.sleep(1.0)
        during = call(f"{service.url}/healthz")
        time.sleep(1.0)
        redis.start()  # back, empty, on the same port: no restart of the service
        time.sleep(1.5)
        after = call(f"{service.url}/healthz")
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
    finally:
        stop_gunicorn(service)
        redis.stop()

    assert not [key for key in statuses if key[1] >= 500], statuses
    assert statuses["activate", 200] > 20 and statuses["list", 200] > 20, statuses
    assert statuses["usage", 200] > 5 and statuses["revoke", 200] > 10, statuses
    assert not_stored == []
    assert during[0] == 200 and during[1]["cache"].startswith("unavailable"), during
    assert after[0] == 200 and after[1]["cache"] == "ok", after
    # acked = stored: each 200 is one seat, and every seat taken was answered.
    from billing.models import UsageRecord
    from licensing.models import Activation, Batch

    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == len(set(activated))
    assert set(Activation.objects.values_list("device_id", flat=True)) == set(activated)
    stored = set(UsageRecord.objects.values_list("license_id", "period_start"))
    assert set(uploads) <= stored
