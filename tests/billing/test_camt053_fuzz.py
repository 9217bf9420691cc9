"""A bank statement is untrusted input (issue 43): whatever bytes arrive, the CAMT.053
reader answers statements or a StatementError naming the problem, never another
exception; through the API, a 200 or a 400, never a 500."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import camt053
from tests.billing.test_camt053 import v02, v08

SEEDS = [v02("INV-2026-000001", "10.00", "INV-2026-000002", "5.00"), v08("7.50", "INV-2026-000003")]
TAGS = [b"Amt", b"Ccy", b"CdtDbtInd", b"Sts", b"Cd", b"BookgDt", b"Dt", b"DtTm", b"Ntry",
        b"Stmt", b"AcctSvcrRef", b"Ustrd", b"TxDtls", b"Document"]  # fmt: skip
VALUES = [b"", b"-1", b"1e9999", b"NaN", b"0", b"12.3456789", b"\xff\xfe", b"&amp;",
          b"&x;", b"<![CDATA[x]]>", b"9" * 40, b"2026-13-45", b"CRDT", b"DBIT", b"BOOK",
          b"PDNG"]  # fmt: skip


def parsed_or_refused(data: bytes) -> None:
    try:
        for statement in camt053.parse(data):
            for entry in statement.entries:
                assert entry.amount > 0 and len(entry.currency) == 3
                entry.invoice_numbers()
    except camt053.StatementError as problem:
        assert str(problem)


def mutate(seed: bytes, rng: random.Random) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(5)
        if kind == 0 and data:  # flip a byte
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1 and data:  # cut
            start = rng.randrange(len(data))
            del data[start : start + rng.randint(1, 200)]
        elif kind == 2:  # rename a tag
            old, new = rng.choice(TAGS), rng.choice(TAGS)
            data = bytearray(bytes(data).replace(old, new, 1))
        elif kind == 3:  # a hostile value between two tags
            at = bytes(data).find(b">", rng.randrange(max(1, len(data))))
            if at >= 0:
                data[at + 1 : at + 1] = rng.choice(VALUES)
        else:  # duplicate a stretch
            start = rng.randrange(max(1, len(data)))
            data[start:start] = data[start : start + rng.randint(1, 400)]
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_are_read_or_refused(data):
    parsed_or_refused(data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SEEDS), st.integers(min_value=0, max_value=2**32))
def test_mutated_statements_are_read_or_refused(seed, salt):
    parsed_or_refused(mutate(seed, random.Random(salt)))


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",)),
        max_size=300,
    )
)
def test_any_remittance_text_is_searched_safely(text):
    entry = camt053.Entry("x", camt053.Decimal("1"), "EUR", camt053.dt.date(2026, 1, 1),
                          remittance=[text])  # fmt: skip
    for number in entry.invoice_numbers():
        assert number.startswith("INV-") and len(number) == 15


@pytest.mark.django_db
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.sampled_from(SEEDS), st.integers(min_value=0, max_value=2**32))
def test_the_api_answers_200_or_400_never_500(admin_api, seed, salt):
    text = mutate(seed, random.Random(salt)).decode("utf-8", "replace")
    answer = admin_api.post("/v1/admin/payments/camt053", {"statement": text, "dry_run": True},
                            format="json")  # fmt: skip
    assert answer.status_code in (200, 400), answer.content[:300]
    assert "detail" in answer.json() or "entries" in answer.json()
