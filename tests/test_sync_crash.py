"""kill -9 during revocation-list and receipt writes, with real parts: a camera process
meters and syncs against the live gunicorn service in a loop while the operator keeps
revoking other licences (so every sync writes a new list and a receipt), and is killed
with SIGKILL at random points. After every kill the next process must start without a
damaged file or a sync-required state, with its quota never below what the killed one
had acknowledged, and the service must never have counted a record twice."""

from __future__ import annotations

import datetime as dt
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import devices
from billing.models import UsageConflict
from licensing.services import license_issue

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[1]
KILLS = 12
HOUR = 3600
T0 = int(time.time()) // HOUR * HOUR + HOUR  # the licence's 30-day term runs from now

# The service's clock reads the camera's at each sync (config.clock.stop_at on the file
# the live server follows): a usage record may not end in the service's future, and the
# camera's clock runs ahead of the real time.
CAMERA = """
import datetime as dt
import sys
sys.path.insert(0, sys.argv[1])
import devices
from config import clock as service_clock
state, key, url, base = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
service_clock_file = sys.argv[6]
now = [base]
def clock():
    now[0] += 7  # an hour closes every ~500 calls: records keep reaching the spool
    return now[0]
engine = devices.Engine(state, public_key=key, device_id="cam-crash", clock=clock)
print("started", engine.start(), engine.quota_used, flush=True)
while True:
    engine.count(inferences=1)
    print(engine.quota_used, flush=True)
    service_clock.stop_at(service_clock_file, dt.datetime.fromtimestamp(now[0], dt.UTC))
    engine.sync(url, allow_http=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX only")
def test_sigkill_during_list_and_receipt_writes(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live_service = moved_service
    batch = live_service.admin(
        "POST",
        "/v1/admin/batches",
        {"customer_id": customer.id, "sku": "API-METERED", "units": 1},
    )
    state = tmp_path / "camera"
    devices.activate(
        live_service.url, batch["batch_token"], state, device_id="cam-crash", allow_http=True
    )
    others = [
        license_issue(customer_id=customer.id, sku="DETECT-STD", device_id=f"other-{n}").id
        for n in range(KILLS * 2)
    ]
    key = devices.token.public_key_b64url(signing_key.public_key())
    rng = random.Random(20261123)
    acknowledged = 0
    for kill in range(KILLS):
        camera = subprocess.Popen(
            [sys.executable, "-c", CAMERA, str(REPO), str(state), key, live_service.url]
            + [str(T0 + kill * 4 * HOUR), str(server_clock.path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            head = camera.stdout.readline().split()
            assert head[:2] == ["started", "active"], camera.stderr.read()
            assert int(head[2]) >= acknowledged  # quota never handed back by a crash
            for _ in range(2):  # two revocations: the next syncs write a new list
                live_service.admin("POST", "/v1/admin/revoke", {"license_id": others.pop()})
            deadline = time.monotonic() + rng.uniform(0.2, 0.8)
            while time.monotonic() < deadline:
                line = camera.stdout.readline()
                if not line:
                    break
                acknowledged = max(acknowledged, int(line))
        finally:
            camera.send_signal(signal.SIGKILL)
            camera.wait()
        assert not list(state.glob("*.damaged"))
    # A clean last run: everything spooled reaches the service exactly once.
    engine = devices.Engine(
        state, public_key=key, device_id="cam-crash", clock=lambda: T0 + 60 * HOUR
    )
    assert engine.start() == "active"
    with server_clock.at(dt.datetime.fromtimestamp(T0 + 60 * HOUR, dt.UTC)):
        for _ in range(100):  # bounded: a record the service defers would loop forever
            if not engine.pending_records:
                break
            summary = engine.sync(live_service.url, allow_http=True)
            assert (summary["conflicts"], summary["refused"]) == (0, 0), summary
        assert not engine.pending_records
        assert engine.sync(live_service.url, allow_http=True)["list_seq"] >= KILLS * 2
    usage = live_service.admin("GET", f"/v1/admin/usage/{engine.license_id}")
    assert 0 < usage["inferences"] <= acknowledged
    # A record sent again after a kill carries the counts it was first sent with.
    assert not UsageConflict.objects.exists()
    engine.close()
