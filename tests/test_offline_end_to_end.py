"""The air-gapped round trip (issue 44) through a real gunicorn and ``svcctl``: a vendored
device module in a directory of its own, run with no network route at all (``unshare
-n``, where the machine allows it), writes an activation request; the operator answers
it with ``svcctl offline-activate``; the camera installs the answer, starts, counts, and
exports its usage; ``svcctl offline-usage`` stores it and writes the receipt; the camera
installs the receipt and its spool is empty. The invoice shows the seat and the usage
(the oracle: the catalogue's prices), and reading the files again changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import devices
from licensing.models import Batch
from tests.operators.test_svcctl import svcctl
from tests.test_end_to_end import HOUR, T0, SharedClock

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DEVICE = "cam-site-7"
# The camera's side, run inside the vendored directory: the library calls at a given time.
CAMERA = """
import json, socket, sys
import devices

at, command, state, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
assert devices.__file__.startswith(sys.path[0]), devices.__file__  # the vendored copy
if sys.argv[5:] == ["air-gapped"]:
    probe = socket.socket()
    probe.settimeout(2)
    assert probe.connect_ex(("127.0.0.1", int(sys.argv[6]) if len(sys.argv) > 6 else 80)) != 0
clock = lambda: at
if command == "request":
    open(path, "w").write(devices.offline_request(open(path + ".key").read(), state, clock=clock))
elif command == "install":
    try:
        print(json.dumps(devices.offline_install(open(path).read(), state, clock=clock)))
    except devices.LicenseError as exc:
        print(json.dumps({"error": exc.code}))
elif command == "count":
    with devices.Engine(state, clock=clock) as engine:
        engine.start()
        engine.require("detect")
        engine.count(inferences=int(path))
elif command == "export":
    open(path, "w").write(devices.usage_export(state, clock=clock))
"""


def _air_gap() -> list[str]:
    """``unshare -n`` when this machine lets the test take the network away."""
    try:
        done = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ["unshare", "-n"] if done.returncode == 0 else []


def test_air_gapped_round_trip_through_svcctl(
    moved_service, server_clock, customer, signing_key, tmp_path
):
    live = moved_service
    clock = SharedClock(T0 + 10, server_clock)
    online = {"SVC_URL": live.url, "SVC_ADMIN_KEY": live.admin_key}
    batch = live.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "VISION-PRO", "units": 2}
    )
    public = tmp_path / "licence.pub"
    public.write_text(devices.token.public_key_b64url(signing_key.public_key()))
    firmware = tmp_path / "firmware"
    command = [sys.executable, "-m", "devices", "vendor", "--pubkey", str(public)]
    vendored = subprocess.run(
        [*command, "--out", str(firmware)], capture_output=True, text=True, timeout=60
    )
    assert vendored.returncode == 0, vendored.stderr
    (firmware / "camera.py").write_text(CAMERA)
    gap = _air_gap()
    port = live.url.rsplit(":", 1)[1]
    state = firmware / "state"

    def camera(at: int, command: str, path: str | Path) -> str:
        clock.now = at
        args = [*gap, sys.executable, "camera.py", str(at), command, str(state), str(path)]
        if gap:
            args += ["air-gapped", port]
        env = {"PATH": os.environ["PATH"], "SVC_DEVICE_ID": DEVICE, "HOME": str(tmp_path)}
        done = subprocess.run(
            args, cwd=firmware, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def operator(*args: str) -> dict:
        done = svcctl(*args, "--json", env=online)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    # 1. The request, written on the camera with no network.
    request = tmp_path / "site" / "req.svcreq"
    request.parent.mkdir()
    Path(f"{request}.key").write_text(batch["batch_token"])
    camera(T0 + 20, "request", request)
    assert request.read_text().startswith("SVCQ1.")

    # 2. The operator answers it; the same request again takes no second seat.
    answer = tmp_path / "site" / "resp.svcresp"
    first = operator("offline-activate", str(request), "--out", str(answer))
    assert first["reactivated"] is False and first["device_id"] == DEVICE
    again = operator("offline-activate", str(request), "--out", str(answer), "--force")
    assert again["reactivated"] is True and again["license_id"] == first["license_id"]
    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 1
    assert (answer.stat().st_mode & 0o777) == 0o600

    # 3. Installed on the camera, which starts and counts.
    assert json.loads(camera(T0 + 30, "install", answer))["kind"] == "activation"
    camera(T0 + 40, "count", 250_000)
    camera(T0 + HOUR + 50, "count", 1)  # the first period closes

    # 4. Usage by file, and the receipt that clears the spool.
    usage = tmp_path / "site" / "usage.svcuse"
    camera(T0 + HOUR + 60, "export", usage)
    receipt = tmp_path / "site" / "receipt.svcrcpt"
    stored = operator("offline-usage", str(usage), "--out", str(receipt))
    assert (stored["accepted"], stored["duplicates"], stored["revoked"]) == (1, 0, False)
    installed = json.loads(camera(T0 + HOUR + 70, "install", receipt))
    assert (installed["removed"], installed["pending"]) == (1, 0)
    assert not json.loads((state / "spool.json").read_text()).get("records")

    # Reading the same file again stores nothing; its answer is a replay on the camera.
    totals = live.admin("GET", f"/v1/admin/usage/{first['license_id']}")
    replayed = tmp_path / "site" / "receipt-again.svcrcpt"
    twice = operator("offline-usage", str(usage), "--out", str(replayed))
    assert (twice["accepted"], twice["duplicates"]) == (0, 1)
    assert live.admin("GET", f"/v1/admin/usage/{first['license_id']}") == totals
    assert json.loads(camera(T0 + HOUR + 80, "install", replayed)) == {"error": "RECEIPT_INVALID"}

    # Damaged files at every step are coded refusals that take nothing.
    text = receipt.read_text()
    receipt.write_text(text[: len(text) // 2])
    assert json.loads(camera(T0 + HOUR + 90, "install", receipt)) == {"error": "BAD_SIGNATURE"}
    usage.write_text(usage.read_text()[:-20])
    refused = svcctl("offline-usage", str(usage), "--out", str(tmp_path / "x"), env=online)
    assert refused.returncode != 0 and "BAD_REQUEST" in refused.stderr
    request.write_text(request.read_text().replace("SVCQ1.", "SVCQ1.e", 1))
    refused = svcctl("offline-activate", str(request), "--out", str(tmp_path / "y"), env=online)
    assert refused.returncode != 0 and "BAD_REQUEST" in refused.stderr
    assert Batch.objects.get(pk=batch["batch_id"]).units_activated == 1

    # 5. The invoice: one seat at the catalogue's price, 50,000 inferences over the
    # 200,000 a unit includes at 0.40 per 1,000.
    invoice = live.admin("GET", f"/v1/admin/invoice/{customer.id}?period_days=30")
    kinds = {line["kind"]: line for line in invoice["lines"]}
    assert kinds["unit_activation"]["quantity"] == 1
    assert kinds["unit_activation"]["amount"] == 240
    over = [line for line in invoice["lines"] if "inferences" in line["description"]]
    assert [line["amount"] for line in over] == [20]
    assert "250,000 used" in over[0]["description"]
