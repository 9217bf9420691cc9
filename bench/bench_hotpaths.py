"""Hot-path benchmark: the device-facing requests against floors measured in the same run.

One gunicorn (BENCH_WORKERS sync workers, as the issue measured) serves the service and
the floors of ``bench/floor_urls.py`` with the same settings on PostgreSQL, Redis as the
shared cache when ``redis-server`` is installed, and the activation throttle off for
127.0.0.1 (``SVC_ACTIVATION_ALLOWLIST``). Load comes from ``wrk`` (Debian package
``wrk``; without it, a slower threaded Python client) with BENCH_CONNECTIONS
connections. Every target runs once per round, rounds interleaved, and the median of the
rounds is printed beside its floor:

- new activations on one batch vs the hand-written activation (``POST /bench/activate``:
  verify, conditional UPDATE, sign, one INSERT statement);
- re-activation (devices already on file) vs a bare DRF view (and, for scale, what one
  ``SELECT 1`` round trip costs that view);
- ``GET /healthz`` vs a bare Django view;
- ``GET /v1/revocations`` (a full page of 200 entries; a current device's 304) vs bare DRF;
- re-activation counted by the activation throttle (from an address off the allowlist,
  through a trusted proxy's ``X-Forwarded-For``), against the same without the throttle.

Then new activations spread over 16 batches with 1 and with BENCH_WORKERS workers, beside
the floor's own scaling (the machine's ceiling: wrk and PostgreSQL share its CPUs).

Targets (issue 11): new activation >= 0.8 of the hand-written floor, re-activation >=
0.6 of bare DRF, /healthz >= 0.8 of bare Django, the list >= 0.9 of bare DRF.

Run from the repository root: ``python bench/bench_hotpaths.py`` (or ``make bench``).
Settings: BENCH_PG (server URL without database), BENCH_WORKERS, BENCH_CONNECTIONS,
BENCH_SECONDS (per measurement), BENCH_ROUNDS.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "svc_bench_hotpaths"
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
WRK = shutil.which("wrk")
ON_FILE = 1000  # devices activated before the run, for re-activation
REVOKED = 200  # revoked licences on the list
BATCHES = 16  # for activations from many batches at once
PROXY_CLIENT = "203.0.113.9"  # an address off the allowlist, behind the trusted proxy


@dataclass
class Target:
    """One measured request: method, path, headers and how each body is made."""

    label: str
    method: str = "GET"
    path: str = "/"
    headers: dict[str, str] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)  # batch keys, used in turn
    devices: str = ""  # "new": a fresh device id per request; "on-file": one of ON_FILE
    expect: int = 200  # the status every answer must have

    def body(self, n: int, prefix: str) -> bytes | None:
        if self.method != "POST":
            return None
        token = self.tokens[n % len(self.tokens)]
        device = f"{prefix}-{n}" if self.devices == "new" else f"cam-{n % ON_FILE:05d}"
        return json.dumps({"batch_token": token, "device_id": device}).encode()


# --- load ------------------------------------------------------------------------------

LUA = """
local tokens = {%(tokens)s}
local headers = {%(headers)s}
local threads = {}
counter = 0
unexpected = 0
function setup(thread)
    table.insert(threads, thread)
    thread:set("tid", #threads)
end
function request()
    counter = counter + 1
    if %(post)s then
        local device
        if "%(devices)s" == "new" then
            device = "%(prefix)s-" .. tid .. "-" .. counter
        else
            device = string.format("cam-%%05d", counter %% %(on_file)d)
        end
        local body = '{"batch_token":"' .. tokens[counter %% #tokens + 1] ..
            '","device_id":"' .. device .. '"}'
        return wrk.format("POST", %(path)s, headers, body)
    end
    return wrk.format("GET", %(path)s, headers)
end
function response(status, headers, body)
    if status ~= %(expect)d then
        unexpected = unexpected + 1
    end
end
function done(summary, latency, requests)
    local total = 0
    for _, thread in ipairs(threads) do
        total = total + thread:get("unexpected")
    end
    io.write(string.format("unexpected statuses: %%d\\n", total))
end
"""


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string of ASCII text is a Lua string literal


def _lua(target: Target, prefix: str, directory: Path) -> Path:
    headers = dict(target.headers)
    if target.method == "POST":
        headers["Content-Type"] = "application/json"
    script = directory / f"{prefix}.lua"
    script.write_text(
        LUA
        % {
            "tokens": ", ".join(_lua_string(token) for token in target.tokens),
            "headers": ", ".join(
                f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()
            ),
            "post": "true" if target.method == "POST" else "false",
            "devices": target.devices,
            "prefix": prefix,
            "on_file": ON_FILE,
            "path": _lua_string(target.path),
            "expect": target.expect,
        }
    )
    return script


def wrk_rate(port: int, target: Target, prefix: str, directory: Path) -> float:
    script = _lua(target, prefix, directory)
    command = [
        WRK, "-t2", f"-c{CONNECTIONS}", f"-d{SECONDS:g}s", "-s", str(script),
        f"http://127.0.0.1:{port}",
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    unexpected = re.search(r"unexpected statuses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if unexpected is None or int(unexpected.group(1)) or errors:
        raise RuntimeError(f"{target.label}: failed requests\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def python_rate(port: int, target: Target, prefix: str, directory: Path) -> float:
    """The fallback without wrk: CONNECTIONS threads, each a keep-alive connection that
    reconnects when a sync worker closes it."""
    counts = [0] * CONNECTIONS
    failures: list[str] = []
    stop = time.monotonic() + SECONDS

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = index * 10_000_000
        while time.monotonic() < stop and not failures:
            n += 1
            headers = dict(target.headers)
            if target.method == "POST":
                headers["Content-Type"] = "application/json"
            conn.request(target.method, target.path, target.body(n, prefix), headers)
            response = conn.getresponse()
            response.read()
            if response.status != target.expect:
                failures.append(f"{target.label}: HTTP {response.status}")
            counts[index] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CONNECTIONS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(failures[0])
    return sum(counts) / (time.perf_counter() - started)


def rate(port: int, target: Target, prefix: str, directory: Path) -> float:
    measure = wrk_rate if WRK else python_rate
    return measure(port, target, prefix, directory)


# --- set-up ----------------------------------------------------------------------------


def load() -> dict[str, list[str]]:
    """A customer with a big batch (ON_FILE devices on file, REVOKED of its units
    revoked) and BATCHES more; the batch keys by use."""
    from customers.services import customer_create
    from licensing.services import batch_issue, license_revoke
    from licensing.services.activation import unit_activate

    customer = customer_create(name="Bench hot paths", kind="oem", id="HOT")
    big = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=10_000_000)
    token = big.license.token
    for n in range(ON_FILE):
        unit_activate(batch_token=token, device_id=f"cam-{n:05d}")
    for n in range(REVOKED):
        unit = unit_activate(batch_token=token, device_id=f"gone-{n:05d}")
        license_revoke(license_id=unit.license_id, reason="bench")
    many = [
        batch_issue(customer_id=customer.id, sku="DETECT-STD", units=1_000_000).license.token
        for _ in range(BATCHES)
    ]
    return {"one": [token], "many": many}


def environment(*, cache_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "CACHE_URL": cache_url,
        "SVC_DB_CONN_MAX_AGE": "600",
        "SVC_ACTIVATION_ALLOWLIST": "127.0.0.1/32",
        "SVC_ACTIVATION_RATE": "1000000000/10s",  # counted, never refused
        "SVC_TRUSTED_PROXIES": "127.0.0.1/32",
        "DJANGO_SETTINGS_MODULE": "bench.floor_settings",
    }


def serve(env: dict[str, str], workers: int, log: Path) -> tuple[subprocess.Popen, int]:
    port = _support.free_port()
    server = _support.start_gunicorn(
        env, port, log, workers=workers, threads=1, timeout=60, worker_class="sync"
    )
    return server, port


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(timeout=20)


def etag_of(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.getheader("ETag")


def rounds(
    port: int, pairs: list[tuple[Target, Target]], directory: Path, tag: str
) -> dict[str, float]:
    """Median rate of every target over ROUNDS interleaved rounds."""
    seen: dict[str, list[float]] = {}
    for round_number in range(ROUNDS):
        for service, floor in pairs:
            for target in (floor, service):
                if target.label in seen and len(seen[target.label]) > round_number:
                    continue  # a floor shared by two rows runs once per round
                prefix = f"{tag}{round_number}-{len(seen.get(target.label, []))}-" + re.sub(
                    r"\W", "", target.label
                )
                seen.setdefault(target.label, []).append(rate(port, target, prefix, directory))
        print(f"  round {round_number + 1}/{ROUNDS} done", flush=True)
    return {label: statistics.median(values) for label, values in seen.items()}


def machine() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (version,) = cursor.fetchone()
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"model name\s*:\s*(.*)", cpuinfo.read_text())
        model = found.group(1).strip() if found else ""
    return (
        f"{os.cpu_count()} CPUs ({model or platform.machine()}), Python "
        f"{platform.python_version()}, PostgreSQL {version}"
    )


def main() -> int:
    begun = time.monotonic()
    _support.recreate_database(PG, DB_NAME)
    redis, cache_url = _support.start_redis()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        _support.configure_django(directory, PG, DB_NAME)
        keys = load()
        facts = machine()
        from django.db import connection

        connection.close()
        env = environment(cache_url=cache_url)
        server, port = serve(env, WORKERS, directory / "gunicorn.log")
        try:
            gzip = {"Accept-Encoding": "gzip"}
            current = gzip | {"If-None-Match": etag_of(port, f"/v1/revocations?since={REVOKED}")}
            drf = Target("bare DRF view", path="/bench/floor")
            drf_post = Target(
                "bare DRF view, same POST", "POST", "/bench/floor", tokens=keys["one"],
                devices="on-file",
            )  # fmt: skip
            hand = Target(
                "hand-written activation", "POST", "/bench/activate", tokens=keys["one"],
                devices="new",
            )  # fmt: skip
            reactivate = Target(
                "re-activation", "POST", "/v1/activate", tokens=keys["one"], devices="on-file"
            )
            throttled = Target(
                "re-activation, throttle counting", "POST", "/v1/activate",
                headers={"X-Forwarded-For": PROXY_CLIENT}, tokens=keys["one"],
                devices="on-file",
            )  # fmt: skip
            pairs = [
                (
                    Target("new activation, one batch", "POST", "/v1/activate",
                           tokens=keys["one"], devices="new"),
                    hand,
                ),
                (reactivate, drf),
                (reactivate, drf_post),
                (Target("bare DRF view + SELECT 1", path="/bench/query"), drf),
                (Target("GET /healthz", path="/healthz"),
                 Target("bare Django view", path="/bench/django")),
                (
                    Target(f"revocations page ({REVOKED} entries)", path="/v1/revocations?since=0",
                           headers=gzip),
                    drf,
                ),
                (
                    Target("revocations 304 (current)", path=f"/v1/revocations?since={REVOKED}",
                           headers=current, expect=304),
                    drf,
                ),
                (throttled, reactivate),
            ]  # fmt: skip
            print(
                f"measuring {len(pairs)} targets, {ROUNDS} rounds of {SECONDS:g} s each ...",
                flush=True,
            )
            medians = rounds(port, pairs, directory, "a")
        finally:
            stop(server)

        scaling = {}
        many = Target("new activation, 16 batches", "POST", "/v1/activate", tokens=keys["many"],
                      devices="new")  # fmt: skip
        many_floor = Target("hand-written, 16 batches", "POST", "/bench/activate",
                            tokens=keys["many"], devices="new")  # fmt: skip
        for workers in sorted({1, WORKERS}):
            server, port = serve(env, workers, directory / f"gunicorn-{workers}.log")
            try:
                print(f"scaling: {workers} worker(s) ...", flush=True)
                scaling[workers] = rounds(port, [(many, many_floor)], directory, f"s{workers}")
            finally:
                stop(server)
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=10)
    _support.recreate_database(PG, DB_NAME, create=False)

    cache = "Redis (shared)" if redis is not None else "local memory per worker"
    tool = "wrk" if WRK else "a Python client (no wrk)"
    load_tool = f"{tool}, {CONNECTIONS} connections"
    print(
        f"\nhot paths: {facts}; gunicorn {WORKERS} sync workers, cache {cache}; {load_tool}; "
        f"median of {ROUNDS} interleaved {SECONDS:g} s rounds"
    )
    print(f"{'request':<36}{'req/s':>8}   {'floor':<26}{'req/s':>8}  {'ratio':>5}")
    for service, floor in pairs:
        value, base = medians[service.label], medians[floor.label]
        print(
            f"{service.label:<36}{value:>8,.0f}   {floor.label:<26}{base:>8,.0f}  "
            f"{value / base:>5.2f}"
        )
    cost = 1 / medians[throttled.label] - 1 / medians[reactivate.label]
    lookup = 1 / medians[reactivate.label] - 1 / medians[drf.label]
    print(
        f"throttle counting costs {cost * 1e6 * os.cpu_count():,.0f} us of machine time per "
        f"request; the re-activation's lookup and checks {lookup * 1e6 * os.cpu_count():,.0f} us"
    )
    if len(scaling) > 1:
        one, top = scaling[1], scaling[WORKERS]
        print(f"new activations over {BATCHES} batches, 1 -> {WORKERS} workers:")
        for target in (many, many_floor):
            first, last = one[target.label], top[target.label]
            print(f"  {target.label:<34}{first:>8,.0f} -> {last:>8,.0f} req/s  x{last / first:.2f}")
    print(f"{time.monotonic() - begun:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
