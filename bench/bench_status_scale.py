"""Licence statuses at fleet scale (issue 46 item 5): requests per second for
``GET /v1/revocations/status`` cold, cached in nginx and while 1 % of the licences
change per minute, and the primary's queries per second under each, with and without
a streaming replica; printed as one table.

The set: 10^6 live unit licences (``--licences``) and 10^6 revoked ones on the
revocation list (``--revocations``, default as many), loaded by bench/_scale_data.py
(bench_scale's loader: batches through the services, units and revocations by SQL;
no usage records) into a primary of the benchmark's own: tests/pgcluster.py makes a
PostgreSQL cluster on a private port (``fsync = off``: a benchmark's, not a bank's)
and, once the data are in, its streaming replica by ``pg_basebackup``. The machine's
own server is not touched.

The service: gunicorn serving ``config.device_wsgi`` (2 sync workers, held database
connections, a private Redis as the shared cache), behind nginx with
deploy/nginx/status-cache.conf included as it ships; ``SVC_STATUS_MAX_AGE`` and
``SVC_STATUS_WINDOW_SECONDS`` at their defaults. Each measurement is wrk
(BENCH_CONNECTIONS connections, BENCH_SECONDS) with a Lua script that picks a random
status URL (licence and its own device) from a file of them per request:

- cold: the node alone, statuses never signed (a sample of licences nobody asked for):
  each request signs, stores and checks in;
- stored: the node alone, statuses signed already (the warm sample): two indexed reads,
  no signature; what an nginx revalidation (If-None-Match, 304) costs the node;
- cached: through nginx, the warm sample all in its cache (warmed first, one request
  each);
- changing: through nginx, the warm sample, while bench/_status_churn.py revokes 1 %
  of the live licences per minute (each revoked licence is re-signed at its next
  request, nothing else is: status_store's basis), for BENCH_CHURN_SECONDS: by the
  service's writes in SQL, a statement a second (BENCH_CHURN=sql, the default), or
  through ``license_revoke`` (BENCH_CHURN=service, which did not reach the rate beside
  the node on the shared 2-core machine). The licences revoked are drawn from the
  whole fleet, so 1 % of the sample changes per minute too; the rate reached is printed.

Then gunicorn again with ``SVC_DATABASE_REPLICA_URL`` naming the replica, and changing
(still within max-age of the warming: BENCH_WARM is small enough to warm in about a
minute), cold (on another unsigned sample) and stored once more.

The primary's queries per second are ``pg_stat_statements`` calls (statements the
planner ran; BEGIN, COMMIT and SAVEPOINT not counted) on the benchmark's database over
the measurement, without the churn process's own (it connects as a role of its own),
and per 1,000 status requests; the replica's likewise. Cache hits are nginx's own
``$upstream_cache_status`` of each answer.

Only ratios carry: the machine's cores are printed, and it may be shared (wrk, nginx,
gunicorn, both PostgreSQL servers and the churn all run on it). Run from the
repository root: ``python bench/bench_status_scale.py`` (or ``make bench``, or
``python -m bench status_scale``). Options: ``--licences N`` (10^6, with as many
revoked: 6 minutes to load on the shared 2 cores), ``--revocations N``, ``--keep``
(leave the clusters in KEEP_HOME), ``--reuse`` (measure kept clusters; stored statuses
are dropped first, so cold is cold).
Settings: BENCH_CONNECTIONS, BENCH_SECONDS, BENCH_CHURN_SECONDS, BENCH_CHURN, BENCH_WARM
(the sample kept in the cache, 5,000). Needs wrk, nginx and PostgreSQL's server binaries;
skipped, saying why, without them.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script
from _scale_data import Plan, load  # noqa: E402 - beside this script

from tests.pgcluster import Pair, ToolsMissing  # noqa: E402

DB_NAME = "svc_status_scale"
KEEP_HOME = Path(tempfile.gettempdir()) / "svc-bench-status-scale"
CHURN_ROLE = "bench_churn"
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "15"))
CHURN_SECONDS = float(os.environ.get("BENCH_CHURN_SECONDS", "60"))
WARM = int(os.environ.get("BENCH_WARM", "5000"))
CHURN = os.environ.get("BENCH_CHURN", "sql")  # or "service": bench/_status_churn.py
CHANGING_PER_MINUTE = 0.01
WRK = shutil.which("wrk")
# The primary's settings beside tests/pgcluster.py's: memory for 10^6 licences, and
# pg_stat_statements counting the statements the service runs.
PRIMARY_CONF = """
shared_buffers = 256MB
max_connections = 100
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track_utility = off
"""
# One random status URL per request from the file given after "--" (a table per wrk
# thread, each seeded apart).
LUA = """
local paths = {}
init = function(args)
  for line in io.lines(args[1]) do paths[#paths + 1] = line end
  math.randomseed(os.time() + tonumber(tostring(paths):match("0x(%x+)") or "0", 16) % 100000)
end
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
"""


@dataclass
class Row:
    label: str
    rate: float
    errors: int
    primary_qps: float
    replica_qps: float | None
    note: str = ""

    @property
    def per_thousand(self) -> float:
        return self.primary_qps / self.rate * 1000 if self.rate else 0.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--licences", dest="licenses", type=int, default=1_000_000)
    parser.add_argument(
        "--revocations", type=int, default=None, help="revoked licences (default: --licences)"
    )
    parser.add_argument("--keep", action="store_true", help=f"leave the clusters in {KEEP_HOME}")
    parser.add_argument("--reuse", action="store_true", help="measure clusters kept by --keep")
    args = parser.parse_args(argv)
    if args.revocations is None:
        args.revocations = args.licenses
    if args.licenses < 100 or args.revocations < 0:
        parser.error("--licences at least 100, --revocations not negative")
    return args


def plan_of(args: argparse.Namespace) -> Plan:
    """The live licences and the revoked ones are one set of units, every k-th revoked."""
    return Plan(args.licenses + args.revocations, revocations=args.revocations)


# --- measuring ----------------------------------------------------------------------


def statements(cluster, churn_oid: int, *, churn: bool = False) -> int:
    """Statements run so far on the benchmark's database, the churn's left out (or, with
    ``churn``, the churn's alone)."""
    return cluster.value(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s "
        "AND (s.userid = %s) = %s",
        (DB_NAME, churn_oid, churn),
    )


def wrk(url: str, paths: Path, script: Path, seconds: float) -> tuple[float, int]:
    """(requests per second, failed requests) of wrk on ``url`` with ``paths``."""
    command = [
        WRK, "-t2", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "--timeout", "10s",
        "-s", str(script), url, "--", str(paths),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses:\s+(\d+)", out))
    if socket_errors := re.search(r"Socket errors: (.*)", out):
        errors += sum(int(n) for n in re.findall(r"\d+", socket_errors.group(1)))
    return rate, errors


def cache_statuses(log: Path, since: int) -> tuple[Counter, int]:
    """nginx's cache statuses of the answers logged after byte ``since`` of its log."""
    time.sleep(1.5)  # the log is flushed every second
    with open(log, "rb") as lines:
        lines.seek(since)
        found = Counter(line.strip().decode() or "-" for line in lines)
    return found, log.stat().st_size


def warm(port: int, paths: list[str]) -> float:
    """One request through nginx for each of ``paths`` (8 at a time); its seconds."""
    started = time.monotonic()

    def fetch(chunk: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for path in chunk:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: HTTP {response.status}")
        conn.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(fetch, [paths[n::8] for n in range(8)]))
    return time.monotonic() - started


def start_churn(env: dict[str, str], ids: Path, per_second: float, log: Path):
    out = open(log, "w")  # noqa: SIM115 - closed by stop_churn
    command = [
        sys.executable, str(REPO / "bench" / "_status_churn.py"), str(ids), str(per_second), CHURN,
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=out), out


def stop_churn(churn) -> tuple[int, float]:
    """(licences revoked, seconds) of a churn process, stopped."""
    process, err = churn
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    err.close()
    if process.returncode:
        sys.exit(f"the churn failed:\n{Path(err.name).read_text()[-3000:]}")
    done, seconds = output.split()
    return int(done), float(seconds)


# --- the set ------------------------------------------------------------------------


def samples(pair: Pair, sizes: list[int]) -> list[list[tuple[str, str]]]:
    """Disjoint random samples of live unit licences (id, device), of ``sizes``."""
    with pair.primary.connect() as conn:
        rows = conn.execute(
            "SELECT id, device_id FROM licensing_license WHERE kind = 'unit' "
            "AND revoked_at IS NULL AND device_id LIKE 'scale-%%' ORDER BY random() LIMIT %s",
            [sum(sizes)],
        ).fetchall()
    found, start = [], 0
    for size in sizes:
        found.append(rows[start : start + size])
        start += size
    return found


def status_paths(rows: list[tuple[str, str]]) -> list[str]:
    return [f"/v1/revocations/status?license_id={lic}&device_id={dev}" for lic, dev in rows]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def prepare_database(pair: Pair) -> int:
    """pg_stat_statements, the churn's role (its oid returned), no stored statuses."""
    with pair.primary.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [CHURN_ROLE]).fetchone():
            conn.execute(f"CREATE ROLE {CHURN_ROLE} LOGIN SUPERUSER")
        conn.execute("TRUNCATE licensing_statusdocument")
        return conn.execute("SELECT oid FROM pg_roles WHERE rolname = %s", [CHURN_ROLE]).fetchone()[
            0
        ]


# --- the run ------------------------------------------------------------------------


@dataclass
class Bench:
    """What every measurement shares: the clusters, the files, the addresses."""

    pair: Pair
    churn_oid: int
    tmp: Path
    edge: str
    churn_env: dict[str, str]
    per_second: float
    licenses: int
    rows: list[Row] = field(default_factory=list)

    @property
    def nginx_log(self) -> Path:
        return self.tmp / "cache.log"

    def measure(
        self,
        label: str,
        url: str,
        paths: Path,
        seconds: float = SECONDS,
        churn_slice: list[str] | None = None,
        replica: bool = False,
    ) -> Row:
        """wrk on ``url`` with ``paths`` for ``seconds``, the statements the primary (and
        the replica) ran meanwhile, and, with ``churn_slice``, the churn revoking those
        licences at the rate; the row printed and kept."""
        pair, churn_oid = self.pair, self.churn_oid
        churn = None
        if churn_slice is not None:
            ids = write_lines(self.tmp / f"churn-{len(self.rows)}.txt", churn_slice)
            churn = start_churn(self.churn_env, ids, self.per_second, self.tmp / "churn.log")
            time.sleep(2)  # its Django set up
        logged = self.nginx_log.stat().st_size if self.nginx_log.exists() else 0
        before = statements(pair.primary, churn_oid)
        churn_before = statements(pair.primary, churn_oid, churn=True)
        before_replica = statements(pair.replica, churn_oid) if replica else 0
        started = time.monotonic()
        rate, errors = wrk(url, paths, self.tmp / "random-status.lua", seconds)
        elapsed = time.monotonic() - started
        primary_qps = (statements(pair.primary, churn_oid) - before) / elapsed
        replica_qps = None
        if replica:
            replica_qps = (statements(pair.replica, churn_oid) - before_replica) / elapsed
        notes = []
        if churn is not None:
            done, churn_seconds = stop_churn(churn)
            churn_statements = statements(pair.primary, churn_oid, churn=True)
            notes.append(
                f"{done:,} licences revoked in {churn_seconds:.0f} s "
                f"({done / churn_seconds * 60 / self.licenses:.2%} of the fleet a "
                f"minute; its own {(churn_statements - churn_before) / churn_seconds:.1f} "
                "statements/s on the primary)"
            )
        if url == self.edge:
            found, _ = cache_statuses(self.nginx_log, logged)
            total = sum(found.values()) or 1
            notes.insert(0, ", ".join(f"{k} {v / total:.1%}" for k, v in found.most_common(3)))
        row = Row(label, rate, errors, primary_qps, replica_qps, "; ".join(notes))
        self.rows.append(row)
        print("  " + table([row])[-1], flush=True)
        return row


def table(rows: list[Row]) -> list[str]:
    width = max(len(row.label) for row in rows)
    lines = [
        f"{'measurement':<{width}} | {'req/s':>8} | {'failed':>6} | {'primary q/s':>11} | "
        f"{'per 1,000 req':>13} | {'replica q/s':>11} | notes",
        "-" * (width + 80),
    ]
    for row in rows:
        replica = f"{row.replica_qps:,.0f}" if row.replica_qps is not None else "-"
        lines.append(
            f"{row.label:<{width}} | {row.rate:>8,.0f} | {row.errors:>6} | "
            f"{row.primary_qps:>11,.0f} | {row.per_thousand:>13,.0f} | {replica:>11} | {row.note}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = [
        what
        for what, ok in (("wrk (apt-get install wrk)", WRK), ("nginx", _support.NGINX))
        if not ok
    ]
    try:
        home = KEEP_HOME if args.keep or args.reuse else None
        pair = Pair(database=DB_NAME, conf=PRIMARY_CONF, home=home)
    except ToolsMissing as error:
        missing.append(str(error))
    if missing:
        print("skipped: missing " + ", ".join(missing))
        return 0
    plan = plan_of(args)
    print(
        f"machine: {os.cpu_count()} cores, shared with whatever else runs (wrk, nginx, "
        "gunicorn, two PostgreSQL servers and the churn all run here): the ratios, not the "
        "rates, are the figures",
        flush=True,
    )
    resumed = args.reuse and pair.resume()
    if not resumed and KEEP_HOME == pair.home:
        pair.stop()  # a kept pair not asked for: a fresh one in its place
        pair = Pair(database=DB_NAME, conf=PRIMARY_CONF, home=KEEP_HOME)
    redis = nginx = server = None
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-status-scale-") as tmp_name:
            tmp = Path(tmp_name)
            if not resumed:
                pair.start_primary()
            server_url = f"postgres://postgres@127.0.0.1:{pair.primary.port}"
            _support.configure_django(tmp, server_url, DB_NAME)
            if not resumed:
                seconds = load(plan, database=pair.primary.url, usage=False)
                print(f"loaded in {seconds / 60:.1f} min", flush=True)
            churn_oid = prepare_database(pair)
            if not (pair.replica.data / "PG_VERSION").exists():
                started = time.monotonic()
                pair.start_replica()
                print(f"replica made and streaming in {time.monotonic() - started:.0f} s")
            pair.await_replayed(timeout=600)

            warm_rows, cold_rows, cold_replica_rows = samples(
                pair, [min(WARM, args.licenses // 10), args.licenses // 5, args.licenses // 5]
            )
            changing = samples(pair, [int(args.licenses * CHANGING_PER_MINUTE * 4)])[0]
            warm_paths = status_paths(warm_rows)
            files = {
                "warm": write_lines(tmp / "warm.txt", warm_paths),
                "cold": write_lines(tmp / "cold.txt", status_paths(cold_rows)),
                "cold-replica": write_lines(
                    tmp / "cold-replica.txt", status_paths(cold_replica_rows)
                ),
            }
            (tmp / "random-status.lua").write_text(LUA)
            churn_ids = [lic for lic, _ in changing]
            redis, cache_url = _support.start_redis()
            env = {
                **os.environ,
                "CACHE_URL": cache_url,
                "SVC_DB_CONN_MAX_AGE": "600",
                "SVC_ALLOWED_HOSTS": "*",
            }
            node_port, port = _support.free_port(), _support.free_port()
            node = f"http://127.0.0.1:{node_port}"
            bench = Bench(
                pair=pair,
                churn_oid=churn_oid,
                tmp=tmp,
                edge=f"http://127.0.0.1:{port}",
                churn_env=dict(
                    os.environ,
                    DATABASE_URL=f"postgres://{CHURN_ROLE}@127.0.0.1:{pair.primary.port}/{DB_NAME}",
                ),
                per_second=args.licenses * CHANGING_PER_MINUTE / 60,
                licenses=args.licenses,
            )
            rows = bench.rows

            def serve(**extra: str):
                return _support.start_gunicorn(
                    {**env, **extra}, node_port, tmp / "gunicorn.log", workers=2, threads=1,
                    timeout=60, worker_class="sync", app="config.device_wsgi",
                )  # fmt: skip

            server = serve()
            nginx = _support.start_nginx(tmp, node_port, port, max_size="2g", cache_log=True)
            print(
                f"measuring: wrk {CONNECTIONS} connections, {SECONDS:g} s each "
                f"({CHURN_SECONDS:g} s while changing); {len(warm_paths):,} statuses in the "
                f"warm sample",
                flush=True,
            )
            bench.measure("cold: node alone, statuses never signed", node, files["cold"])
            seconds = warm(port, warm_paths)
            print(f"  warmed {len(warm_paths):,} statuses through nginx in {seconds:.0f} s")
            bench.measure("stored: node alone, statuses signed", node, files["warm"])
            bench.measure("cached: through nginx", bench.edge, files["warm"])
            half = len(churn_ids) // 2
            bench.measure("changing 1 %/min: through nginx", bench.edge, files["warm"],
                          CHURN_SECONDS, churn_ids[:half])  # fmt: skip

            # Changing first, while the warm sample is still within max-age of its warming
            # (as it was without the replica), then cold and stored.
            server.terminate()
            server.wait(timeout=30)
            server = serve(SVC_DATABASE_REPLICA_URL=pair.replica.url)
            bench.measure("changing 1 %/min, with the replica", bench.edge, files["warm"],
                          CHURN_SECONDS, churn_ids[half:], replica=True)  # fmt: skip
            bench.measure("cold, with the replica", node, files["cold-replica"], replica=True)
            bench.measure("stored, with the replica", node, files["warm"], replica=True)
            from django.db import connections

            connections.close_all()
    finally:
        for process in (nginx, server, redis):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
        pair.stop(keep=args.keep)
    print(
        f"\nlicence statuses at scale: {args.licenses:,} live licences, {args.revocations:,} "
        f"revoked on the list; gunicorn config.device_wsgi 2 sync workers; nginx with "
        f"status-cache.conf; wrk {CONNECTIONS} connections, random licences; primary q/s = "
        "pg_stat_statements calls a second on the primary (the churn's own left out)"
    )
    print("\n".join(table(rows)))
    cold, stored, cached = rows[0], rows[1], rows[2]
    print(
        f"cached / cold: {cached.rate / cold.rate:.1f}x; stored / cold: "
        f"{stored.rate / cold.rate:.1f}x (only ratios carry: {os.cpu_count()} shared cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
