"""The device sets aside exactly the records the service would refuse (issue 21): one
rule on both sides, checked on generated records around every bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.ingestion import _validated
from config.errors import InvalidInput
from devices.bounds import LAST_SECOND, MAX_COUNTER
from devices.spool import RECORD_FIELDS, is_record

EDGES = [-1, 0, 1, MAX_COUNTER - 1, MAX_COUNTER, MAX_COUNTER + 1, LAST_SECOND, LAST_SECOND + 1]
VALUE = st.one_of(
    st.sampled_from(EDGES),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=True),
    st.none(),
    st.text(max_size=3),
)
EDGE = st.one_of(st.sampled_from(EDGES), st.integers(min_value=0, max_value=10**6))
RECORD = st.one_of(
    st.fixed_dictionaries({name: EDGE for name in RECORD_FIELDS}),  # mostly plausible
    st.dictionaries(st.sampled_from(RECORD_FIELDS), VALUE, min_size=5, max_size=6),
)


def service_accepts(record) -> bool:
    try:
        _validated([record])
    except InvalidInput:
        return False
    return True


@settings(max_examples=600, derandomize=True, deadline=None)
@given(RECORD)
def test_device_and_service_agree_on_every_record(record):
    assert is_record(record) == service_accepts(record)


def test_the_generated_records_reach_both_verdicts():
    seen = set()

    @settings(max_examples=200, derandomize=True, deadline=None)
    @given(RECORD)
    def collect(record):
        seen.add(service_accepts(record))

    collect()
    assert seen == {True, False}
