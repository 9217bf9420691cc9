"""Every failure of the device API is a coded ``LicenseError`` (issue 36, item 6), and
rate caps on the device clock cannot be gamed (item 3).

Each argument the issue found raising a raw exception has a test naming its code; a
sweep then calls every public function and Engine method with hostile values (wrong
types, NaN, infinities, huge integers, bools, NUL characters, negative numbers): each
either works or raises a ``LicenseError`` whose code ``devices.Code`` names, and counts,
writes and sends nothing when it raises.
"""

from __future__ import annotations

import decimal
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import devices
from devices import Code, Engine, InvalidArgument, LicenseError
from devices.bounds import MAX_TIMEOUT_SECONDS, shown
from tests.devices.device_support import DEVICE, NOW, claims_for, provision

HUGE = 10**5000  # past Python's 4,300-digit limit on writing an int out
HOSTILE: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    math.nan,
    math.inf,
    -math.inf,
    HUGE,
    -HUGE,
    10**400,
    1e300,
    decimal.Decimal("NaN"),
    decimal.Decimal("1e400"),
    "",
    "\x00bad",
    "\udcff",
    "x" * 100_000,
    b"\xf7",
    [],
    {},
    object(),
]


def label(value: Any) -> str:
    return shown(value)


def coded(call: Callable[[], Any]) -> LicenseError | None:
    """Run ``call``: None when it returns, the LicenseError when it raises one; any
    other exception fails the test with the call's name."""
    try:
        call()
    except LicenseError as exc:
        assert exc.code in Code.all(), exc.code
        return exc
    return None


@pytest.fixture
def running(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token())
    return engine


@pytest.fixture
def activation(service, make_token):
    """The stand-in service answering activation with a unit token for DEVICE."""
    service.reply("POST", "/v1/activate", 200, {"unit_token": make_token()})
    return service


def fresh_dir(tmp_path: Path, signing_key: Any) -> Path:
    path = tmp_path / f"engine-{len(list(tmp_path.iterdir()))}"
    provision(path, signing_key)
    return path


# -- the raw exceptions of the issue, each with its code ------------------------------


@pytest.mark.parametrize("value", [HUGE, -HUGE], ids=["plus", "minus"])
@pytest.mark.parametrize("counter", ["inferences", "frames", "stream_seconds", "events"])
def test_a_count_of_five_thousand_digits_is_coded_and_nothing_counted(running, counter, value):
    with pytest.raises(LicenseError) as caught:
        running.count(**{counter: value})
    expected = Code.USAGE_OUT_OF_RANGE if value > 0 else Code.BAD_ARGUMENT
    assert caught.value.code == expected
    assert "5001 digits" in str(caught.value)
    assert running.usage[counter] == 0 and running.quota_used == 0


def test_a_metered_count_of_five_thousand_digits_is_coded(make_engine, make_token):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 1, "max_fps": 10, "api_calls": 100}))
    with pytest.raises(LicenseError) as caught:
        engine.count(inferences=HUGE)
    assert caught.value.code == Code.USAGE_OUT_OF_RANGE
    assert engine.quota_used == 0


@pytest.mark.parametrize(
    "reading",
    [HUGE, -HUGE, decimal.Decimal("NaN"), decimal.Decimal(NOW), True, "now", None],
    ids=label,
)
def test_a_clock_reading_that_is_not_a_unix_time_is_clock_invalid_close_included(
    running, clock, make_engine, make_token, reading
):
    good = clock.now
    clock.now = reading  # the FakeClock hands back whatever it holds
    for call in (
        lambda: running.count(inferences=1),
        lambda: running.require("detect"),
        lambda: running.sync("http://127.0.0.1:9", timeout=1, allow_http=True),
    ):
        with pytest.raises(LicenseError) as caught:
            call()
        assert caught.value.code == Code.CLOCK_INVALID
    with running.open_stream() as stream, pytest.raises(LicenseError) as caught:
        running.admit_frame(stream)
    assert caught.value.code == Code.CLOCK_INVALID
    running.close()  # persists the counters without moving the mark
    clock.now = good
    engine = make_engine()
    assert engine.start(make_token()) == "active"
    assert engine.quota_used == 0


def test_a_clock_that_raises_is_clock_invalid(make_engine, make_token):
    def broken() -> float:
        raise RuntimeError("RTC unreadable")

    with pytest.raises(LicenseError) as caught:
        make_engine(clock=broken).start(make_token())
    assert caught.value.code == Code.CLOCK_INVALID
    assert "RTC unreadable" in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"state_dir": "\x00bad"}, "NUL"),
        ({"state_dir": "bad\udcff\ud800"}, "file name"),
        ({"state_dir": ""}, "non-empty"),
        ({"clock_leeway": 10**400}, "401 digits"),
        ({"clock_leeway": HUGE}, "5001 digits"),
        ({"clock_leeway": -1}, "clock_leeway"),
        ({"clock_leeway": math.inf}, "clock_leeway"),
        ({"air_gapped": "no"}, "air_gapped"),
        ({"device_id": "c" * 129}, "1-128 characters"),
        ({"device_id": ""}, "1-128 characters"),
    ],
    ids=lambda v: label(v)[:30],
)
def test_engine_arguments_are_bad_argument_before_anything_is_written(
    tmp_path, monkeypatch, public_key, kwargs, expected
):
    monkeypatch.chdir(tmp_path)
    arguments = {"state_dir": tmp_path / "state", "public_key": public_key, "device_id": DEVICE}
    with pytest.raises(InvalidArgument) as caught:
        Engine(**{**arguments, **kwargs})
    assert caught.value.code == Code.BAD_ARGUMENT
    assert expected in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # no directory, no lock file


@pytest.mark.parametrize("timeout", [1e12, 1e300, 10**400, MAX_TIMEOUT_SECONDS + 1, 0, -1])
def test_a_sync_timeout_past_a_day_is_bad_argument_and_nothing_is_sent(running, service, timeout):
    running.count(inferences=1)
    with pytest.raises(InvalidArgument) as caught:
        running.sync(service.url, timeout=timeout, allow_http=True)
    assert caught.value.code == Code.BAD_ARGUMENT
    assert "one day" in str(caught.value)
    assert service.requests == []


def test_a_timeout_of_exactly_a_day_is_accepted(running, service):
    assert running.sync(service.url, timeout=MAX_TIMEOUT_SECONDS, allow_http=True)["errors"] == []


@pytest.mark.parametrize(
    "value", [None, "junk", b"\xf7", 5, "-----BEGIN PUBLIC KEY-----\nAAAA\n"], ids=label
)
def test_key_fingerprint_of_something_that_is_not_a_key_is_coded(value):
    with pytest.raises(InvalidArgument) as caught:
        devices.key_fingerprint(value)
    assert caught.value.code == Code.BAD_PUBLIC_KEY
    assert isinstance(caught.value, ValueError)  # as before, for callers that caught that


def test_key_fingerprint_of_a_key_is_unchanged(public_key, signing_key):
    assert devices.key_fingerprint(public_key) == devices.key_fingerprint(signing_key.public_key())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"environ": 5},
        {"environ": ["SVC_DEVICE_ID"]},
        {"environ": {"SVC_DEVICE_ID": 5}},
        {"root": 5},
        {"root": None},
        {"root": "\x00"},
        {"root": b"/"},
    ],
    ids=label,
)
def test_fingerprint_arguments_are_bad_argument(tmp_path, kwargs):
    with pytest.raises(InvalidArgument) as caught:
        devices.fingerprint(**{"environ": {}, "root": tmp_path, **kwargs})
    assert caught.value.code == Code.BAD_ARGUMENT


@pytest.mark.parametrize(
    "call",
    [
        lambda: devices.license_state({}, 0),
        lambda: devices.license_state(None, 0),
        lambda: devices.license_state({"nbf": True, "exp": 0, "grace_days": 0}, 0),
        lambda: devices.license_state({"nbf": 0, "exp": -1, "grace_days": 0}, 0),
        lambda: devices.license_state({"nbf": 0, "exp": 0, "grace_days": "14"}, 0),
        lambda: devices.license_state(claims_for(), math.nan),
        lambda: devices.license_state(claims_for(), None),
        lambda: devices.license_state(claims_for(), NOW, revoked="no"),
        lambda: devices.license_state(claims_for(), NOW, nbf_leeway=-1),
        lambda: devices.license_state(claims_for(), NOW, nbf_leeway=None),
    ],
)
def test_license_state_arguments_are_bad_argument(call):
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert caught.value.code == Code.BAD_ARGUMENT


def test_license_state_of_good_arguments_is_unchanged():
    assert devices.license_state(claims_for(), NOW) == devices.ACTIVE
    assert devices.license_state(claims_for(), NOW, revoked=True) == devices.REVOKED
    assert devices.license_state(claims_for(), 0) == devices.NOT_YET_VALID
    assert devices.license_state(claims_for(exp=0), 10**30) == devices.ACTIVE  # perpetual


def test_a_huge_number_is_shown_by_its_digits():
    assert shown(HUGE) == "a number of 5001 digits"
    assert shown(-(10**400) + 1) == "a negative number of 400 digits"
    assert shown(2**64 - 1) == "18446744073709551615"
    assert shown("x" * 100_000).endswith("...") and len(shown("x" * 100_000)) == 60


# -- activation: every argument checked before a seat is taken ------------------------


def test_the_codes_of_an_activation_refusal_are_named(activation, tmp_path):
    for status, code in [
        (400, Code.BAD_REQUEST),
        (429, Code.RATE_LIMITED),
        (409, Code.ACTIVATION_FAILED),
        (500, Code.ACTIVATION_FAILED),
    ]:
        activation.reply("POST", "/v1/activate", status, {"detail": "no"})
        with pytest.raises(LicenseError) as caught:
            devices.activate(
                activation.url, "B", tmp_path / "state", device_id=DEVICE, allow_http=True
            )
        assert caught.value.code == code
        assert code in Code.all()


def _blocked(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    return blocker / "state"


BAD_ACTIVATIONS: dict[str, tuple[Callable[[Path], dict[str, Any]], str]] = {
    "state_dir with NUL": (lambda tmp: {"state_dir": str(tmp / "state\x00")}, Code.BAD_ARGUMENT),
    "state_dir unencodable": (lambda tmp: {"state_dir": str(tmp / "\ud800")}, Code.BAD_ARGUMENT),
    "state_dir empty": (lambda tmp: {"state_dir": ""}, Code.BAD_ARGUMENT),
    "state_dir bytes": (lambda tmp: {"state_dir": bytes(tmp)}, Code.BAD_ARGUMENT),
    "state_dir under a file": (lambda tmp: {"state_dir": _blocked(tmp)}, Code.STATE_UNREADABLE),
    "timeout 1e300": (lambda tmp: {"timeout": 1e300}, Code.BAD_ARGUMENT),
    "timeout 1e12": (lambda tmp: {"timeout": 1e12}, Code.BAD_ARGUMENT),
    "timeout 10**400": (lambda tmp: {"timeout": 10**400}, Code.BAD_ARGUMENT),
    "timeout NaN": (lambda tmp: {"timeout": math.nan}, Code.BAD_ARGUMENT),
    "allow_http text": (lambda tmp: {"allow_http": "yes"}, Code.BAD_ARGUMENT),
    "device_id too long": (lambda tmp: {"device_id": "c" * 129}, Code.BAD_ARGUMENT),
    "device_id empty": (lambda tmp: {"device_id": ""}, Code.BAD_ARGUMENT),
    "batch_token empty": (lambda tmp: {"batch_token": "  "}, Code.BAD_ARGUMENT),
    "batch_token huge": (lambda tmp: {"batch_token": "B" * 100_000}, Code.BAD_ARGUMENT),
    "batch_token bytes": (lambda tmp: {"batch_token": b"B"}, Code.BAD_ARGUMENT),
    "base_url not http": (lambda tmp: {"base_url": "ftp://h"}, Code.BAD_URL),
}


@pytest.mark.parametrize("name", sorted(BAD_ACTIVATIONS))
def test_activate_checks_every_argument_before_it_sends_anything(activation, tmp_path, name):
    build, code = BAD_ACTIVATIONS[name]
    arguments: dict[str, Any] = {
        "base_url": activation.url,
        "batch_token": "B",
        "state_dir": tmp_path / "state",
        "device_id": DEVICE,
        "timeout": 5,
        "allow_http": True,
        **build(tmp_path),
    }
    with pytest.raises(LicenseError) as caught:
        devices.activate(**arguments)
    assert caught.value.code == code
    assert activation.requests == []  # no request, so no seat taken


def test_activate_with_good_arguments_takes_the_seat(activation, tmp_path):
    token = devices.activate(
        activation.url, "B", tmp_path / "a" / "b", device_id=DEVICE, timeout=5, allow_http=True
    )
    assert (tmp_path / "a" / "b" / "license.token").read_text().strip() == token
    assert [p.name for p in (tmp_path / "a" / "b").iterdir() if p.name.startswith(".")] == []
    assert len(activation.requests) == 1


# -- the sweep: every public entry point, every hostile value -------------------------


def _engine_with(tmp_path: Path, signing_key: Any, key: str, **kwargs: Any) -> None:
    engine = Engine(
        fresh_dir(tmp_path, signing_key), **{"public_key": key, "device_id": DEVICE, **kwargs}
    )
    engine.close()


ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "key_fingerprint": lambda ctx, v: devices.key_fingerprint(v),
    "fingerprint(environ=)": lambda ctx, v: devices.fingerprint(environ=v, root=ctx["tmp"]),
    "fingerprint(root=)": lambda ctx, v: devices.fingerprint(environ={}, root=v),
    "fingerprint(SVC_DEVICE_ID)": lambda ctx, v: devices.fingerprint(
        environ={"SVC_DEVICE_ID": v}, root=ctx["tmp"]
    ),
    "license_state(claims)": lambda ctx, v: devices.license_state(v, NOW),
    "license_state(claim)": lambda ctx, v: devices.license_state(claims_for(exp=v), NOW),
    "license_state(now)": lambda ctx, v: devices.license_state(claims_for(), v),
    "license_state(revoked=)": lambda ctx, v: devices.license_state(claims_for(), NOW, revoked=v),
    "license_state(nbf_leeway=)": lambda ctx, v: devices.license_state(
        claims_for(), NOW, nbf_leeway=v
    ),
    "verify_token(token)": lambda ctx, v: devices.verify_token(v, ctx["public_key"]),
    "verify_token(key)": lambda ctx, v: devices.verify_token(ctx["token"], v),
    "Engine(state_dir)": lambda ctx, v: Engine(v, public_key=ctx["public_key"]).close(),
    "Engine(public_key=)": lambda ctx, v: ctx["engine_with"](public_key=v),
    "Engine(device_id=)": lambda ctx, v: ctx["engine_with"](device_id=v),
    "Engine(clock=)": lambda ctx, v: ctx["engine_with"](clock=v),
    "Engine(clock=) reading": lambda ctx, v: ctx["engine_with"](clock=lambda: v),
    "Engine(air_gapped=)": lambda ctx, v: ctx["engine_with"](air_gapped=v),
    "Engine(clock_leeway=)": lambda ctx, v: ctx["engine_with"](clock_leeway=v),
    "Engine(root_keys=)": lambda ctx, v: ctx["engine_with"](root_keys=v),
    "start": lambda ctx, v: ctx["engine"].start(v),
    "require": lambda ctx, v: ctx["engine"].require(v),
    "count(inferences=)": lambda ctx, v: ctx["engine"].count(inferences=v),
    "count(frames=)": lambda ctx, v: ctx["engine"].count(frames=v),
    "count(stream_seconds=)": lambda ctx, v: ctx["engine"].count(stream_seconds=v),
    "count(events=)": lambda ctx, v: ctx["engine"].count(events=v),
    "admit_frame": lambda ctx, v: ctx["engine"].admit_frame(v),
    "sync(base_url)": lambda ctx, v: ctx["engine"].sync(v, timeout=5, allow_http=True),
    "sync(timeout=)": lambda ctx, v: ctx["engine"].sync(ctx["url"], timeout=v, allow_http=True),
    "sync(allow_http=)": lambda ctx, v: ctx["engine"].sync(ctx["url"], timeout=5, allow_http=v),
    "activate(base_url)": lambda ctx, v: ctx["activate"](base_url=v),
    "activate(batch_token)": lambda ctx, v: ctx["activate"](batch_token=v),
    "activate(state_dir)": lambda ctx, v: ctx["activate"](state_dir=v),
    "activate(device_id=)": lambda ctx, v: ctx["activate"](device_id=v),
    "activate(timeout=)": lambda ctx, v: ctx["activate"](timeout=v),
    "activate(allow_http=)": lambda ctx, v: ctx["activate"](allow_http=v),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_answers_hostile_values_with_a_coded_error(
    entry, tmp_path, monkeypatch, signing_key, public_key, make_token, running, activation
):
    """Each call works or raises a LicenseError with a code of devices.Code; a running
    engine counts nothing when one of its calls raises."""
    monkeypatch.chdir(tmp_path)  # an Engine("x") or activate(state_dir="x") lands here
    (tmp_path / "root").mkdir()

    def activate(**changes: Any) -> str:
        arguments = {
            "base_url": activation.url,
            "batch_token": "B",
            "state_dir": tmp_path / "activated",
            "device_id": DEVICE,
            "timeout": 5,
            "allow_http": True,
            **changes,
        }
        return devices.activate(**arguments)

    ctx = {
        "tmp": tmp_path / "root",
        "public_key": public_key,
        "token": make_token(),
        "engine": running,
        "url": activation.url,
        "activate": activate,
        "engine_with": lambda **kw: _engine_with(tmp_path, signing_key, public_key, **kw),
    }
    call = ENTRY_POINTS[entry]
    raw = []
    for value in HOSTILE:
        before = (running.quota_used, dict(running.usage or {}))
        requests = len(activation.requests)
        try:
            error = coded(lambda: call(ctx, value))  # noqa: B023 - called at once
        except Exception as exc:  # collected and reported below
            raw.append(f"{shown(value)}: {type(exc).__name__}: {shown(str(exc))}")
            continue
        if error is not None:
            assert (running.quota_used, dict(running.usage or {})) == before, shown(value)
            if error.code in ARGUMENT_CODES:
                assert len(activation.requests) == requests, shown(value)
    assert raw == []


# What a call raises when its own arguments are wrong: nothing may have been sent.
ARGUMENT_CODES = {
    Code.BAD_ARGUMENT,
    Code.BAD_URL,
    Code.INSECURE_URL,
    Code.BAD_PUBLIC_KEY,
    Code.STATE_UNREADABLE,
    Code.STATE_UNWRITABLE,
}


# -- fps windows never move backwards (item 3) ---------------------------------------

FPS = 10


@pytest.fixture
def video(make_engine, make_token, clock):
    engine = make_engine()
    engine.start(make_token(lim={"max_streams": 2, "max_fps": FPS, "api_calls": 0}))
    return engine


def admitted(engine: Engine, stream: devices.Stream, clock: Any, readings: list[float]) -> int:
    """Frames admitted for one frame at each clock reading, and the real seconds that
    took: a window also reopens once a real second has passed (never in a test that
    runs at full speed), so the caps below allow for it."""
    started = time.monotonic()
    count = 0
    for reading in readings:
        clock.now = reading
        count += engine.admit_frame(stream)
    return count - FPS * int(time.monotonic() - started)


def test_a_clock_toggling_between_two_seconds_admits_two_windows_not_every_frame(video, clock):
    t = clock.now
    with video.open_stream() as stream:
        assert admitted(video, stream, clock, [t, t + 1] * 500) <= 2 * FPS
        assert stream.frames_admitted + stream.frames_dropped == 1000


def test_a_reading_back_within_the_leeway_counts_in_the_current_window(video, clock):
    t = clock.now
    with video.open_stream() as stream:
        assert admitted(video, stream, clock, [t + 5] * FPS) == FPS
        for back in (1, 5, 299):
            clock.now = t + 5 - back
            assert video.admit_frame(stream) is False
        clock.now = t + 6
        assert [video.admit_frame(stream) for _ in range(FPS + 1)] == [True] * FPS + [False]


def test_jumps_forward_and_back_open_one_window_per_later_second(video, clock):
    t = clock.now
    readings = [t, t + 1000, t, t + 1000.5, t + 3, t + 1001, t + 2, t + 1001.9]
    with video.open_stream() as stream:
        # Windows t, t+1000 and t+1001 open: every other reading counts in one of them.
        assert admitted(video, stream, clock, readings * 100) <= 3 * FPS


def test_any_clock_within_the_leeway_admits_no_more_than_its_seconds_allow(video, clock):
    t = clock.now
    rng = random.Random(36)
    readings = [t + rng.uniform(0, 20) for _ in range(5000)]
    with video.open_stream() as stream:
        # The windows: each second the clock reaches for the first time, at most 21.
        assert admitted(video, stream, clock, readings) <= 21 * FPS


def test_the_cap_is_per_stream_and_the_stream_cap_holds_under_any_clock(video, clock):
    t = clock.now
    with video.open_stream() as first, video.open_stream() as second:
        assert admitted(video, first, clock, [t, t + 1] * 50) <= 2 * FPS
        assert admitted(video, second, clock, [t, t + 1] * 50) <= 2 * FPS
        for reading in (t - 200, t + 1, t + 100_000):
            clock.now = reading
            with pytest.raises(devices.StreamLimit), video.open_stream():
                pass


def test_a_toggling_clock_does_not_write_the_state_on_every_call(video, clock):
    """A step back checkpoints (a crash then loses at most about a second of counts),
    but at most once per real second: a clock toggling between t and t+1 must not turn
    every frame and every count into a state write."""
    t = clock.now
    writes = video.state_writes
    started = time.monotonic()
    with video.open_stream() as stream:
        for index in range(1000):
            clock.now = t + index % 2
            video.admit_frame(stream)
            video.count(frames=1)
    real_seconds = int(time.monotonic() - started) + 1
    assert video.state_writes - writes <= 2 * real_seconds + 1
    assert video.usage["frames"] == 1000


def test_a_stream_made_by_hand_takes_no_frames(video):
    """Only streams open_stream() opened count against max_streams, so only they take
    frames."""
    with pytest.raises(InvalidArgument) as caught:
        video.admit_frame(devices.Stream(1))
    assert caught.value.code == Code.BAD_ARGUMENT
    with video.open_stream() as stream:
        assert video.admit_frame(stream) is True
    assert video.admit_frame(stream) is False  # closed


def test_a_clock_stepped_back_past_the_leeway_does_not_stall_the_video(video, clock):
    """Windows never move back, so after the clock steps back a stream takes its frames
    in the current window; once a real second has passed it opens again."""
    t = clock.now
    with video.open_stream() as stream:
        assert admitted(video, stream, clock, [t + 1000] * FPS) == FPS
        clock.now = t  # NTP corrects a clock that ran 1000 s ahead
        assert video.admit_frame(stream) is False
        time.sleep(1.05)
        assert [video.admit_frame(stream) for _ in range(FPS + 1)] == [True] * FPS + [False]
