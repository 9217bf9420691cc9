"""The data set of ``bench/bench_scale.py``: the plan (how many rows of each part, all
scaling with the licences), the customers and SKUs, and the loading, through the
services where the rule matters and by bulk SQL for the 10^7 rows (indexes dropped
during the load, rebuilt after; usage rollups; then a check and VACUUM ANALYZE).
Beside the script, as ``_support.py`` is; ``make bench`` runs only ``bench_*.py``.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from svccore.timeunits import DAY  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = os.environ.get("BENCH_SCALE_DB", "svc_scale")
CHUNK = 1_000_000
USAGE_DEVICES = 1000
HOUR = 3600
BIG = "CUST-SCALE"
SMALL = "CUST-SMALL"
OLD_CUSTOMERS = [f"CUST-C0{n}" for n in range(1, 8)]  # two old batches each
SKUS = {
    BIG: "VISION-PRO",
    SMALL: "DETECT-STD",
    "CUST-C01": "VISION-PRO",
    "CUST-C02": "VISION-PRO",
    "CUST-C03": "VISION-PRO",
    "CUST-C04": "DETECT-STD",
    "CUST-C05": "DETECT-STD",
    "CUST-C06": "ANPR-PERPETUAL",
    "CUST-C07": "ANPR-PERPETUAL",
    "CUST-C08": "DETECT-STD",  # direct licences only
}
TABLES = ("licensing_license", "licensing_activation")


@dataclass(frozen=True)
class Plan:
    """How many rows of each part; every part scales with ``licences``."""

    licenses: int
    revocations: int | None = None  # None: 1 % of the licences (bench_scale's set)

    @property
    def old(self) -> int:  # on the 17 old batches, 730..30 days ago
        return self.licenses - self.recent - self.small

    @property
    def recent(self) -> int:  # on the big customer's new batch, in the last 30 days
        return self.licenses // 10

    @property
    def small(self) -> int:  # on CUST-SMALL's one batch, over the last year
        return self.licenses // 1000

    @property
    def revoked(self) -> int:
        if self.revocations is not None:
            return min(self.revocations, self.licenses)
        return self.licenses // 100

    @property
    def revoked_step(self) -> int:
        """Every ``revoked_step``-th licence is revoked, from the middle of the first step
        (licence 50 of each hundred at 1 %)."""
        return max(1, self.licenses // max(1, self.revoked))

    @property
    def usage(self) -> int:
        return self.licenses // USAGE_DEVICES * USAGE_DEVICES


# --- the data set -------------------------------------------------------------------


def services_part(plan: Plan) -> dict[str, list[str]]:
    """Customers and batches through the services. Returns customer id -> batch ids
    (CUST-SCALE's last one is its new batch)."""
    from customers.services import customer_create
    from licensing.models import Batch
    from licensing.services import batch_issue

    per_old_batch = -(-plan.old // 17)
    batches: dict[str, list[str]] = {}
    for customer_id, sku in SKUS.items():
        customer_create(name=customer_id.title(), kind="oem", id=customer_id.removeprefix("CUST-"))
        if customer_id == BIG:
            sizes = [per_old_batch] * 3 + [plan.recent + plan.recent // 100 + 10]
        elif customer_id == SMALL:
            sizes = [plan.small]
        elif customer_id in OLD_CUSTOMERS:
            sizes = [per_old_batch] * 2
        else:
            sizes = []
        batches[customer_id] = [
            batch_issue(customer_id=customer_id, sku=sku, units=units, term_days=3650).id
            for units in sizes
        ]
    # The batches were sold before their first activation, two years ago.
    Batch.objects.update(issued_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=731))
    return batches


def _drop_secondary_indexes(cursor) -> list[str]:
    """Drop the unique constraints and the indexes of the bulk-loaded tables (primary
    keys stay: foreign keys point at them); returns the statements that build them again
    after the load, each in one sorted pass."""
    cursor.execute(
        """
        SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
        FROM pg_constraint c
        WHERE c.conrelid::regclass::text = ANY(%s) AND c.contype = 'u'
        """,
        [list(TABLES)],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        """
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        WHERE i.tablename = ANY(%s) AND NOT EXISTS (
            SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
        """,
        [list(TABLES)],
    )
    indexes = cursor.fetchall()
    for table, name, _ in constraints:
        cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    return [definition for _, definition in indexes] + [
        f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}'
        for table, name, definition in constraints
    ]


def _unit_rows(conn, *, first: int, count: int, batches: list[str], since: str, span: str):
    """Licences and activations ``first .. first + count - 1``, batch ``n mod len``, in
    time order from ``since`` over ``span`` (SQL intervals relative to now())."""
    started = time.monotonic()
    done = 0
    while done < count:
        low, high = first + done, first + min(done + CHUNK, count) - 1
        params = {
            "low": low,
            "high": high,
            "first": first,
            "count": count,
            "batches": batches,
            "since": since,
            "span": span,
        }
        moments = """
            SELECT n, (%(batches)s::text[])[1 + n %% cardinality(%(batches)s::text[])] AS batch_id,
                now() - %(since)s::interval
                    + %(span)s::interval * ((n - %(first)s)::float8 / %(count)s) AS at
            FROM generate_series(%(low)s::bigint, %(high)s::bigint) n
        """
        conn.execute(
            f"""
            INSERT INTO licensing_license (id, kind, customer_id, sku, device_id, activation,
                batch_id, issued_at, expires_at, grace_days, unit_price, currency, claims,
                token, token_sha256, revoked_at, revoke_reason)
            SELECT 'LIC-SC' || lpad(m.n::text, 10, '0'), 'unit', b.customer_id, b.sku,
                'scale-' || m.n, 'optional', b.id, m.at, b.expires_at, 7, b.unit_price,
                b.currency,
                jsonb_build_object('lic', 'LIC-SC' || lpad(m.n::text, 10, '0'),
                    'dev', 'scale-' || m.n, 'sku', b.sku, 'nbf', extract(epoch FROM m.at)::bigint,
                    'exp', COALESCE(extract(epoch FROM b.expires_at)::bigint, 0),
                    'grace_days', 7, 'placeholder', true),
                'SVC1.placeholder.' || m.n, md5(m.n::text) || md5(m.n::text), NULL, ''
            FROM ({moments}) m JOIN licensing_batch b ON b.id = m.batch_id
            """,  # noqa: S608 - a constant subquery; values are parameters
            params,
        )
        conn.execute(
            f"""
            INSERT INTO licensing_activation (id, batch_id, device_id, license_id,
                fingerprint_source, weak_binding, sdk_version, activated_at, client_ip,
                transfer_of_id)
            SELECT m.n, m.batch_id, 'scale-' || m.n, 'LIC-SC' || lpad(m.n::text, 10, '0'),
                CASE WHEN m.n %% 100 = 7 THEN 'mac' WHEN m.n %% 10 = 3 THEN 'machine-id'
                    ELSE 'dmi' END,
                m.n %% 100 = 7, '2.4.1', m.at, NULL, NULL
            FROM ({moments}) m
            """,  # noqa: S608
            params,
        )
        conn.commit()
        done = high - first + 1
        print(
            f"  units {done:,} / {count:,} since {since} ({time.monotonic() - started:.0f} s)",
            flush=True,
        )


def bulk_part(plan: Plan, batches: dict[str, list[str]], *, database: str = "") -> None:
    """The units, their revocations and the seats counted, by SQL; then the indexes and
    the activation rollups."""
    import psycopg

    old = [b for c in [BIG, *OLD_CUSTOMERS] for b in batches[c][: 2 if c != BIG else 3]]
    assert len(old) == 17, old
    with psycopg.connect(database or f"{PG}/{DB_NAME}") as conn:
        conn.execute("SET session_replication_role = replica")  # no FK checks, no triggers
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        with conn.cursor() as cursor:
            definitions = _drop_secondary_indexes(cursor)
        conn.commit()
        _unit_rows(conn, first=1, count=plan.old, batches=old, since="730 days", span="700 days")
        _unit_rows(
            conn,
            first=plan.old + 1,
            count=plan.small,
            batches=batches[SMALL],
            since="365 days",
            span="364 days",
        )
        _unit_rows(
            conn,
            first=plan.old + plan.small + 1,
            count=plan.recent,
            batches=batches[BIG][3:],
            since="29 days 12 hours",
            span="29 days 11 hours",
        )
        started = time.monotonic()
        conn.execute(
            "SELECT setval(pg_get_serial_sequence('licensing_activation', 'id'), %s)",
            [plan.licenses],
        )
        # 1 % revoked (or plan.revocations), each two days after its activation (or now),
        # and on the list.
        step = plan.revoked_step
        conn.execute(
            """
            UPDATE licensing_license SET revoked_at = LEAST(issued_at + interval '2 days', now()),
                revoke_reason = 'bench: revoked'
            WHERE id IN (SELECT 'LIC-SC' || lpad(n::text, 10, '0')
                         FROM generate_series(%s::bigint, %s::bigint, %s::bigint) n)
            """,
            [max(1, step // 2), plan.licenses, step],
        )
        conn.execute(
            """
            INSERT INTO licensing_revocation (seq, license_id, revoked_at, usable_until)
            SELECT (SELECT seq FROM licensing_revocationhead WHERE id = 1)
                    + row_number() OVER (ORDER BY revoked_at, id),
                id, revoked_at,
                COALESCE(extract(epoch FROM expires_at)::bigint + 7 * 86400, 0)
            FROM licensing_license WHERE revoke_reason = 'bench: revoked'
            """
        )
        conn.execute(
            "UPDATE licensing_revocationhead SET seq = (SELECT max(seq) FROM licensing_revocation)"
        )
        conn.execute(
            """
            UPDATE licensing_batch b SET units_activated = a.n
            FROM (SELECT batch_id, count(*) AS n FROM licensing_activation GROUP BY 1) a
            WHERE a.batch_id = b.id
            """
        )
        conn.commit()
        print(f"  revocations and seat counts ({time.monotonic() - started:.0f} s)", flush=True)
        started = time.monotonic()
        for definition in definitions:
            conn.execute(definition)
            conn.commit()
        print(
            f"  {len(definitions)} indexes built ({time.monotonic() - started:.0f} s)", flush=True
        )
        if _has_rollups(conn):  # (a checkout from before the rollups has none)
            conn.execute("DELETE FROM licensing_activationdaily")
            conn.execute(
                """
                INSERT INTO licensing_activationdaily (batch_id, day, activations, transfers)
                SELECT batch_id, (activated_at AT TIME ZONE 'UTC')::date,
                    count(*) FILTER (WHERE transfer_of_id IS NULL),
                    count(*) FILTER (WHERE transfer_of_id IS NOT NULL)
                FROM licensing_activation GROUP BY 1, 2
                """
            )
            conn.commit()


def _has_rollups(conn) -> bool:
    found = conn.execute("SELECT to_regclass('licensing_activationdaily')").fetchone()
    return found[0] is not None


def usage_part(plan: Plan, batches: dict[str, list[str]], *, database: str = "") -> None:
    """10^4 hours of records of 1000 of the big customer's units, with their rollups (as
    bench_rating loads them)."""
    import psycopg

    from billing.limits import month_start, next_month
    from billing.partitions import partitions_ensure

    hours = plan.usage // USAGE_DEVICES
    last_hour = int(time.time()) // HOUR * HOUR
    first_hour = last_hour - hours * HOUR
    months, month = [], month_start(dt.datetime.fromtimestamp(first_hour, tz=dt.UTC).date())
    while month <= dt.datetime.fromtimestamp(last_hour, tz=dt.UTC).date():
        months.append(month)
        month = next_month(month)
    partitions_ensure(months)
    started = time.monotonic()
    step = CHUNK // USAGE_DEVICES * HOUR
    with psycopg.connect(database or f"{PG}/{DB_NAME}") as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            """
            CREATE TEMP TABLE usage_units AS SELECT id, customer_id, sku, device_id
            FROM licensing_license WHERE batch_id = %s ORDER BY id LIMIT %s
            """,
            [batches[BIG][0], USAGE_DEVICES],
        )
        for low in range(first_hour, last_hour, step):
            high = min(low + step, last_hour)
            conn.execute(
                """
                INSERT INTO billing_usagerecord (license_id, customer_id, sku, device_id,
                    received_at, period_start, period_end, inferences, frames,
                    stream_seconds, events)
                SELECT u.id, u.customer_id, u.sku, u.device_id, now(), h, h + 3600,
                    300 + (h / 3600 * 37 + length(u.id)) %% 100, 54000, 3600, h / 3600 %% 5
                FROM generate_series(%s::bigint, %s::bigint, 3600) h CROSS JOIN usage_units u
                """,
                [low, high - HOUR],
            )
            conn.execute(
                f"""
                INSERT INTO billing_usagedaily AS daily (license_id, customer_id, sku, day,
                    records, inferences, frames, stream_seconds, events)
                SELECT license_id, customer_id, sku,
                    DATE '1970-01-01' + (period_start / {DAY})::int,
                    count(*), sum(inferences), sum(frames), sum(stream_seconds), sum(events)
                FROM billing_usagerecord WHERE period_start >= %s AND period_start < %s
                GROUP BY 1, 2, 3, 4
                ON CONFLICT (license_id, day) DO UPDATE
                SET records = daily.records + excluded.records,
                    inferences = daily.inferences + excluded.inferences,
                    frames = daily.frames + excluded.frames,
                    stream_seconds = daily.stream_seconds + excluded.stream_seconds,
                    events = daily.events + excluded.events
                """,  # noqa: S608 - DAY is a constant
                [low, high],
            )
            conn.commit()
            loaded = (high - first_hour) // HOUR * USAGE_DEVICES
            print(
                f"  usage {loaded:,} / {plan.usage:,} records ({time.monotonic() - started:.0f} s)",
                flush=True,
            )


def services_after(plan: Plan, batches: dict[str, list[str]]) -> None:
    """What goes through the services once the units are there: seat releases and the
    replacement activations that take them (transfers), direct licences, an invoice."""
    from billing.services import invoice_issue
    from licensing.models import Batch
    from licensing.services import license_issue
    from licensing.services.activation import unit_activate
    from licensing.services.seats import seat_release

    started = time.monotonic()
    new_batch = Batch.objects.select_related("license").get(pk=batches[BIG][3])
    releases = max(1, plan.licenses // 50_000)
    first_recent = plan.old + plan.small + 1
    for n in range(releases):
        seat_release(
            license_id=f"LIC-SC{first_recent + 1 + 2 * n:010d}", reason="bench: camera replaced"
        )
        unit_activate(batch_token=new_batch.license.token, device_id=f"scale-replacement-{n}")
    for n in range(100):
        license_issue(customer_id="CUST-C08", sku="DETECT-STD", device_id=f"scale-direct-{n}")
    print(
        f"  {releases} seat releases and transfers, 100 direct licences through the services "
        f"({time.monotonic() - started:.0f} s)",
        flush=True,
    )
    started = time.monotonic()
    invoice = invoice_issue(customer_id="CUST-C01", period_days=30)
    print(
        f"  invoice {invoice.number} issued for CUST-C01 ({time.monotonic() - started:.0f} s)",
        flush=True,
    )


def check_and_vacuum(plan: Plan, *, database: str = "") -> None:
    import psycopg

    with psycopg.connect(database or f"{PG}/{DB_NAME}", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT count(*) FILTER (WHERE transfer_of_id IS NULL), "
            "count(*) FILTER (WHERE transfer_of_id IS NOT NULL) FROM licensing_activation"
        ).fetchone()
        checked = "no activation rollups in this checkout"
        if _has_rollups(conn):
            rollups = conn.execute(
                "SELECT sum(activations), sum(transfers) FROM licensing_activationdaily"
            ).fetchone()
            assert rollups == rows, (rollups, rows)
            checked = "rollups match the activations"
        started = time.monotonic()
        conn.execute("VACUUM ANALYZE")
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        print(
            f"  {checked} ({rows[0]:,} billable, {rows[1]:,} transfers); "
            f"VACUUM ANALYZE {time.monotonic() - started:.0f} s; database {size.fetchone()[0]}",
            flush=True,
        )


def load(plan: Plan, *, database: str = "", usage: bool = True) -> float:
    """The whole set into ``database`` (a URL; default ``svc_scale`` on BENCH_PG), which
    Django's settings must name too (the services write through them); ``usage=False``
    leaves out the usage records (a status benchmark reads none). Returns its seconds."""
    started = time.monotonic()
    where = database.rsplit("/", 1)[-1] if database else DB_NAME
    print(
        f"loading {plan.licenses:,} licences and activations, {plan.revoked:,} revoked, "
        f"into {where}",
        flush=True,
    )
    batches = services_part(plan)
    bulk_part(plan, batches, database=database)
    if usage:
        usage_part(plan, batches, database=database)
    services_after(plan, batches)
    check_and_vacuum(plan, database=database)
    return time.monotonic() - started
