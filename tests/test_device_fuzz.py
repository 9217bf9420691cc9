"""The device against a hostile owner, a hostile network and a wandering clock, by
property (issues 21 and 36).

A gunicorn of its own serves the test database with a root of trust (``SVC_ROOT_KEYS``:
a temporary root certified the session's signing key) and a clock the test sets
(``SVC_TEST_CLOCK_FILE``). The cameras verify through that root keyring with the key
certificates of their ``keys.json``, never a pinned key. Three cameras on metered
licences count over four hours, syncing through a byte-level proxy (so that its
answers, the revoked camera's from before its revocation too, can be replayed later):

- ``live``: before its first sync its owner registered a zero record for its second
  hour with the camera's own token (and future hours, which the service refuses), so
  that hour is set aside as a conflict; one hour delivered, one spooled, one open;
- ``revoked``: the same, then learned at a sync that its licence is revoked;
- ``exhausted``: counted up to its quota and was refused more (QuotaExceeded).

Each keeps its state directory and a copy an hour older. Per example, hypothesis draws a
camera and ONE file of its directory and what happens to it (deleted, truncated, random
bytes, nested deeply, a JSON field dropped or retyped, each field of ``state.json``
given a value an owner would try, a conflict in ``spool.rejected.json`` edited, the file
of another camera or of the older copy); steps of the camera's clock, counting as it
goes: forward, an hour, back within the leeway, jumps either way, restarts, crashes;
maybe the owner's zero records for its hours, sent first; a proxy that rewrites the
usage upload (zeroed, inflated, replayed, records reordered, dropped or doubled) and any
answer (status, headers, bytes, an older genuine answer). Then the clock is set right,
the camera syncs with the honest service and restarts. The service's clock is the true
time: the steps forward move it, the steps back and the jumps are the camera clock's
errors. Examples start five hours apart, so each counts in hours of its own.

Properties, for every example:
(1) no usage is lost: for every period the camera counted (in setup and in the example)
    the service stores at least its counts, or the camera holds them (spooled, open)
    or has set them aside as a conflict of its licence. A crash may lose what was
    counted since the last checkpoint (devices.engine), never more than a quota block;
(2) a quota is never re-opened: after the honest sync the quota used is at least what
    the camera counted, and counting up to the cap past that is refused (an exhausted
    camera stays exhausted);
(3) every error is a ``devices.LicenseError`` whose code is in ``devices.Code.all()``;
(4) a revoked licence never starts or counts, and the service never stores a record
    of a future hour.

Replacing the whole directory by an older copy is a documented bound (docs/devices.md),
tested in tests/devices/test_device_evidence.py, so the mutations touch one file. The
examples are derandomized (the same in every run) and bounded for CI; set
``SVC_FUZZ_EXAMPLES`` to run more locally. The state directories live in /dev/shm when
there is one: the engine fsyncs every write, and the examples are about latency.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import tempfile
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import devices
from billing.models import UsageRecord
from config import clock as server_clock
from devices.engine import CLOCK_LEEWAY_SECONDS, PERIOD_SECONDS, QUOTA_BLOCK
from devices.token import public_key_b64url
from signing.services import signing_key_install
from svccore.authority import sign_certificate
from tests.conftest import start_gunicorn, stop_gunicorn
from tests.fuzz_support import (
    ANSWER_KINDS,
    COUNTERS,
    FILE_KINDS,
    FILES,
    REQUEST_KINDS,
    STATE_FIELDS,
    ByteProxy,
    Clock,
    answer_mutation,
    mutate_file,
    request_rewrite,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOUR = PERIOD_SECONDS
DAY = 86400
LEEWAY = CLOCK_LEEWAY_SECONDS  # the engine's default
# 200 examples (and the explicit ones): about 30 s on SQLite, 40 s on PostgreSQL on 2 cores.
EXAMPLES = int(os.environ.get("SVC_FUZZ_EXAMPLES", "200"))
# Examples start five hours apart (an example's true time moves at most four), so each
# counts in hours no other example touched; they wrap within the licences' 30-day term.
SPACING = 5 * HOUR
SLOTS = 130
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None

Key = tuple[int, int]
Counts = tuple[int, int, int, int]


# -- the service: rooted, with a clock the test moves ------------------------------------


@dataclass
class Service:
    url: str
    admin_key: str
    clock_file: Path
    root: str  # base64url public key of the root

    def at(self, moment: float) -> None:
        """Stop the service's clock at ``moment`` (Unix seconds)."""
        server_clock.stop_at(self.clock_file, dt.datetime.fromtimestamp(moment, tz=dt.UTC))

    def call(self, method: str, path: str, body: dict, headers: dict) -> tuple[int, dict]:
        """``(status, answer)`` of one call made directly (not through the proxy)."""
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    def admin(self, path: str, body: dict) -> dict:
        status, answer = self.call("POST", path, body, {"X-Admin-Key": self.admin_key})
        assert status in (200, 201), answer
        return answer


@pytest.fixture(scope="module")
def service(django_db_setup, django_db_blocker, signing_key, tmp_path_factory):
    """gunicorn with ``SVC_ROOT_KEYS`` set to a temporary root that certified the
    session's signing key (installed first: a rooted server refuses to sign without it),
    and ``SVC_TEST_CLOCK_FILE``."""
    directory = tmp_path_factory.mktemp("rooted")
    root = Ed25519PrivateKey.generate()
    certificate = sign_certificate(
        root, signing_key.public_key(), issued_at=0, not_before=0, not_after=0
    )
    root_public = public_key_b64url(root.public_key())
    with django_db_blocker.unblock():
        signing_key_install(certificate=certificate, roots=[root_public])
    clock_file = directory / "clock"
    server_clock.shift_to(clock_file, 0)
    live = start_gunicorn(directory, SVC_ROOT_KEYS=root_public, SVC_TEST_CLOCK_FILE=str(clock_file))
    try:
        yield Service(live.url, live.admin_key, clock_file, root_public)
    finally:
        stop_gunicorn(live)


# -- the cameras ------------------------------------------------------------------------


@dataclass
class Camera:
    """A camera's directory at the snapshot, its copy an hour earlier, and what it
    counted per period."""

    name: str
    directory: Path
    older: Path
    license_id: str
    token: str
    cap: int  # its licence's api_calls
    counted: dict[Key, Counts]
    total: int  # inferences counted
    other: Path = Path()  # another camera's directory: "another device's copy"


@dataclass
class World:
    service: Service
    clock: Clock
    proxy: ByteProxy  # every sync goes through it, so its answers can be replayed
    cameras: dict[str, Camera] = field(default_factory=dict)
    at: float = 0.0  # the snapshot's moment


def _engine(world: World, directory: Path, name: str) -> devices.Engine:
    return devices.Engine(
        directory, root_keys=[world.service.root], device_id=name, clock=world.clock
    )


def _count(engine: devices.Engine, counted: dict, inferences: int, frames: int = 0) -> None:
    """Count, and note in ``counted`` the period the engine put it in."""
    engine.count(inferences=inferences, frames=frames, events=1)
    usage = engine.usage
    key = (usage["period_start"], usage["period_end"])
    before = counted.get(key, (0, 0, 0, 0))
    counted[key] = (before[0] + inferences, before[1] + frames, before[2], before[3] + 1)


def _register_ahead(service: Service, token: str, device: str, keys: list[Key]) -> tuple[int, dict]:
    """What the camera's owner does with the camera's own token: zero records for the
    periods ``keys``, before the camera sends them."""
    records = [{"period_start": s, "period_end": e, **dict.fromkeys(COUNTERS, 0)} for s, e in keys]
    body = {"device_id": device, "records": records, "nonce": secrets.token_urlsafe(16)}
    return service.call("POST", "/v1/usage", body, {"Authorization": f"Bearer {token}"})


def _run_camera(world: World, name: str, batch: str, hours: list[int], tmp: Path) -> Camera:
    """Activate and count in three hours; before the sync in the third, the owner
    registers zeros for the second (set aside at the sync as a conflict) and for future
    hours (refused); count more, keep an older copy; count in a fourth hour (the third
    is spooled, not sent) and stop as a crash would."""
    service, clock = world.service, world.clock
    activated = clock.now
    directory = tmp / name
    devices.activate(service.url, batch, directory, device_id=name, allow_http=True)
    token = (directory / "license.token").read_text().split()[0]
    first = (int(activated) + 10) // HOUR * HOUR
    counted: dict[Key, Counts] = {}
    engine = _engine(world, directory, name)
    clock.now = activated + 10
    engine.start()
    for hour, inferences in enumerate(hours):
        clock.now = max(first + hour * HOUR + 10, clock.now)
        _count(engine, counted, inferences, frames=hour + 1)
    service.at(clock.now)
    future = [(first + h * HOUR, first + (h + 1) * HOUR) for h in (3, 4)]
    status, answer = _register_ahead(
        service, token, name, [(first + HOUR, first + 2 * HOUR), *future]
    )
    assert status == 200 and answer["accepted"] == 1, answer  # the future hours are refused
    assert {(r["period_start"], r["period_end"]) for r in answer["refused"]} == set(future)
    summary = engine.sync(world.proxy.url, allow_http=True)
    assert summary["conflicts"] == 1, summary  # the second hour: set aside
    _count(engine, counted, 40)
    engine.close()
    older = tmp / f"{name}-older"
    shutil.copytree(directory, older)
    engine = _engine(world, directory, name)
    engine.start()
    clock.now = first + 3 * HOUR + 10
    _count(engine, counted, 11, frames=3)  # the third hour closes: spooled, not sent
    if name == "exhausted":
        with pytest.raises(devices.QuotaExceeded):
            engine.count(inferences=100)
    clock.now += 5
    engine.count()  # a checkpoint: the counts above are on disk
    engine._dir_lock.release()  # the process dies: no clean close
    claims = devices.token.decode_unverified(token)
    total = sum(counts[0] for counts in counted.values())
    return Camera(
        name, directory, older, claims["lic"], token, claims["lim"]["api_calls"], counted, total
    )


@pytest.fixture
def world(service, customer) -> World:
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-world-", dir=SCRATCH))
    now = float(int(dt.datetime.now(tz=dt.UTC).timestamp()))
    service.at(now)
    world = World(service=service, clock=Clock(now), proxy=ByteProxy(service.url))
    batch = service.admin(
        "/v1/admin/batches", {"customer_id": customer.id, "sku": "API-METERED", "units": 3}
    )["batch_token"]
    # The cameras count in the same hours: the revoked camera's set-aside file holds the
    # live camera's second hour, for another licence, with more inferences.
    plans = {"live": [300, 200, 7], "revoked": [300, 250, 7], "exhausted": [999_700, 200, 7]}
    for name, hours in plans.items():
        world.clock.now = now
        service.at(now)
        world.cameras[name] = _run_camera(world, name, batch, hours, scratch)
    live, revoked, exhausted = (world.cameras[n] for n in plans)
    live.other, revoked.other, exhausted.other = revoked.directory, live.directory, live.directory
    assert exhausted.total > exhausted.cap - 100
    # The revoked camera learns it at a sync.
    service.admin("/v1/admin/revoke", {"license_id": revoked.license_id, "reason": "fuzz"})
    engine = _engine(world, revoked.directory, "revoked")
    with pytest.raises(devices.Revoked):
        engine.sync(world.proxy.url, allow_http=True)
    engine._dir_lock.release()
    world.at = world.clock.now
    try:
        yield world
    finally:
        world.proxy.close()
        shutil.rmtree(scratch, ignore_errors=True)


# -- what is stored, held, counted ------------------------------------------------------


def _stored(license_id: str) -> dict[Key, Counts]:
    rows = UsageRecord.objects.filter(license_id=license_id).values_list(
        "period_start", "period_end", *COUNTERS
    )
    return {(s, e): tuple(counts) for s, e, *counts in rows}


def _held(engine: devices.Engine, license_id: str) -> dict[Key, list[Counts]]:
    """Every record the engine holds for ``license_id`` and has not seen delivered with
    its counts: spooled, set aside as a conflict of that licence, open."""
    records = [*engine.pending_records]
    records += [e["record"] for e in engine._spool.conflicts if e["lic"] == license_id]
    if engine.usage is not None:
        records.append(engine.usage)
    held: dict[Key, list[Counts]] = defaultdict(list)
    for r in records:
        held[r["period_start"], r["period_end"]].append(tuple(r[n] for n in COUNTERS))
    return held


def _at_least(counts: Counts | None, wanted: Counts) -> bool:
    return counts is not None and all(map(int.__ge__, counts, wanted))


def _coded(call):
    """Run ``call``; a LicenseError with a code of ``devices.Code`` is an answer
    (returned), anything else fails the example (3)."""
    try:
        return call(), None
    except devices.LicenseError as exc:
        assert exc.code in devices.Code.all(), f"{type(exc).__name__} code {exc.code!r}: {exc}"
        return None, exc


# -- the example's steps ------------------------------------------------------------------

MOVES = {
    "stay": (0, 0),
    "tick": (1, 59),
    "forward": (60, HOUR - 1),
    "hour": (HOUR, HOUR),
    "back": (-LEEWAY, -1),  # within the leeway
    "jump forward": (HOUR + 1, 40 * DAY),
    "jump back": (-2 * DAY, -LEEWAY - 1),
    "restart": (0, 0),
    "crash": (0, 0),
    "edit": (0, 0),  # the camera stops, its owner does the example's file edit again
}
TRUE_MOVES = {"tick", "forward", "hour", "close"}  # the others are the camera clock's errors
# An hour passing is drawn most: it closes the period counted, which the syncs then send.
STEP = st.tuples(
    st.sampled_from(["hour", *MOVES]),
    st.floats(0, 1),
    st.sampled_from([0, 1, 7, 40, 300]),
)


@dataclass
class Run:
    """One example's camera: its engine, what it counted, and the true time (the
    service's), from which the camera's clock errs by the steps back and the jumps."""

    world: World
    camera: Camera
    directory: Path
    engine: devices.Engine
    counted: dict[Key, Counts]
    true: float
    edit: Callable[[int], None]  # the example's file edit, with another seed
    counts_taken: int = 0  # calls to count() that counted

    def reopen(
        self, *, crash: bool = False, edit: int | None = None
    ) -> tuple[str | None, devices.LicenseError | None]:
        """Restart the camera (``crash``: its process dies instead of closing; ``edit``:
        the example's file edit is done while it is stopped); the outcome of ``start``.
        A crash may lose what the open period counted since its last checkpoint
        (devices.engine), never more than a quota block: the reservation writes the
        period with every block."""
        opened = self.engine.usage
        if crash:
            self.engine._dir_lock.release()
        else:
            _coded(self.engine.close)
        if edit is not None:
            self.edit(edit)
        self.engine, error = _coded(lambda: _engine(self.world, self.directory, self.camera.name))
        assert error is None, f"Engine() refused to reopen: {error}"
        started = _coded(self.engine.start)
        if crash and opened is not None:
            key = (opened["period_start"], opened["period_end"])
            held = _held(self.engine, self.camera.license_id).get(key, [(0, 0, 0, 0)])
            kept = [max(counts[i] for counts in held) for i in range(len(COUNTERS))]
            lost = [max(opened[n] - kept[i], 0) for i, n in enumerate(COUNTERS)]
            assert lost[0] <= QUOTA_BLOCK, f"a crash lost {lost} of {opened}"
            counted = self.counted.get(key, (0, 0, 0, 0))
            self.counted[key] = tuple(max(c - x, 0) for c, x in zip(counted, lost, strict=True))
        return started

    def step(self, move: str, amount: float, inferences: int) -> None:
        if move in ("restart", "crash"):
            self.reopen(crash=move == "crash")
        elif move == "edit":
            self.reopen(edit=round(amount * 1000))
        elif move == "close":  # the hour ends
            self.move((int(self.true) // HOUR + 1) * HOUR + 10 - int(self.true), true=True)
        else:
            low, high = MOVES[move]
            self.move(round(low + (high - low) * amount), true=move in TRUE_MOVES)
        if inferences:
            _, refused = _coded(lambda: _count(self.engine, self.counted, inferences))
            self.counts_taken += refused is None

    def move(self, seconds: int, *, true: bool) -> None:
        self.world.clock.now += seconds
        if true:
            self.true += seconds


# -- the property ------------------------------------------------------------------------


def test_no_file_answer_request_or_clock_loses_usage_or_reopens_a_quota(service, world):
    proxy = world.proxy
    runs = iter(range(10**9))

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        scenario=st.sampled_from(["live", "exhausted", "revoked"]),
        name=st.sampled_from(FILES),
        file_kind=st.sampled_from(FILE_KINDS),
        state_field=st.sampled_from(STATE_FIELDS),
        steps=st.lists(STEP, min_size=1, max_size=4),
        close=st.booleans(),
        ahead=st.booleans(),
        request_kind=st.sampled_from(REQUEST_KINDS),
        answer_kind=st.sampled_from(ANSWER_KINDS),
        seed=st.integers(0, 2**32),
    )
    # The attacks of issue 36 and the set-aside file, tried first in every run.
    @example(  # a proxy zeroes the upload of new hours
        "live", "none", "none", "hwm", [("stay", 0, 300), ("hour", 0, 7)], True, False, "zero",
        "none", 1,
    )  # fmt: skip
    @example(  # the owner registers zeros for the hours first
        "live", "none", "none", "hwm", [("stay", 0, 300)], True, True, "none", "none", 2
    )  # fmt: skip
    @example(  # an exhausted camera, its state file deleted, its upload zeroed
        "exhausted", "state.json", "delete", "hwm", [("stay", 0, 40)], True, False, "zero",
        "none", 3,
    )  # fmt: skip
    @example(  # another camera's set-aside file, holding the same hour for its licence
        "live", "spool.rejected.json", "other device", "hwm", [("stay", 0, 0)], False, False,
        "none", "none", 4,
    )  # fmt: skip
    @example(  # the camera stops; its owner adds its open hour, zeroed, to its spool
        "live", "spool.json", "field", "hwm", [("stay", 0, 300), ("edit", 0.001, 0),
        ("stay", 0, 200)], True, False, "none", "none", 0,
    )  # fmt: skip
    @example(  # keys.json deleted, the clock back within the leeway, a restart, a replay
        "live", "keys.json", "delete", "hwm", [("back", 1, 7), ("restart", 0, 40)], True,
        False, "replay", "replay", 5,
    )  # fmt: skip
    @example(  # the clock jumps ahead, counts, crashes; the upload inflated
        "live", "state.json", "field", "open", [("jump forward", 0.5, 300), ("crash", 0, 7)],
        True, False, "inflate", "none", 6,
    )  # fmt: skip
    def one_camera(
        scenario, name, file_kind, state_field, steps, close, ahead, request_kind, answer_kind,
        seed,
    ):  # fmt: skip
        context = (
            f"{scenario}: {file_kind} {name} ({state_field}), steps {steps}, close {close}, "
            f"ahead {ahead}, request {request_kind}, answer {answer_kind}, seed {seed}"
        )
        run_number = next(runs)
        camera = world.cameras[scenario]
        directory = Path(tempfile.mkdtemp(prefix=f"run-{run_number}-", dir=SCRATCH)) / "state"
        shutil.copytree(camera.directory, directory)

        def edit(salt: int) -> None:
            mutate_file(
                directory, name, file_kind, seed + salt,
                older=camera.older, other=camera.other, state_field=state_field,
            )  # fmt: skip

        edit(0)
        clock, service = world.clock, world.service
        base = world.at + (run_number % SLOTS) * SPACING
        clock.now = base
        service.at(base)
        engine, error = _coded(lambda: _engine(world, directory, camera.name))
        assert error is None, f"{context}: Engine() refused: {error!r}"
        run = Run(world, camera, directory, engine, dict(camera.counted), base, edit)
        try:
            started, _ = _coded(run.engine.start)
            for step in steps:
                run.step(*step)
            if close:
                run.step("close", 0, 0)
            if scenario == "revoked":  # (4)
                assert started is None and not run.counts_taken, context
            service.at(run.true)
            if ahead:
                _register_ahead_refused(service, camera, run.counted, run.true)
            proxy.rewrite = request_rewrite(request_kind, seed)
            proxy.mutate = answer_mutation(answer_kind, seed)
            _coded(lambda: run.engine.sync(proxy.url, timeout=5, allow_http=True))
            proxy.rewrite = proxy.mutate = None
            # The clock is set right (NTP), the camera syncs honestly and restarts.
            clock.now = run.true
            _, error = _coded(lambda: run.engine.sync(service.url, timeout=10, allow_http=True))
            started, start_error = run.reopen()
            _check(run, context, error, started, start_error, name, file_kind)
        finally:
            _coded(run.engine.close)
            shutil.rmtree(directory.parent, ignore_errors=True)

    one_camera()


def _check(run: Run, context: str, error, started, start_error, name: str, kind: str) -> None:
    """The properties after the honest sync and restart."""
    camera = run.camera
    if not (name == "license.token" and kind != "none"):  # the licence is on the camera
        if camera.name == "revoked":  # (4)
            assert isinstance(error, devices.Revoked), f"{context}: honest sync {error!r}"
            assert isinstance(start_error, devices.Revoked), f"{context}: start {start_error!r}"
        else:
            assert error is None, f"{context}: honest sync {error!r}"
            assert started == "active", f"{context}: start {start_error!r}"
    assert camera.name != "revoked" or started is None, context
    # (1) every period counted is stored, or held or set aside with at least its counts
    stored, held = _stored(camera.license_id), _held(run.engine, camera.license_id)
    for key, counts in run.counted.items():
        assert _at_least(stored.get(key, (0, 0, 0, 0)), counts) or any(
            _at_least(h, counts) for h in held.get(key, [])
        ), f"{context}: {key} counted {counts}, stored {stored.get(key)}, held {held.get(key)}"
    # (2) the quota is not re-opened: counting up to the cap past what was counted fails
    if started is not None:
        total = sum(counts[0] for counts in run.counted.values())
        used = run.engine.quota_used
        assert used >= total, f"{context}: quota used {used} < counted {total}"
        _, refused = _coded(lambda: run.engine.count(inferences=camera.cap - total + 1))
        assert refused is not None, f"{context}: quota re-opened (used {used}, counted {total})"


def _register_ahead_refused(
    service: Service, camera: Camera, counted: dict[Key, Counts], now: float
) -> None:
    """The owner sends zero records with the camera's token for the hours it counted, the
    hour it is counting in (taken when it ends within the service's five minutes of
    leeway) and the coming ones, before the camera syncs: the coming ones are refused
    and not stored (4); a revoked licence's are all refused."""
    hour = int(now) // HOUR * HOUR
    future = [(hour + HOUR, hour + 2 * HOUR), (hour + 2 * HOUR, hour + 3 * HOUR)]
    keys = sorted({*counted, (hour, hour + HOUR), *future})
    before = _stored(camera.license_id)
    status, answer = _register_ahead(service, camera.token, camera.name, keys)
    if camera.name == "revoked":
        assert status == 403, answer
        return
    assert status == 200, answer
    assert set(future) <= {(r["period_start"], r["period_end"]) for r in answer["refused"]}, answer
    after = _stored(camera.license_id)
    assert all(after.get(key) == before.get(key) for key in future), (before, after)
