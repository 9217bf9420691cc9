"""One row written on a hot path without the ORM's instance machinery."""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection
from django.db.models import Model


def insert_row(model: type[Model], **values: Any) -> None:
    """INSERT one row of ``model`` from its field values, every column given, without
    building an instance: on the hot path (an activation, its event), an instance and
    its save() cost more than the statement. Values are adapted by their fields, as the
    ORM adapts them."""
    fields = [model._meta.get_field(name) for name in values]
    params = [
        field.get_db_prep_save(v, connection)
        for field, v in zip(fields, values.values(), strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(model, tuple(values)), params)


@functools.cache
def _insert_sql(model: type[Model], names: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in names)
    marks = ", ".join(["%s"] * len(names))
    # Names from the model's metadata only; every value is bound.
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})"  # noqa: S608
