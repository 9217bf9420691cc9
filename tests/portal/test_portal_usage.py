"""The portal's usage panel (issue 41): the pooled allowance says it is pro-rated to the
period's days, and an SKU over it shows the overage charge the invoice would bring if
the period closed now: the invoice's own metered lines, to the cent."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest

from billing.ingestion import usage_ingest
from billing.services import invoice_issue
from config.admin.display import money
from licensing.services import license_issue
from portal import selectors
from tests.factories import CustomerFactory
from tests.portal.conftest import account_for

pytestmark = pytest.mark.django_db


def test_allowance_is_pro_rated_and_the_overage_estimate_is_the_invoice_s(client, server_clock):
    customer = CustomerFactory(name="Nordlicht Sicherheitstechnik und Videoanalyse GmbH")
    midnight = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(midnight - dt.timedelta(days=3)):
        lic = license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id="nl-brm-000")
    account = account_for(customer, "lizenzen@nordlicht.example")
    client.force_login(account.user)
    with server_clock.at(midnight):
        start = int(midnight.timestamp()) - 7200
        answer = usage_ingest(token=lic.token, device_id=lic.device_id, records=[
            {"period_start": start, "period_end": start + 3600, "inferences": 13_690_344,
             "frames": 0, "stream_seconds": 0, "events": 0},
        ])  # fmt: skip
        assert answer["accepted"] == 1, answer
        period = selectors.usage_this_period(customer)
        page = client.get("/portal/").content.decode()
        invoice = invoice_issue(customer_id=customer.pk, period_days=30, end=midnight)
    assert period.days == 30
    metered = [line for line in invoice.lines.all() if line.kind == "metered_overage"]
    assert metered, "the usage is over the allowance"
    billed = sum((line.amount for line in metered), Decimal(0))
    assert period.overage_cost["DETECT-STD"] == (billed, invoice.currency)
    usage = page[page.index('id="usage"') :]
    usage = usage[: usage.index("</table>")]
    assert "pro-rated" in usage and "30 days" in usage
    assert re.search(r"Pooled allowance \(30 days, pro-rated\)", usage)
    assert f"≈ {money(billed, invoice.currency)}" in usage
    assert "13,690,344" in usage
