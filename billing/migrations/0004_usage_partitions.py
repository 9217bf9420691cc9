"""On PostgreSQL, usage records become a table partitioned by month of period_start
(see billing.partitions): the existing table's rows move into monthly partitions (the
months they use, and the months around now), anything else into a default partition.

The dedup key (device_id, period_start, period_end) contains the partition key, which
is what PostgreSQL needs to enforce it (and ``ON CONFLICT`` on it) across partitions.
The primary key becomes (id, period_start) for the same reason; Django still addresses
records by id. SQLite keeps the plain table.
"""

import datetime as dt

from django.db import migrations, models

TABLE = "billing_usagerecord"
MONTHS_AROUND_NOW = (-1, 3)
OLDEST = dt.date(2000, 1, 1)


def _first(day):
    return day.replace(day=1)


def _next(day):
    return (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def _seconds(day):
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT period_start / 86400 / 28 FROM {TABLE}")
        # A coarse pass (28-day steps) then the exact months of those steps.
        steps = [row[0] for row in cursor.fetchall()]
    today = dt.datetime.now(dt.UTC).date()
    months = set()
    for step in steps:
        for offset in (0, 27):
            day = dt.date(1970, 1, 1) + dt.timedelta(days=step * 28 + offset)
            months.add(_first(day))
    month = _first(today)
    for _ in range(-MONTHS_AROUND_NOW[0]):
        month = _first(month - dt.timedelta(days=1))
    for _ in range(MONTHS_AROUND_NOW[1] - MONTHS_AROUND_NOW[0] + 1):
        months.add(month)
        month = _next(month)
    latest = _first(today + dt.timedelta(days=366))
    months = sorted(m for m in months if OLDEST <= m <= latest)

    run(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_plain")
    run(f"ALTER SEQUENCE IF EXISTS {TABLE}_id_seq RENAME TO {TABLE}_plain_id_seq")
    run(f"ALTER TABLE {TABLE}_plain RENAME CONSTRAINT {TABLE}_pkey TO {TABLE}_plain_pkey")
    run(f"ALTER TABLE {TABLE}_plain RENAME CONSTRAINT usage_record_once TO usage_record_once_plain")
    run("ALTER INDEX usage_customer_start RENAME TO usage_customer_start_plain")
    run(
        f"CREATE TABLE {TABLE} (LIKE {TABLE}_plain INCLUDING DEFAULTS INCLUDING IDENTITY) "
        "PARTITION BY RANGE (period_start)"
    )
    run(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id, period_start)")
    run(
        f"ALTER TABLE {TABLE} ADD CONSTRAINT usage_record_once "
        "UNIQUE (device_id, period_start, period_end)"
    )
    run(
        f"CREATE INDEX usage_customer_start ON {TABLE} (customer_id, period_start) "
        "INCLUDE (sku, inferences)"
    )
    run(f"CREATE TABLE {TABLE}_default PARTITION OF {TABLE} DEFAULT")
    for month in months:
        run(
            f"CREATE TABLE {TABLE}_y{month.year:04d}m{month.month:02d} PARTITION OF {TABLE} "
            f"FOR VALUES FROM ({_seconds(month)}) TO ({_seconds(_next(month))})"
        )
    run(f"INSERT INTO {TABLE} SELECT * FROM {TABLE}_plain")
    run(
        f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), "
        f"COALESCE((SELECT MAX(id) FROM {TABLE}), 0) + 1, false)"
    )
    run(f"DROP TABLE {TABLE}_plain")


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_partitioned")
    run(f"ALTER SEQUENCE IF EXISTS {TABLE}_id_seq RENAME TO {TABLE}_partitioned_id_seq")
    run(f"ALTER TABLE {TABLE}_partitioned RENAME CONSTRAINT {TABLE}_pkey TO {TABLE}_p_pkey")
    run(f"ALTER TABLE {TABLE}_partitioned RENAME CONSTRAINT usage_record_once TO usage_record_once_p")
    run("ALTER INDEX usage_customer_start RENAME TO usage_customer_start_p")
    run(f"CREATE TABLE {TABLE} (LIKE {TABLE}_partitioned INCLUDING DEFAULTS INCLUDING IDENTITY)")
    run(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id)")
    run(
        f"ALTER TABLE {TABLE} ADD CONSTRAINT usage_record_once "
        "UNIQUE (device_id, period_start, period_end)"
    )
    run(
        f"CREATE INDEX usage_customer_start ON {TABLE} (customer_id, period_start) "
        "INCLUDE (sku, inferences)"
    )
    run(f"INSERT INTO {TABLE} SELECT * FROM {TABLE}_partitioned")
    run(
        f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), "
        f"COALESCE((SELECT MAX(id) FROM {TABLE}), 0) + 1, false)"
    )
    run(f"DROP TABLE {TABLE}_partitioned")


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_immutable_triggers")]

    operations = [
        migrations.CreateModel(
            name="PrunedUsageMonth",
            fields=[
                (
                    "month",
                    models.DateField(
                        help_text="First day of the month (UTC).",
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("records", models.BigIntegerField()),
                ("inferences", models.BigIntegerField()),
                ("pruned_at", models.DateTimeField()),
            ],
            options={"verbose_name": "pruned usage month", "ordering": ["month"]},
        ),
        migrations.RunPython(partition, unpartition),
    ]
