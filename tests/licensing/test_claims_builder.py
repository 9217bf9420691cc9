"""One claims builder: a licence the server issues and one svcctl mints offline from the
same catalogue entry carry the same claims (spec §2.1), bar the licence id."""

from __future__ import annotations

import pytest

from devices import token as codec
from licensing.services import license_issue
from svccore.claims import DEFAULT_ISSUER, catalogue_entry, mint_claims

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("sku", "term_days"), [("DETECT-STD", None), ("ANPR-PERPETUAL", None),
                                                ("API-METERED", 3)])  # fmt: skip
def test_server_and_offline_mint_build_the_same_claims(settings, customer, sku, term_days):
    settings.SVC_ISSUER = DEFAULT_ISSUER
    lic = license_issue(customer_id=customer.id, sku=sku, device_id="cam-1", term_days=term_days)
    served = codec.decode_unverified(lic.token)
    minted = mint_claims(
        entry=catalogue_entry(sku),
        customer=customer.id,
        device_id="cam-1",
        days=term_days,
        now=served["iat"],
    )
    assert {**served, "lic": None, "kid": None} == {**minted, "lic": None, "kid": None}
    assert served["nbf"] == served["iat"]
    assert (served["exp"] == 0) == (sku == "ANPR-PERPETUAL")
