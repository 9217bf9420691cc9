"""Path converters of the /v1 routes.

``<id:name>`` is an identifier in a path (customer, batch, licence, invoice number):
anything but ``/`` that is printable. A path whose id holds a control, format or other
non-printable character (``%00``, ``%1B``, ``%E2%80%AE``) matches no route and gets the
JSON 404 of unknown /v1 paths; no id holds one, and PostgreSQL refuses NUL in any text
(a DataError, once a 500).
"""

from __future__ import annotations

from django.urls import register_converter


class IdConverter:
    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        if not value.isprintable():
            raise ValueError("not an id")  # no match: the next route (the JSON 404)
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(IdConverter, "id")
