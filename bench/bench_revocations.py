"""Revocation-list benchmark: GET /v1/revocations through gunicorn on PostgreSQL, with
10 000 and with 1 000 000 revoked licences.

Creates its own database (``svc_bench_revocations``) and, when ``redis-server`` is on the
PATH, its own Redis as the shared cache (``CACHE_URL``, as in production; otherwise each
worker caches in local memory). The list is filled by ``INSERT ... SELECT FROM
generate_series`` (no licence rows behind it; 2 % of the entries are past expiry + grace,
so pruning is exercised). For each size it measures, from threaded keep-alive clients
(all sending ``Accept-Encoding: gzip``, as a device would):

1. a one-entry delta, ``?since=H-1``;
2. a device that is current, ``?since=H`` with a matching ``If-None-Match`` (304);
3. a full first page, ``?since=0``;

each beside a bare DRF view (``bench/floor_urls.py``) measured against the same gunicorn
in the same run (interleaved rounds, best of each, so both see the same machine load).
It also prints the answer sizes, the time to fill 1 000 000 rows, and a from-zero walk
of every page (cold: each page built on first request; then warm).

Then, what a camera pays: a new device (``devices.activate`` and its first
``Engine.sync``, which fetches the signed status of its own licence) against the list of
each size, through a TCP proxy that counts the bytes on the wire both ways, beside a
walk of the whole list as firmware that walks it would do (every page fetched gzipped,
and verified and parsed as the device module does).

Run from the repository root: ``python bench/bench_revocations.py`` (or ``make bench``).
Settings: BENCH_PG (server URL without database), BENCH_WORKERS, BENCH_THREADS,
BENCH_CLIENTS, BENCH_SECONDS (per measurement), BENCH_ROUNDS.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "svc_bench_revocations"
WORKERS = int(os.environ.get("BENCH_WORKERS", "4"))
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "1.5"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SIZES = (10_000, 1_000_000)
GZIP = {"Accept-Encoding": "gzip"}
UNIQUE_ID = "revocation_once_per_licence"
FAR_FUTURE = 4_102_444_800  # 2100-01-01: usable_until of entries that stay listed
ADMIN_KEY = secrets.token_urlsafe(24)


class CountingProxy:
    """A TCP forwarder on 127.0.0.1 that counts the bytes each way (what a device's
    radio carries: headers, bodies, gzip and all)."""

    def __init__(self, port: int) -> None:
        import socket

        self.upstream = port
        self.sent = self.received = 0
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, "sent"), daemon=True).start()
            threading.Thread(
                target=self._pipe, args=(server, client, "received"), daemon=True
            ).start()

    def _pipe(self, source, target, direction: str) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    setattr(self, direction, getattr(self, direction) + len(data))
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(2)
                except OSError:
                    pass

    def take(self) -> tuple[int, int]:
        with self._lock:
            counted, self.sent, self.received = (self.sent, self.received), 0, 0
        return counted

    def close(self) -> None:
        self.listener.close()


def admin(port: int, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={"Content-Type": "application/json", "X-Admin-Key": ADMIN_KEY},
    )
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    if response.status >= 300:
        raise RuntimeError(f"POST {path}: HTTP {response.status} {answer}")
    return answer


def device_first_sync(port: int, public_key, tmp: Path, entries: int) -> dict:
    """A new camera against the list: activation, its first and second sync (bytes sent
    and received on the wire, seconds), and whether it learned its own revocation."""
    import devices
    from devices.token import public_key_b64url

    customer = admin(port, "/v1/admin/customers", {"name": f"bench {entries}", "kind": "oem"})
    batch = admin(
        port,
        "/v1/admin/batches",
        {"customer_id": customer["customer_id"], "sku": "VISION-PRO", "units": 1},
    )
    proxy = CountingProxy(port)
    url = f"http://127.0.0.1:{proxy.port}"
    state = tmp / f"camera-{entries}"
    result: dict = {}
    try:
        started = time.perf_counter()
        devices.activate(
            url, batch["batch_token"], state, device_id=f"cam-{entries}", allow_http=True
        )
        result["activate"] = (*proxy.take(), time.perf_counter() - started)
        engine = devices.Engine(
            state, public_key=public_key_b64url(public_key), device_id=f"cam-{entries}"
        )
        engine.start()
        for name in ("first sync", "second sync"):
            started = time.perf_counter()
            engine.sync(url, allow_http=True)
            result[name] = (*proxy.take(), time.perf_counter() - started)
        admin(port, "/v1/admin/revoke", {"license_id": engine.license_id, "reason": "bench"})
        started = time.perf_counter()
        try:
            engine.sync(url, allow_http=True)
            result["revoked"] = False
        except devices.Revoked:
            result["revoked"] = True
        result["sync after its revocation"] = (*proxy.take(), time.perf_counter() - started)
        engine.close()
    finally:
        proxy.close()
    return result


def walk_as_firmware(port: int, public_key) -> tuple[int, int, float, int]:
    """Every page from since=0 through the counting proxy, each verified and parsed as
    the device module parses a page: (bytes sent, bytes received, seconds, pages)."""
    from devices.documents import parse_revocation_page

    proxy = CountingProxy(port)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=120)
    since, pages = 0, 0
    started = time.perf_counter()
    try:
        while True:
            body, _ = get(conn, f"/v1/revocations?since={since}", GZIP)
            answer = json.loads(gzip.decompress(body))
            page = parse_revocation_page(answer["revocations"], public_key)
            pages += 1
            if not page.more:
                break
            since = page.seq
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
        proxy.close()
    sent, received = proxy.take()
    return sent, received, elapsed, pages


def recreate_database(*, create: bool = True) -> None:
    _support.recreate_database(PG, DB_NAME, create=create)


def environment(tmp: Path, cache_url: str) -> dict[str, str]:
    from svccore.keyfile import write_private_key

    key = tmp / "signing-key.pem"
    write_private_key(key)
    return {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DB_NAME}",
        "CACHE_URL": cache_url,
        "SVC_SECRET_KEY": secrets.token_urlsafe(32),
        "SVC_SIGNING_KEY_FILE": str(key),
        "SVC_DEBUG": "0",
        "SVC_SSL_REDIRECT": "0",
        "SVC_LOG_LEVEL": "WARNING",
        "SVC_ENV_FILE": "",  # never the development server's var/dev.env
        "SVC_DB_CONN_MAX_AGE": "600",
        "DJANGO_SETTINGS_MODULE": "bench.floor_settings",
        "SVC_ADMIN_KEY": ADMIN_KEY,
    }


def fill(entries: int) -> float:
    """Replace the list with ``entries`` revocations numbered 1..entries; seconds taken."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(f"{PG}/{DB_NAME}") as conn:
        conn.execute("TRUNCATE licensing_revocation")
        # Bulk-load practice: build the unique index once after the load, not row by row
        # (the ids are random, as real ones are, so row-by-row inserts land all over it).
        conn.execute(f"ALTER TABLE licensing_revocation DROP CONSTRAINT {UNIQUE_ID}")
        conn.execute(
            "INSERT INTO licensing_revocation (seq, license_id, revoked_at, usable_until) "
            "SELECT g, 'LIC-' || upper(substr(md5(g::text), 1, 16)), now(), "
            "CASE WHEN g %% 50 = 7 THEN 1 WHEN g %% 4 = 0 THEN 0 ELSE %s END "
            "FROM generate_series(1, %s) AS g",
            (FAR_FUTURE, entries),
        )
        conn.execute(
            f"ALTER TABLE licensing_revocation ADD CONSTRAINT {UNIQUE_ID} UNIQUE (license_id)"
        )
        conn.execute("UPDATE licensing_revocationhead SET seq = %s WHERE id = 1", (entries,))
        conn.commit()
        conn.execute("ANALYZE licensing_revocation")
    return time.perf_counter() - started


def start_gunicorn(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    return _support.start_gunicorn(env, port, log, workers=WORKERS, threads=THREADS, timeout=120)


def get(
    conn: http.client.HTTPConnection, path: str, headers: dict[str, str], expect: int = 200
) -> tuple[bytes, http.client.HTTPResponse]:
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    if response.status != expect:
        raise RuntimeError(f"GET {path}: HTTP {response.status}, expected {expect}: {body[:300]!r}")
    return body, response


def rate(port: int, path: str, headers: dict[str, str], expect: int = 200) -> float:
    """Requests/s of ``path`` from CLIENTS keep-alive connections over SECONDS."""
    counts = [0] * CLIENTS
    errors: list[BaseException] = []
    start = threading.Barrier(CLIENTS + 1)
    stop = threading.Event()

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            get(conn, path, headers, expect)  # connect and warm before the clock starts
            start.wait()
            while not stop.is_set():
                get(conn, path, headers, expect)
                counts[index] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            stop.set()
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    stop.wait(SECONDS)
    stop.set()
    elapsed = time.perf_counter() - started
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def sizes(port: int, path: str) -> tuple[int, int, dict]:
    """(plain bytes, gzip bytes, body) of one answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    plain, _ = get(conn, path, {})
    zipped, response = get(conn, path, GZIP)
    conn.close()
    assert response.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(zipped) == plain
    return len(plain), len(zipped), json.loads(plain)


def walk(port: int) -> tuple[float, list[str]]:
    """Fetch every page from since=0 as a new device would; (seconds, documents)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    documents, since = [], 0
    started = time.perf_counter()
    while True:
        body, _ = get(conn, f"/v1/revocations?since={since}", GZIP)
        answer = json.loads(gzip.decompress(body))
        documents.append(answer["revocations"])
        if not answer["more"]:
            break
        since = answer["seq"]
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed, documents


def measure(port: int, entries: int, public_key) -> dict:
    from devices.documents import parse_revocation_page

    head = entries
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    _, response = get(conn, f"/v1/revocations?since={head}", GZIP)
    conn.close()
    current = GZIP | {"If-None-Match": response.getheader("ETag")}
    targets = {
        "floor": ("/bench/floor", GZIP, 200),
        "delta": (f"/v1/revocations?since={head - 1}", GZIP, 200),
        "304": (f"/v1/revocations?since={head}", current, 304),
        "page": ("/v1/revocations?since=0", GZIP, 200),
    }
    # Interleaved rounds, best of each: the floor and the list see the same machine load.
    result: dict = {name: 0.0 for name in targets}
    for _ in range(ROUNDS):
        for name, (path, headers, expect) in targets.items():
            result[name] = max(result[name], rate(port, path, headers, expect))
    result["delta_size"] = sizes(port, f"/v1/revocations?since={head - 1}")
    result["page_size"] = sizes(port, "/v1/revocations?since=0")
    first = parse_revocation_page(result["page_size"][2]["revocations"], public_key)
    result["page_entries"] = len(first.revoked)
    return result


def main() -> int:
    started = time.monotonic()
    recreate_database()
    redis, cache_url = _support.start_redis()
    with tempfile.TemporaryDirectory() as tmp:
        env = environment(Path(tmp), cache_url)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=REPO, env=env, check=True,
        )  # fmt: skip
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        from devices.documents import parse_revocation_page

        key = load_pem_private_key(Path(env["SVC_SIGNING_KEY_FILE"]).read_bytes(), None)
        public_key = key.public_key()
        port = _support.free_port()
        server = start_gunicorn(env, port, Path(tmp) / "gunicorn.log")
        results, fills = {}, {}
        try:
            for entries in SIZES:
                fills[entries] = fill(entries)
                cold, documents = walk(port)
                warm, _ = walk(port)
                pages = [parse_revocation_page(doc, public_key) for doc in documents]
                listed = sum(len(p.revoked) for p in pages)
                expected = entries - sum(1 for g in range(1, entries + 1) if g % 50 == 7)
                assert listed == expected and pages[-1].seq == entries, (listed, expected)
                results[entries] = measure(port, entries, public_key) | {
                    "walk": (cold, warm, len(pages), listed),
                    "device": device_first_sync(port, public_key, Path(tmp), entries),
                    "firmware walk": walk_as_firmware(port, public_key),
                }
        finally:
            server.terminate()
            server.wait(timeout=10)
            if redis is not None:
                redis.terminate()
                redis.wait(timeout=10)
    recreate_database(create=False)

    cache = "Redis (shared)" if redis is not None else "local memory per worker"
    print(
        f"GET /v1/revocations, gunicorn {WORKERS} workers x {THREADS} threads, cache: {cache}; "
        f"{CLIENTS} keep-alive client threads, Accept-Encoding: gzip; best of {ROUNDS} "
        f"interleaved {SECONDS:g} s runs; "
        f"{os.cpu_count()} CPUs"
    )
    print(f"{'entries':>10}  {'request':<34}{'req/s':>8}  {'floor req/s':>11}  {'ratio':>5}")
    for entries, r in results.items():
        floor = r["floor"]
        rows = [
            ("delta ?since=H-1 (1 entry)", r["delta"]),
            ("current ?since=H + If-None-Match", r["304"]),
            (f"first page ?since=0 ({r['page_entries']:,} entries)", r["page"]),
        ]
        for label, value in rows:
            print(
                f"{entries:>10,}  {label:<34}{value:>8,.0f}  {floor:>11,.0f}  {value / floor:>5.2f}"
            )
    big = results[SIZES[-1]]
    plain, zipped, _ = big["delta_size"]
    print(f"delta for one new revocation: {plain:,} B plain, {zipped:,} B gzip")
    plain, zipped, _ = big["page_size"]
    print(
        f"full page of {big['page_entries']:,} entries: {plain:,} B plain, {zipped:,} B gzip "
        f"({zipped / big['page_entries']:.1f} B per entry)"
    )
    for entries, r in results.items():
        cold, warm, pages, listed = r["walk"]
        print(
            f"{entries:,} entries: fill {fills[entries]:.2f} s; walk from since=0, {pages} pages, "
            f"{listed:,} listed (2 % pruned): {cold:.2f} s cold (each page built), "
            f"{warm:.2f} s warm (cached)"
        )
    print()
    print("What a new camera pays against the list (bytes on the wire, sent/received):")
    print(f"{'entries':>10}  {'step':<28}{'sent B':>8}  {'received B':>11}  {'seconds':>8}")
    for entries, r in results.items():
        device = r["device"]
        for step in ("activate", "first sync", "second sync", "sync after its revocation"):
            sent, received, seconds = device[step]
            print(f"{entries:>10,}  {step:<28}{sent:>8,}  {received:>11,}  {seconds:>8.3f}")
        sent, received, seconds, pages = r["firmware walk"]
        print(
            f"{entries:>10,}  {f'walk of the list ({pages} pages)':<28}{sent:>8,}  "
            f"{received:>11,}  {seconds:>8.3f}"
        )
        first = device["first sync"]
        print(
            f"{entries:>10,}  first sync / walk: {first[1] / received:.5f} of the bytes, "
            f"{first[2] / seconds:.4f} of the time; revocation learned at the next sync: "
            f"{device['revoked']}"
        )
    print(f"{time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
