"""The dashboard's ledger beside its live tiles (issue 41): the ledger's figures are those
of the last reconciliation, and the page says so in words (not only a timestamp), with
the live figure beside them."""

from __future__ import annotations

import re

import pytest

from billing.services import ledger_check_run
from svccore import dates

pytestmark = pytest.mark.django_db


def test_ledger_says_it_is_not_live_and_when_it_was_reconciled(admin_client):
    before = admin_client.get("/admin/dashboard/").content.decode()
    assert 'id="ledger-never"' in before and 'id="ledger-as-of"' not in before
    check = ledger_check_run()
    page = admin_client.get("/admin/dashboard/").content.decode()
    note = re.search(r'<p class="svc-pad" id="ledger-as-of">(.*?)</p>', page, re.S)[1]
    at = dates.moment(check.checked_at)  # 28 November 2026, 14:05 UTC
    assert "Not live" in note and f"at {at}," in note and "the tiles above are live" in note
    assert re.search(r"inferences now: [\d,]+ in the last 30 days", note)
    assert "Billing ledger as of the last reconciliation" in page
    assert "Inferences (30 days, live)" in page
