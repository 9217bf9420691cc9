"""The invoice PDF on paper (issue 38, item 6): whatever the number of lines, a line is
never split over two pages, and the last page never holds the payment line alone.
WeasyPrint lays out the shipped template. The lengths tried are those where the content
spills onto a new page (found by bisection, so the test holds whatever the fonts'
metrics), with one line fewer and one more: there the payment line stood alone (at 14
and 36 lines with DejaVu Sans) before it took the table's last line with it."""

from __future__ import annotations

import functools
import io
import re

import pypdf
import weasyprint
from django.template.loader import render_to_string

NUMBER = "INV-2026-000042"


def _context(lines: int) -> dict:
    return {
        "heading": "Invoice", "number": NUMBER, "credit_note": False, "credits": "",
        "reason": "", "issued": "31 January 2026", "due": "14 February 2026", "terms_days": 14,
        "period": "1–31 January 2026", "period_days": 31, "currency": "EUR",
        "seller": {"name": "Vision Licensing B.V.", "address": ["Keizersgracht 1"],
                   "country": "NL", "vat_id": "NL004495445B01", "registration": "KvK 12345678",
                   "iban": "NL91 ABNA 0417 1643 00", "bic": "ABNANL2A",
                   "email": "billing@example.com", "phone": ""},
        "buyer": {"name": "Nordlicht Sicherheitstechnik GmbH", "id": "CUST-NORDLICHT",
                  "address": ["Hafenstraße 1", "20457 Hamburg"], "tax_id": "DE123456789",
                  "contact": "ap@example.com"},
        "lines": [
            {"position": n, "title": f"Unit activations, VISION-PRO-{n}",
             "description": f"batch BATCH-{n:05d}: 12 new cameras", "reference": "",
             "quantity": "12", "unit": "unit", "unit_price": "19.995", "amount": "239.94"}
            for n in range(1, lines + 1)
        ],
        "total": "9,597.60 EUR", "net_total": "9,597.60 EUR", "tax_total": "1,823.54 EUR",
        "gross_total": "11,421.14 EUR",
        "taxes": [{"label": "VAT 19 %", "taxable": "9,597.60", "tax": "1,823.54", "note": ""}],
    }  # fmt: skip


@functools.cache
def _pages(lines: int) -> tuple[str, ...]:
    html = render_to_string("billing/document.html", _context(lines))
    reader = pypdf.PdfReader(io.BytesIO(weasyprint.HTML(string=html).write_pdf()))
    return tuple(page.extract_text() for page in reader.pages)


def _first_with(pages: int, low: int, high: int) -> int:
    """The fewest lines (from ``low`` to ``high``) that make ``pages`` pages."""
    while low < high:
        middle = (low + high) // 2
        if len(_pages(middle)) >= pages:
            high = middle
        else:
            low = middle + 1
    return low


def test_no_line_is_split_and_the_payment_line_never_stands_alone():
    second = _first_with(2, 1, 60)
    third = _first_with(3, second, 120)
    assert len(_pages(third)) == 3  # two page breaks crossed
    for lines in sorted({1, second - 1, second, second + 1, third - 1, third, third + 1}):
        pages = _pages(lines)
        last = pages[-1]
        assert "Please pay 11,421.14 EUR" in last, lines
        # With the payment line: the total and at least the invoice's last line.
        assert "Total due" in last and f"VISION-PRO-{lines}" in last, (lines, last)
        for number, page in enumerate(pages, start=1):
            # Each line's title and its description are on the same page.
            titles = set(re.findall(r"VISION-PRO-(\d+)", page))
            described = set(re.findall(r"BATCH-0*(\d+)", page))
            assert titles == described, (lines, number, titles ^ described)
