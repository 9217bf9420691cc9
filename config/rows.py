"""Rows written on a hot path without the ORM's instance machinery."""

from __future__ import annotations

import functools
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
