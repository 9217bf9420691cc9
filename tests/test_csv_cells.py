"""One cell rule for every CSV the project writes (issue 22, item 2): text is inert in a
spreadsheet, numbers stay numbers (svccore.csvformat.cell); and what a device reports
about itself holds no control or format character. Issue 37, item 6: the rule goes by
Unicode category on the NFKC form, so separators before ``=`` and look-alikes of the
formula characters are made inert too."""

from __future__ import annotations

import csv
import functools
import io
import re
import sys
import unicodedata
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from licensing.services.activation import unit_activate
from svccore.csvformat import COLUMNS, cell, write_csv

pytestmark = pytest.mark.django_db

HOSTILE = [
    "=cmd|' /C calc'!A0",
    '=HYPERLINK("http://x","y")',
    "+1+1",
    "-1+1",
    "@SUM(A1)",
    "\t=1",
    "\r=1",
    "  =1",
    "＝1+1",
]


# Issue 37: the 7 of 21 payloads that passed the old rule (a separator before "=", and
# look-alikes), and the compatibility forms of every formula character.
ISSUE_37 = [
    "\u00a0=1+1",  # NO-BREAK SPACE
    "\u2007=1+1",  # FIGURE SPACE
    "\u3000=1+1",  # IDEOGRAPHIC SPACE
    "\u1680=1+1",  # OGHAM SPACE MARK
    '\ufe66HYPERLINK("http://x")',  # SMALL EQUALS SIGN
    "\ufe621+1",  # SMALL PLUS SIGN
    "\u22121+1",  # MINUS SIGN
]
COMPATIBILITY_FORMS = [
    "\uff1d1+1",  # FULLWIDTH EQUALS SIGN
    "\uff0b1+1",  # FULLWIDTH PLUS SIGN
    "\ufe631+1",  # SMALL HYPHEN-MINUS
    "\uff0d1+1",  # FULLWIDTH HYPHEN-MINUS
    "\uff20SUM(A1)",  # FULLWIDTH COMMERCIAL AT
    "\ufe6bSUM(A1)",  # SMALL COMMERCIAL AT
    "\u207c1+1",  # SUPERSCRIPT EQUALS SIGN
    "\u207a1+1",  # SUPERSCRIPT PLUS SIGN
    "\u208b1+1",  # SUBSCRIPT MINUS
    "\u2a75HYPERLINK(1)",  # TWO CONSECUTIVE EQUALS SIGNS
]
# Separators, controls and format characters a spreadsheet may pass over before "=".
LEADERS = ["\u2028", "\u2029", "\u200b", "\ufeff", "\u202e", "\x00", "\x0b", "\x1b", " \u00a0 "]
FORMULA = tuple("=+-@\u2212\t\r\n")


@functools.cache
def _passed_over() -> str:
    """Every code point a formula may hide behind: separators (Z*), controls and format
    characters (Cc, Cf) and whitespace, except tab, CR and LF, which start a formula
    themselves. Built by scanning all of Unicode, independently of the module."""
    return "".join(
        char
        for char in map(chr, range(sys.maxunicode + 1))
        if (char.isspace() or unicodedata.category(char)[0] == "Z"
            or unicodedata.category(char) in ("Cc", "Cf"))
        and char not in "\t\r\n"
    )  # fmt: skip


def _is_formula(text: str) -> bool:
    return unicodedata.normalize("NFKC", text).lstrip(_passed_over()).startswith(FORMULA)


@pytest.mark.parametrize("text", HOSTILE + ISSUE_37 + COMPATIBILITY_FORMS)
def test_a_formula_or_its_look_alike_is_made_inert(text):
    assert cell(text) == "'" + text


@pytest.mark.parametrize("leader", LEADERS)
@pytest.mark.parametrize("formula", ["=1+1", "\uff1d1+1", "\u22121", "@A1"])
def test_a_formula_behind_separators_or_controls_is_made_inert(leader, formula):
    assert cell(leader + formula) == "'" + leader + formula


@pytest.mark.parametrize(
    "text",
    ["1+1", "a=1", "'=1", "\u00a0", "", "\u2010 dash", "\u2013 en dash", "\u00a0x=1", "CUST-0A"],
)
def test_text_that_starts_no_formula_is_unchanged(text):
    assert cell(text) == text


def test_the_finance_export_makes_the_issue_payloads_inert():
    texts = ("customer_name", "description", "sku")
    rows = [dict.fromkeys(COLUMNS, "") | dict.fromkeys(texts, text) for text in ISSUE_37]
    buffer = io.StringIO(newline="")
    write_csv(rows, buffer)
    read = list(csv.DictReader(io.StringIO(buffer.getvalue().lstrip("\ufeff"))))
    assert [[row[name] for name in texts] for row in read] == [
        ["'" + text] * len(texts) for text in ISSUE_37
    ]


_LEADING = st.text(
    st.one_of(
        st.characters(categories=["Zs", "Zl", "Zp", "Cc", "Cf"]),
        st.sampled_from(["\u00a0", "\u2007", "\u3000", "\u1680", " ", "\t", "\r", "\n"]),
    ),
    max_size=3,
)
_START = st.one_of(
    st.sampled_from([*"=+-@\u2212", "\ufe66", "\uff1d", "\ufe62", "\uff0b", "\ufe63", "\uff0d",
                     "\uff20", "\u207c", "\u2a75", "'", "1", "a", "\u2010"]),
    st.characters(),
)  # fmt: skip
_CELLS = st.one_of(
    st.text(max_size=40), st.builds("".join, st.tuples(_LEADING, _START, st.text(max_size=8)))
)


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(_CELLS)
def test_a_text_cell_is_inert_exactly_when_it_could_start_a_formula(text):
    written = cell(text)
    assert written == ("'" + text if _is_formula(text) else text)
    assert not _is_formula(written)
    read = next(csv.reader(io.StringIO(_csv_line([written]))))[0]
    assert read == written


def test_numbers_stay_numbers():
    assert cell(Decimal("-12.50")) == "-12.50"
    assert cell(Decimal("1E+3")) == "1000"
    assert cell(-3) == -3 and cell(0) == 0 and cell(None) == "" and cell(True) == 1


def _csv_line(values) -> str:
    buffer = io.StringIO(newline="")
    csv.writer(buffer, lineterminator="\r\n").writerow(values)
    return buffer.getvalue()


def test_fleet_export_makes_every_reported_text_inert(admin_api, make_batch):
    # A device id holds no tab or CR: those payloads are stripped; the issue's keep their
    # leading separators, which a device may report.
    reported = [text.strip() for text in HOSTILE] + ISSUE_37
    batch = make_batch(units=len(reported))
    for n, text in enumerate(reported):
        unit_activate(
            batch_token=batch.license.token,
            device_id=f"{text}-{n}",
            fingerprint_source=text[:32],
            sdk_version=text[:64],
        )
    response = admin_api.get(f"/v1/admin/fleet.csv?batch_id={batch.id}", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    rows = list(
        csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode("utf-8-sig")))
    )
    assert sorted(row["fingerprint_source"] for row in rows) == sorted(
        "'" + text[:32] for text in reported
    )
    for row in rows:
        for name in ("fingerprint_source", "sdk_version", "device_id"):
            assert row[name].startswith("'") and not _is_formula(row[name]), (name, row[name])
        # a time for people, ISO 8601 UTC, not Unix seconds (issue 41)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["activated_at"])


@pytest.mark.parametrize("field", ["fingerprint_source", "sdk_version"])
@pytest.mark.parametrize("text", ["mac\x1b[2J", "dmi\u202e", "a\x00b", "v1\u200b"])
def test_reported_text_with_control_characters_is_refused(device_api, make_batch, field, text):
    batch = make_batch(units=2)
    body = {"batch_token": batch.license.token, "device_id": "cam-ctl", field: text}
    response = device_api.post("/v1/activate", body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"{field}: ")
    body[field] = "=1+1"  # text, not an instruction: accepted, and inert in exports
    assert device_api.post("/v1/activate", body, format="json").status_code == 200
