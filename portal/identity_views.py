"""The portal's suspected clones (issue 45): a customer sees which of its cameras' licences
were presented by other hardware, with the evidence, and that an operator decides."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from licensing.clones import clone_rows
from portal.views import _context, customer_page
from svccore import dates


def _utc(seconds: int) -> str:
    return dates.moment(seconds)


@customer_page
def clones(request: HttpRequest) -> HttpResponse:
    rows = clone_rows(customer_id=request.customer.pk, limit=200)
    for row in rows:
        row["detected_at_text"] = _utc(row["detected_at"])
        row["original_text"] = _utc(row["original"]["activated_at"])
    context = _context(request, "Suspected clones", clones=rows)
    return TemplateResponse(request, "portal/clones.html", context)
