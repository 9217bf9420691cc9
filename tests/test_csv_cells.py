"""One cell rule for every CSV the project writes (issue 22, item 2): text is inert in a
spreadsheet, numbers stay numbers (svccore.csvformat.cell); and what a device reports
about itself holds no control or format character."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from licensing.services.activation import unit_activate
from svccore.csvformat import FORMULA_START, cell

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


@settings(max_examples=500, derandomize=True, deadline=None)
@given(st.text(max_size=40))
def test_a_text_cell_never_starts_a_formula_and_loses_nothing(text):
    written = cell(text)
    assert not written.lstrip(" ").startswith(FORMULA_START)
    assert written in (text, "'" + text)
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
    batch = make_batch(units=len(HOSTILE))
    for n, text in enumerate(HOSTILE):
        unit_activate(
            batch_token=batch.license.token,
            device_id=f"{text.strip()}-{n}",  # a device id holds no tab or CR
            fingerprint_source=text.strip()[:32],
            sdk_version=text.strip()[:64],
        )
    response = admin_api.get(f"/v1/admin/fleet.csv?batch_id={batch.id}", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    rows = list(
        csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode("utf-8-sig")))
    )
    assert len(rows) == len(HOSTILE)
    for row in rows:
        for name in ("fingerprint_source", "sdk_version", "device_id"):
            value = row[name]
            assert not value.lstrip(" ").startswith(FORMULA_START), (name, value)
        assert row["fingerprint_source"].startswith("'")
        assert row["activated_at"].isdigit()  # numbers are written as numbers


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
