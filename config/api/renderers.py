"""The API's JSON renderer: DRF's, except that a ``Decimal`` goes out as the exact JSON
number it holds (``630.00``, ``0.0125``), never through a float.

Money is a JSON number on the wire (spec §2.7, contract §6) and written with its
currency's decimals: the serializers shape each amount with :mod:`svccore.money`, this
renderer writes its digits as they are. A client that reads numbers as decimals
(``json.loads(..., parse_float=Decimal)``, as ``svcctl`` does) gets the amount exactly;
one that reads floats gets the same value it always did.

Python's ``json`` cannot write a raw number, so an answer holding a Decimal is written by
:func:`svccore.exactjson.encode`, a small encoder of the same output (separators,
indent, escaping, strict floats) that also knows Decimal. Every other answer (the device
hot paths among them) takes DRF's C-accelerated path as before: its encoder stops at the
first Decimal it meets, and only then is the answer written again by ``encode``. Written here rather
than by simplejson's ``use_decimal``: no new dependency for about forty lines, output
byte-identical to DRF's for everything else, and a non-finite Decimal refused instead of
written as an invalid ``NaN``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework.compat import INDENT_SEPARATORS, LONG_SEPARATORS, SHORT_SEPARATORS
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.utils import encoders

from svccore.exactjson import encode


class _DecimalMet(Exception):
    """The fast encoder met a Decimal: the answer needs the exact one."""


class _FloatFreeEncoder(encoders.JSONEncoder):
    """DRF's encoder, except that it refuses to turn a Decimal into a float."""

    def default(self, obj: Any) -> Any:
        if isinstance(obj, Decimal):
            raise _DecimalMet
        return super().default(obj)


class ExactJSONRenderer(JSONRenderer):
    """DRF's JSONRenderer with Decimals written exactly (see the module's docstring)."""

    encoder_class = _FloatFreeEncoder

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except _DecimalMet:
            pass
        indent = self.get_indent(accepted_media_type, renderer_context or {})
        if indent is None:
            separators = SHORT_SEPARATORS if self.compact else LONG_SEPARATORS
        else:
            separators = INDENT_SEPARATORS
        text = encode(
            data,
            default=encoders.JSONEncoder().default,
            indent=indent,
            separators=separators,
            ensure_ascii=self.ensure_ascii,
            allow_nan=not self.strict,
        )
        # As DRF does: JSON that is also a strict JavaScript subset.
        return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


# --- Answers that are not JSON ---------------------------------------------------------
# A view that answers a PDF or the metrics text writes its own HttpResponse; DRF still
# negotiates first, and with the JSON renderer alone it refused (406) a client that
# accepts only what the view answers (``Accept: application/pdf``, ``Accept: text/plain``).
# Such a view names the media types it writes in its negotiation class; it still renders
# with JSON only (its errors are ``{detail}``), and the OpenAPI schema, which reads the
# view's renderers, keeps its errors JSON.


class _OwnAnswer(BaseRenderer):
    """A media type a view writes itself (an ``HttpResponse``): negotiated, never
    rendered."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        raise NotImplementedError("the view writes this answer itself")


class PDFRenderer(_OwnAnswer):
    media_type = "application/pdf"


class XMLRenderer(_OwnAnswer):
    media_type = "application/xml"


class PrometheusTextRenderer(_OwnAnswer):
    """Prometheus's text exposition format (``text/plain; version=0.0.4``)."""

    media_type = "text/plain"


class OpenMetricsRenderer(_OwnAnswer):
    """OpenMetrics text (``application/openmetrics-text; version=1.0.0``)."""

    media_type = "application/openmetrics-text"


class _AlsoAnswers(DefaultContentNegotiation):
    """DRF's negotiation over the view's renderers and the media types it writes itself
    (``answers``): a client accepting one of those gets the view's answer, its errors as
    JSON; a client accepting none of them still gets 406."""

    answers: tuple[type[_OwnAnswer], ...] = ()

    def select_renderer(self, request, renderers, format_suffix=None):
        own = [answer() for answer in self.answers]
        chosen, media_type = super().select_renderer(request, [*renderers, *own], format_suffix)
        if isinstance(chosen, _OwnAnswer):
            return renderers[0], renderers[0].media_type
        return chosen, media_type


class PDFNegotiation(_AlsoAnswers):
    """A document's PDF: to a client accepting PDF, and to one accepting JSON (svcctl
    asks every route for JSON)."""

    answers = (PDFRenderer,)


class XMLNegotiation(_AlsoAnswers):
    """A document's e-invoice XML (CII or UBL): to a client accepting XML, and to one
    accepting JSON (svcctl asks every route for JSON)."""

    answers = (XMLRenderer,)


class MetricsNegotiation(_AlsoAnswers):
    """``GET /metrics``: to text/plain and OpenMetrics clients (the view picks the
    format), and to JSON-only ones as before."""

    answers = (PrometheusTextRenderer, OpenMetricsRenderer)
