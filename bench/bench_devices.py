"""Device module hot paths on one core: token verification, per-frame metering, require,
signed licence statuses, list pages and receipts, an engine's start from disk (every
document verified again), and the cost of ``import devices``. Each is printed beside
raw Ed25519 verification measured in the same run (the floor).

Run from the repository root: ``python bench/bench_devices.py``. Targets: verify_token
under 200 µs (it is one Ed25519 verification plus strict decoding), admit_frame + count
under 5 µs per frame, with no state write per frame (writes are counted and printed).
Signed documents are printed next to the raw Ed25519 verification of the same bytes (the
floor); ``import devices`` next to importing its one dependency, ``cryptography``'s
Ed25519, in a fresh interpreter (the floor): networking modules are not loaded by it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from devices import Engine, documents, verify_token  # noqa: E402
from devices.token import b64url_decode, public_key_b64url  # noqa: E402
from svccore import authority  # noqa: E402

IMPORT_PROBE = """
import sys, time, tracemalloc
tracemalloc.start()
started = time.perf_counter()
import {module}
elapsed = time.perf_counter() - started
network = [m for m in ("urllib.request", "http.client", "socket", "ssl", "subprocess")
           if m in sys.modules]
print(elapsed * 1e3, tracemalloc.get_traced_memory()[1] / 1024, ",".join(network) or "-")
"""

FRAMES = 300_000
VERIFY_TARGET_US = 200.0
FRAME_TARGET_US = 5.0


def per_op_us(func, number: int) -> float:
    """Best of five runs, in microseconds per call."""
    return min(timeit.repeat(func, number=number, repeat=5)) / number * 1e6


def main() -> int:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    now = int(time.time())
    claims = {
        "lic": "LIC-BENCH00001",
        "sku": "VISION-PRO",
        "sub": "CUST-BENCH00001",
        "iss": "svc-licensing",
        "dev": "bench-device",
        "ent": {"detect": True, "defect": True, "ppe": True, "anpr": False},
        "lim": {"max_streams": 8, "max_fps": 1_000_000, "api_calls": 1_000_000_000},
        "iat": now,
        "nbf": now,
        "exp": now + 365 * 86400,
        "grace_days": 30,
        "act": "optional",
    }
    token = authority.encode_token(claims, key)
    signing_input, signature = token.rsplit(".", 1)
    raw_signature = b64url_decode(signature)
    message = signing_input.encode("ascii")

    raw = per_op_us(lambda: public.verify(raw_signature, message), 2000)
    verify = per_op_us(lambda: verify_token(token, public), 2000)
    verify_text = per_op_us(lambda: verify_token(token, public_key_b64url(public)), 2000)
    print(
        f"verify_token: {verify:.1f} µs/op (raw ed25519 verify: {raw:.1f} µs/op, "
        f"ratio {verify / raw:.2f})"
    )
    print(f"verify_token with base64url key text: {verify_text:.1f} µs/op")

    with tempfile.TemporaryDirectory() as state_dir:
        engine = Engine(state_dir, public_key=public, device_id="bench-device", air_gapped=True)
        engine.start(token)
        with engine.open_stream() as stream:
            admit, count = engine.admit_frame, engine.count
            writes = engine.state_writes
            started = time.perf_counter()
            for _ in range(FRAMES):
                admit(stream)
                count(inferences=1, frames=1)
            elapsed = time.perf_counter() - started
            writes = engine.state_writes - writes
            admit_us = per_op_us(lambda: admit(stream), 100_000)
            count_us = per_op_us(lambda: count(inferences=1), 100_000)
            require_us = per_op_us(lambda: engine.require("detect"), 100_000)
        engine.close()
    frame = elapsed / FRAMES * 1e6
    print(
        f"admit_frame + count: {frame:.2f} µs/frame "
        f"({FRAMES} frames, {writes} state writes in {elapsed:.2f} s of clock)"
    )
    for name, took in (("admit_frame", admit_us), ("count", count_us), ("require", require_us)):
        print(f"{name}: {took:.2f} µs/call, {took / raw:.3f} of one raw ed25519 verify")
    online_start(key, token, raw)
    signed_documents(key)
    import_cost()
    ok = verify < VERIFY_TARGET_US and frame < FRAME_TARGET_US and writes < FRAMES / 100
    print(
        f"targets: verify_token < {VERIFY_TARGET_US:.0f} µs, per frame < {FRAME_TARGET_US:.0f} µs, "
        f"no write per frame: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


def signed_receipt(key: Ed25519PrivateKey, *, issued_at: int, hours: int) -> str:
    """A usage receipt of the bench device covering ``hours`` records."""
    payload = authority.receipt_payload(
        issuer="bench",
        device_id="bench-device",
        license_id="LIC-BENCH00001",
        nonce="n" * 22,
        issued_at=issued_at,
        records=[(h * 3600, h * 3600 + 3600) for h in range(hours)],
        inferences=0,
    )
    return authority.sign_document(documents.RECEIPT_PREFIX, payload, key)


def online_start(key: Ed25519PrivateKey, token: str, raw: float) -> None:
    """An online engine built and started from its state directory: the token, the
    signed status and the receipt are each verified again (three signatures)."""
    public = key.public_key()
    status = authority.sign_document(
        documents.STATUS_PREFIX,
        authority.status_payload(
            issuer="bench",
            license_id="LIC-BENCH00001",
            device_id="bench-device",
            revoked_at=0,
            seq=1_000_000,
            issued_at=int(time.time()) - 60,
        ),
        key,
    )
    receipt = signed_receipt(key, issued_at=int(time.time()) - 60, hours=0)
    with tempfile.TemporaryDirectory() as state_dir:
        Path(state_dir, "status.json").write_text(json.dumps({"format": 1, "statuses": [status]}))
        Path(state_dir, "state.json").write_text(
            json.dumps({"format": 1, "hwm": 0, "quota": {}, "open": None, "receipt": receipt})
        )
        Path(state_dir, "license.token").write_text(token + "\n")

        def boot() -> None:
            engine = Engine(state_dir, public_key=public, device_id="bench-device")
            engine.start()
            engine.close()

        took = per_op_us(boot, 100)
    head, signature = status.rsplit(".", 1)
    raw_sig, message = b64url_decode(signature), head.encode("ascii")
    floor = per_op_us(lambda: public.verify(raw_sig, message), 2000)
    parse = per_op_us(lambda: documents.parse_status(status, public), 2000)
    print(
        f"licence status ({len(status)} B): verify+parse {parse:.1f} µs, raw ed25519 verify "
        f"of the same bytes {floor:.1f} µs (floor), ratio {parse / floor:.2f}"
    )
    print(
        f"online Engine() + start() from disk (token, status and receipt verified again, "
        f"state written): {took / 1e3:.2f} ms, {took / raw:.1f} raw ed25519 verifies"
    )


def signed_documents(key: Ed25519PrivateKey) -> None:
    public = key.public_key()
    entries = [[f"LIC-{n:016d}", 1_900_000_000] for n in range(documents.LIST_PAGE_ENTRIES)]
    page = authority.sign_document(
        documents.LIST_PREFIX,
        authority.revocation_page_payload(
            issuer="bench", start=0, seq=len(entries), issued_at=0, more=True, revoked=entries
        ),
        key,
    )
    receipt = signed_receipt(key, issued_at=0, hours=1000)
    for name, text, parse in (
        (f"revocation page ({len(entries)} entries, {len(page)} B)", page,
         documents.parse_revocation_page),
        (f"usage receipt (1000 records, {len(receipt)} B)", receipt, documents.parse_receipt),
    ):  # fmt: skip
        head, signature = text.rsplit(".", 1)
        raw_sig, message = b64url_decode(signature), head.encode("ascii")
        floor = per_op_us(lambda: public.verify(raw_sig, message), 20)  # noqa: B023
        took = per_op_us(lambda: parse(text, public), 20)  # noqa: B023
        print(
            f"{name}: verify+parse {took / 1e3:.2f} ms, raw ed25519 verify of the same bytes "
            f"{floor / 1e3:.2f} ms (floor), ratio {took / floor:.1f}"
        )


def import_cost() -> None:
    root = str(Path(__file__).resolve().parents[1])
    results = {}
    for module in ("devices", "cryptography.hazmat.primitives.asymmetric.ed25519"):
        runs = []
        for _ in range(5):
            out = subprocess.run(
                [sys.executable, "-c", IMPORT_PROBE.format(module=module)],
                capture_output=True, text=True, check=True, cwd=root,
            ).stdout.split()  # fmt: skip
            runs.append((float(out[0]), float(out[1]), out[2]))
        results[module] = min(runs)
    own, floor = results["devices"], results["cryptography.hazmat.primitives.asymmetric.ed25519"]
    print(
        f"import devices: {own[0]:.1f} ms, {own[1]:.0f} KiB allocated; floor (import "
        f"cryptography's ed25519): {floor[0]:.1f} ms, {floor[1]:.0f} KiB; ratio "
        f"{own[0] / floor[0]:.2f} (time), {own[1] / floor[1]:.2f} (memory); networking "
        f"modules loaded: {own[2]}"
    )


if __name__ == "__main__":
    sys.exit(main())
