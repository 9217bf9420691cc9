"""Rows written on a hot path without the ORM's instance machinery."""

from __future__ import annotations

import functools
import re
from typing import Any

from django.db import connection
from django.db.models import Model


def _params(model: type[Model], values: dict[str, Any]) -> list[Any]:
    fields = [model._meta.get_field(name) for name in values]
    return [
        field.get_db_prep_save(v, connection)
        for field, v in zip(fields, values.values(), strict=True)
    ]


def insert_row(model: type[Model], **values: Any) -> None:
    """INSERT one row of ``model`` from its field values, every column given, without
    building an instance: on the hot path, an instance and its save() cost more than
    the statement. Values are adapted by their fields, as the ORM adapts them."""
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(model, tuple(values)), _params(model, values))


def insert_rows(*rows: tuple[type[Model], dict[str, Any]]) -> None:
    """INSERT several rows (each ``(model, values)`` as :func:`insert_row` takes) in one
    statement on PostgreSQL (``WITH r0 AS (INSERT ...) INSERT ...``): one round trip
    and one execution where each statement costs more than its row (a new activation:
    licence, activation record and event). Foreign keys between them hold, checked at
    the statement's end. One by one on other databases."""
    if connection.vendor != "postgresql":
        for model, values in rows:
            insert_row(model, **values)
        return
    sql = _insert_rows_sql(tuple((model, tuple(values)) for model, values in rows))
    params = [p for model, values in rows for p in _params(model, values)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@functools.cache
def _insert_rows_sql(shapes: tuple[tuple[type[Model], tuple[str, ...]], ...]) -> str:
    *first, last = (_insert_sql(model, names) for model, names in shapes)
    if not first:
        return last
    ctes = ", ".join(f"r{n} AS ({sql})" for n, sql in enumerate(first))
    return f"WITH {ctes} {last}"


@functools.cache
def _insert_sql(model: type[Model], names: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in names)
    marks = ", ".join(["%s"] * len(names))
    # Names from the model's metadata only; every value is bound.
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})"  # noqa: S608


def insert_rows_after(
    guard: str,
    guard_params: list[Any],
    *rows: tuple[type[Model], dict[str, Any]],
    expressions: dict[tuple[type[Model], str], str] | None = None,
) -> tuple | None:
    """PostgreSQL only: ``guard`` (an UPDATE ... RETURNING one row or none) and the rows
    (as :func:`insert_rows` takes them) in one statement, the rows written only when the
    guard returned its row; that row, or None when it returned none and nothing was
    written. Outside a transaction the statement commits alone: no BEGIN and COMMIT round
    trips, and a row the guard locked is held only until that commit.

    ``expressions`` computes a column from the guard's row instead of binding its value
    as is: ``{(Event, "data"): "jsonb_set(%s, '{n}', to_jsonb(guard.n))"}`` (the ``%s``
    is the column's value)."""
    expressions = expressions or {}
    shapes = tuple((model, tuple(values)) for model, values in rows)
    sql = _guarded_sql(guard, shapes, tuple(sorted(expressions.items(), key=repr)))
    params = list(guard_params) + [p for model, values in rows for p in _params(model, values)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


@functools.cache
def _guarded_sql(
    guard: str,
    shapes: tuple[tuple[type[Model], tuple[str, ...]], ...],
    expressions: tuple[tuple[tuple[type[Model], str], str], ...],
) -> str:
    computed = dict(expressions)
    quote = connection.ops.quote_name
    inserts = []
    for model, names in shapes:
        fields = [model._meta.get_field(name) for name in names]
        columns = ", ".join(quote(field.column) for field in fields)
        # Bound values carry their column's type (without its length or scale: the
        # assignment checks those as an INSERT ... VALUES would, never truncating).
        values = []
        for field in fields:
            bound = "%s::" + re.sub(r"\(.*?\)", "", field.cast_db_type(connection))
            values.append(computed.get((model, field.name), "%s").replace("%s", bound, 1))
        inserts.append(
            f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "  # noqa: S608 - metadata
            f"SELECT {', '.join(values)} FROM guard"
        )
    ctes = ", ".join(f"r{n} AS ({sql})" for n, sql in enumerate(inserts))
    return f"WITH guard AS ({guard}), {ctes} SELECT * FROM guard"  # noqa: S608 - ours
