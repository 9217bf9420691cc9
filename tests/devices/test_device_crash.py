"""Crash safety of the engine's state: a metering process is killed with SIGKILL at an
arbitrary point, over and over, on the same state directory.

The child acknowledges each counted inference on stdout only after ``count`` returned.
Whatever the parent has read before the kill was acknowledged, so after every kill the
state must load (never torn), and the quota counter must resume at or above the last
acknowledged value: a crash may cost a reserved block, never hand quota back. The child
runs with a tiny quota block, short periods and a clock that moves 0.3 s per call, so
reservations, checkpoints and period roll-overs (spool writes) all happen constantly
and the kill lands inside a write often.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devices import Engine
from tests.devices.device_support import DEVICE, provision

REPO = Path(__file__).resolve().parents[2]
ITERATIONS = 30
BLOCK = 7

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from devices import Engine, engine
engine.QUOTA_BLOCK = int(sys.argv[5])
engine.PERIOD_SECONDS = 60
state, key, token, start = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[6])
now = [start]
def clock():
    now[0] += 0.3
    return now[0]
e = Engine(state, public_key=key, device_id=sys.argv[7], clock=clock)
e.start(token)
print("resumed", e.quota_used, flush=True)
while True:
    e.count(inferences=1, frames=2)
    print(e.quota_used, flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX only")
def test_sigkill_mid_write_never_corrupts_state_or_lowers_counters(
    tmp_path, make_token, public_key, signing_key
):
    state = tmp_path / "state"
    provision(state, signing_key)
    token = make_token(lim={"max_streams": 1, "max_fps": 30, "api_calls": 0}, exp=0)
    rng = random.Random(20260601)  # fixed seed: the same kill points each run
    acknowledged = 0
    start = 1_750_000_000.0
    for iteration in range(ITERATIONS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(REPO), str(state), public_key, token]
            + [str(BLOCK), str(start + iteration * 100_000), DEVICE],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            head = child.stdout.readline().split()
            assert head[:1] == ["resumed"], child.stderr.read()
            resumed = int(head[1])
            assert resumed >= acknowledged, f"iteration {iteration}: counter went back"
            # Let it run for a while (a seeded number of acknowledgements), then kill it
            # without warning, wherever it is: often inside fsync or os.replace.
            for _ in range(rng.randint(1, 400)):
                line = child.stdout.readline()
                assert line, child.stderr.read()
                acknowledged = int(line)
            time.sleep(rng.random() * 0.01)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.communicate(timeout=30)
        # The files on disk parse after every kill.
        for name in ("state.json", "spool.json"):
            if (state / name).exists():
                json.loads((state / name).read_text())
    final = Engine(state, public_key=public_key, device_id=DEVICE, clock=lambda: start + 1e7)
    final.start(token)
    assert final.quota_used >= acknowledged
    # Usage records: each period was spooled at most once.
    keys = [(r["period_start"], r["period_end"]) for r in final.pending_records]
    assert len(keys) == len(set(keys))
