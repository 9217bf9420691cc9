"""The device against a hostile owner and a hostile network, by property (issue 21).

A real camera is set up against the live gunicorn service: activated, counting on a
metered licence over several hours, synced (some hours uploaded, one spooled, one open),
with an older copy of its state directory kept. A second camera gives "another device's
copy" of each file. Then hypothesis draws, per example, ONE file of the state directory
and what happens to it (deleted, truncated, random bytes, each JSON field emptied,
nulled, zeroed or retyped, nested deeply, replaced by the other camera's copy or by the
older copy), and what a proxy on the network path does to every answer (status, headers,
body bytes, an older genuine answer replayed). Each example restarts the camera from a
fresh copy, starts, meters, syncs through the proxy, then through the honest service.

Properties:
(a) nothing but a coded ``devices.LicenseError`` ever comes out;
(b) a licence the camera has learned is revoked never starts, and analytics refuse;
(c) no usage is lost: every hour the camera had not yet delivered is afterwards stored on
    the service or still held by the camera, with at least its counts; and the quota used
    after the honest sync is never below what was counted.

Replacing the whole directory by an older copy is a documented bound (docs/devices.md), tested in
tests/devices/test_device_evidence.py, so the mutations here touch one file. The number
of examples is fixed for CI (derandomized); ``SVC_FUZZ_EXAMPLES`` raises it locally.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devices
from billing.models import UsageRecord

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOUR = 3600
T0 = int(time.time()) // HOUR * HOUR + HOUR  # the camera clock runs ahead of the signed times
EXAMPLES = int(os.environ.get("SVC_FUZZ_EXAMPLES", "200"))
FILES = ["license.token", "keys.json", "status.json", "state.json", "spool.json", "usage.journal"]
DEEP = b"[" * 50_000 + b"]" * 50_000


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the proxy: any status, header or byte of any answer --------------------------------


class ByteProxy:
    """Forwards to the service; ``mutate(path, status, headers, body, earlier)`` may
    return other bytes (``earlier``: the genuine answer this path gave before, to
    replay)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mutate = None
        self.genuine: dict[str, tuple[int, dict[str, str], bytes]] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "authorization", "if-none-match")
                }
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=data, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, body, got = answer.status, answer.read(), dict(answer.headers)
                except urllib.error.HTTPError as exc:
                    status, body, got = exc.code, exc.read(), dict(exc.headers)
                path = self.path.split("?")[0]
                sent = {"Content-Type": got.get("Content-Type", "application/json")}
                earlier = proxy.genuine.get(path, (status, dict(sent), body))
                proxy.genuine[path] = (status, dict(sent), body)
                if proxy.mutate is not None:
                    status, sent, body = proxy.mutate(path, status, sent, body, earlier)
                self.send_response(status)
                length = sent.pop("Content-Length", None)
                for name, value in sent.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _answer_mutation(kind: str, seed: int):
    rng = random.Random(seed)

    def mutate(path, status, headers, body, earlier):
        if kind == "status":
            return rng.choice([200, 204, 304, 400, 401, 403, 404, 409, 500, 502]), headers, body
        if kind == "empty":
            return status, headers, b""
        if kind == "truncate":
            return status, headers, body[: rng.randrange(len(body) + 1)]
        if kind == "random bytes":
            return status, headers, rng.randbytes(rng.randrange(1, 400))
        if kind == "deep":
            return 200, headers, DEEP
        if kind == "list":
            return 200, headers, b"[1, 2, 3]"
        if kind == "gzip lie":
            return status, {**headers, "Content-Encoding": "gzip"}, body
        if kind == "short length":
            return status, {**headers, "Content-Length": str(max(len(body) - 7, 0))}, body
        if kind == "replay":
            return earlier
        # a field of the JSON answer nulled, emptied, zeroed or retyped
        try:
            value = json.loads(body)
        except ValueError:
            return status, headers, body
        if isinstance(value, dict) and value:
            name = rng.choice(sorted(value))
            value[name] = rng.choice([None, "", 0, [], {}, "x", 10**30, True])
        return status, headers, json.dumps(value).encode()

    return mutate


ANSWER_KINDS = [
    "none", "status", "empty", "truncate", "random bytes", "deep", "list", "gzip lie",
    "short length", "replay", "field",
]  # fmt: skip


# -- one-file mutations -----------------------------------------------------------------


def _retyped(value: Any, rng: random.Random) -> Any:
    return rng.choice([None, "", 0, -1, [], {}, "x", 2**80, [[[]]], True, 1.5])


def _mutate_json(data: bytes, rng: random.Random) -> bytes:
    try:
        value = json.loads(data)
    except ValueError:
        return data[: rng.randrange(len(data) + 1)]
    if isinstance(value, dict) and value:
        name = rng.choice(sorted(value))
        inner = value[name]
        if isinstance(inner, list) and inner and rng.random() < 0.5:
            inner.pop(rng.randrange(len(inner)))  # drop an item
        elif isinstance(inner, dict) and inner and rng.random() < 0.5:
            key = rng.choice(sorted(inner))
            inner[key] = _retyped(inner[key], rng)
        else:
            value[name] = _retyped(inner, rng)
    else:
        value = _retyped(value, rng)
    return json.dumps(value).encode()


def _mutate_file(
    directory: Path, name: str, kind: str, seed: int, world: World, camera: Camera
) -> None:
    rng = random.Random(seed)
    path = directory / name
    data = path.read_bytes() if path.exists() else b""
    if kind == "delete":
        path.unlink(missing_ok=True)
    elif kind == "truncate":
        path.write_bytes(data[: rng.randrange(len(data) + 1)])
    elif kind == "random bytes":
        path.write_bytes(rng.randbytes(rng.randrange(1, 600)))
    elif kind == "deep":
        path.write_bytes(DEEP)
    elif kind == "field":
        path.write_bytes(_mutate_json(data, rng) if name != "usage.journal" else data)
        if name == "usage.journal" and data:
            lines = data.split(b"\n")
            index = rng.randrange(len(lines))
            lines[index] = _mutate_json(lines[index], rng)
            path.write_bytes(b"\n".join(lines))
    elif kind == "other device":
        other = world.other / name
        if other.exists():
            shutil.copyfile(other, path)
        else:
            path.unlink(missing_ok=True)
    elif kind == "older copy":
        older = camera.older / name
        if older.exists():
            shutil.copyfile(older, path)
        else:
            path.unlink(missing_ok=True)


FILE_KINDS = [
    "none",
    "delete",
    "truncate",
    "random bytes",
    "deep",
    "field",
    "other device",
    "older copy",
]


# -- the world: cameras, snapshots, what was counted -------------------------------------


@dataclass
class Camera:
    """A camera's directory at the snapshot, its copy an hour earlier, and what it held."""

    directory: Path
    older: Path
    device_id: str
    license_id: str
    counted: int  # inferences it counted
    unsent: dict[tuple[int, int], dict[str, int]] = field(default_factory=dict)


@dataclass
class World:
    live: Camera  # syncing normally: hours uploaded, one spooled, one open
    revoked: Camera  # learned at its last sync that its licence is revoked
    other: Path  # a third camera's directory: "another device's copy"
    key: str
    clock: Clock
    at: float = 0.0


def _engine(directory: Path, world: World, device_id: str) -> devices.Engine:
    return devices.Engine(directory, public_key=world.key, device_id=device_id, clock=world.clock)


def _held(engine: devices.Engine) -> dict[tuple[int, int], dict[str, int]]:
    """Every hour the engine holds and has not seen delivered: spool, set aside, open."""
    records = [*engine.pending_records, *engine.set_aside_records]
    if engine.usage is not None:
        records.append(engine.usage)
    return {
        (r["period_start"], r["period_end"]): r
        for r in records
        if isinstance(r, dict) and type(r.get("period_start")) is int
    }


def _activate(live_service, customer, tmp_path, name: str) -> Path:
    batch = live_service.admin(
        "POST", "/v1/admin/batches", {"customer_id": customer.id, "sku": "API-METERED", "units": 1}
    )
    state = tmp_path / name
    devices.activate(live_service.url, batch["batch_token"], state, device_id=name, allow_http=True)
    return state


def _run_camera(live_service, world: World, directory: Path, name: str, tmp_path) -> Camera:
    """Count over four hours, sync after the third, keep a copy, close the fourth hour
    without syncing and stop as a crash would: uploaded, spooled and open usage."""
    clock = world.clock
    clock.now = T0 + 10
    engine = _engine(directory, world, name)
    engine.start()
    counted = 0
    for hour, inferences in enumerate([300, 200, 7]):
        clock.now = T0 + hour * HOUR + 10
        engine.count(inferences=inferences, frames=inferences, events=1)
        counted += inferences
    engine.sync(live_service.url, allow_http=True)  # hours 1 and 2 delivered
    engine.count(inferences=40)
    counted += 40
    engine.close()
    older = tmp_path / f"{name}-older"
    shutil.copytree(directory, older)
    engine = _engine(directory, world, name)
    engine.start()
    clock.now = T0 + 3 * HOUR + 10
    engine.count(inferences=11, frames=3)  # the third hour closes: spooled, not sent
    counted += 11
    clock.now += 5
    engine.count(frames=1)  # a checkpoint
    unsent = _held(engine)
    engine._dir_lock.release()  # the process dies: no clean close
    token, _ = devices.keys.split_license_file((directory / "license.token").read_text())
    license_id = devices.token.decode_unverified(token)["lic"]
    return Camera(directory, older, name, license_id, counted, unsent)


@pytest.fixture
def world(live_service, customer, signing_key, tmp_path) -> World:
    key = devices.token.public_key_b64url(signing_key.public_key())
    world = World(live=None, revoked=None, other=tmp_path / "x", key=key, clock=Clock(T0))  # type: ignore[arg-type]
    world.live = _run_camera(
        live_service,
        world,
        _activate(live_service, customer, tmp_path, "cam-live"),
        "cam-live",
        tmp_path,
    )
    revoked = _run_camera(
        live_service,
        world,
        _activate(live_service, customer, tmp_path, "cam-rev"),
        "cam-rev",
        tmp_path,
    )
    live_service.admin(
        "POST", "/v1/admin/revoke", {"license_id": revoked.license_id, "reason": "fuzz"}
    )
    engine = _engine(revoked.directory, world, "cam-rev")
    with pytest.raises(devices.Revoked):
        engine.sync(live_service.url, allow_http=True)
    revoked.unsent = _held(engine)
    engine._dir_lock.release()
    world.revoked = revoked
    world.other = _activate(live_service, customer, tmp_path, "cam-other")
    other = _engine(world.other, world, "cam-other")
    other.start()
    other.count(inferences=9)
    clock_at = world.clock.now
    world.clock.now = clock_at + HOUR
    other.count(frames=1)
    other.close()
    world.at = world.clock.now = clock_at
    assert world.live.unsent and world.revoked.unsent
    return world


def _stored(license_id: str) -> dict[tuple[int, int], int]:
    rows = UsageRecord.objects.filter(license_id=license_id)
    return {(s, e): i for s, e, i in rows.values_list("period_start", "period_end", "inferences")}


# -- the property ------------------------------------------------------------------------


def _coded(call):
    """Run ``call``; a LicenseError is an answer (returned), anything else fails."""
    try:
        return call(), None
    except devices.LicenseError as exc:
        assert exc.code, f"{type(exc).__name__} without a code: {exc}"
        return None, exc


def test_no_file_and_no_answer_unlocks_a_revoked_license_or_loses_usage(
    live_service, world, tmp_path
):
    proxy = ByteProxy(live_service.url)
    runs = iter(range(10**9))

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        scenario=st.sampled_from(["live", "revoked"]),
        name=st.sampled_from(FILES),
        file_kind=st.sampled_from(FILE_KINDS),
        answer_kind=st.sampled_from(ANSWER_KINDS),
        seed=st.integers(0, 2**32),
    )
    def example(scenario, name, file_kind, answer_kind, seed):
        camera = world.live if scenario == "live" else world.revoked
        directory = tmp_path / f"run-{next(runs)}"
        shutil.copytree(camera.directory, directory)
        _mutate_file(directory, name, file_kind, seed, world, camera)
        world.clock.now = world.at
        engine, error = _coded(lambda: _engine(directory, world, camera.device_id))
        assert error is None, f"Engine() refused after {file_kind} {name}: {error}"
        try:
            started, _ = _coded(engine.start)
            counted, _ = _coded(lambda: engine.count(inferences=1))
            if scenario == "revoked":  # (b)
                assert started is None and counted is None, (file_kind, name, started)
            proxy.mutate = None if answer_kind == "none" else _answer_mutation(answer_kind, seed)
            _coded(lambda: engine.sync(proxy.url, timeout=5, allow_http=True))
            started, _ = _coded(engine.start)
            if scenario == "revoked":
                assert started is None, (file_kind, name, answer_kind)
            proxy.mutate = None
            summary, error = _coded(
                lambda: engine.sync(live_service.url, timeout=5, allow_http=True)
            )
            started, start_error = _coded(engine.start)
            token_lost = name == "license.token" and file_kind != "none"
            if scenario == "revoked":
                assert started is None and isinstance(
                    start_error, (devices.Revoked, devices.LicenseError)
                )
                if not token_lost:
                    assert isinstance(error, devices.Revoked), (file_kind, name, error)
                    assert isinstance(start_error, devices.Revoked), (file_kind, name, start_error)
            elif not token_lost:
                assert error is None, (file_kind, name, answer_kind, error)
                assert started == "active", (file_kind, name, start_error)
                assert engine.quota_used >= camera.counted, (file_kind, name, engine.quota_used)
            # (c) every undelivered hour is on the service or still on the camera
            stored, held = _stored(camera.license_id), _held(engine)
            for key, record in camera.unsent.items():
                on_camera = held.get(key, {}).get("inferences", -1)
                assert (
                    stored.get(key, -1) >= record["inferences"] or on_camera >= record["inferences"]
                ), (file_kind, name, answer_kind, key, record, stored.get(key), held.get(key))
        finally:
            _coded(engine.close)
            shutil.rmtree(directory, ignore_errors=True)

    try:
        example()
    finally:
        proxy.close()
