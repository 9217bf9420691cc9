"""Property-based fuzzing of the /v1 API against its own OpenAPI schema (schemathesis).

A real gunicorn serves the test database with the docs on (``SVC_PUBLIC_DOCS=1``); the
schema is loaded from its ``/openapi.json`` and every operation gets generated requests,
valid and invalid, checked by all of schemathesis's checks: no 5xx, every status, body,
content type and header as documented, schema-valid requests accepted and invalid ones
refused, credentials enforced. Some data is seeded first (customers, a batch, an
activated camera, licences, an issued invoice), and valid requests mostly take their ids
from it, so that answers other than 404 are reached and checked: every operation but the
registration of offline licences must have succeeded at least once.

A 5xx is a bug of the service: its traceback is in the server log (``server-*.log`` in
the test's temporary directory).

The schema states every rule of a request's shape the service checks (lengths, patterns,
printable strings, ranges, enums, which fields go together), so a request it admits is
refused only for what it names (``CONTENT_REFUSALS``, each with the words of its answer
and why no schema can say it), and one it does not admit is refused with a 4xx
``{"detail"}``. The run counts both mistakes (``rejected-valid``, ``accepted-invalid``)
and prints them with the number of cases; both must be 0.

Deterministic (derandomized, a fixed seed) and bounded: at most ``MAX_EXAMPLES`` fuzzed
cases per operation besides schemathesis's coverage cases.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
import schemathesis
from django.db import connection
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import AcceptedNegativeData, FailureGroup
from schemathesis.core.jsonschema import make_validator
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

from billing.issuing import invoice_issue
from billing.limits import start_of_day
from config.api.schema import PRINTABLE
from customers.services import customer_create
from devices import offline
from events.models import Event
from events.services import webhook_create
from licensing.models import License
from licensing.revocations import answers_forget
from licensing.selectors import fleet_page
from licensing.services import addon_add, batch_issue, license_issue
from licensing.services.activation import unit_activate
from licensing.services.renewals import license_renew
from portal.services import customer_key_create, invitation_create
from tests.conftest import LiveService, start_gunicorn, stop_gunicorn
from tests.history import rewritten

# Once, on PostgreSQL (make test-pg, which CI runs): the answers are the same code's on
# SQLite, and the fuzz is the longest test of the suite.
pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the API fuzz runs on PostgreSQL (make test-pg)"
    ),
]

# Examples per operation and generation mode: 25 in CI, about 4,300 cases, most of the
# time drawing them (schemathesis builds a body's strategies anew for each case: 50 took
# 290 s of the PostgreSQL pass's 2 cores). A deeper run: FUZZ_MAX_EXAMPLES=500, and
# FUZZ_SEED=N for other cases than the derandomized ones.
MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "25"))
SEED = os.environ.get("FUZZ_SEED")
DEVICE = "fuzz-cam-0001"
ABSENT = object()  # a seeded value that removes the field from a valid request

# A request the schema admits may still be refused for what it names, not for its shape:
# per operation, the 400s a valid request may get, as patterns of their detail, and why
# the schema cannot say it. Any other 400 to a valid request is a rule the schema lacks.
# (404 for an unknown id, 409 for a conflict and 401/403 for credentials are answers to
# valid requests on every operation: POSITIVE_STATUSES.)
_CURSOR = r"cursor: not a cursor of this listing"  # opaque: the service's own encoding
# A cursor with before: query parameters cannot exclude each other in OpenAPI 3.0.
_CURSOR_BEFORE = r"cursor and before cannot be used together"
_PAGE_CURSOR = r"cursor must be a next_cursor this API gave"
_SKU = r"unknown SKU "  # the catalogue is data (spec §7: 400), not a fixed enum
_TAX_IDENTITY = (r"country must be an ISO 3166", r"vat_id ", r"a VAT id needs the customer's")
_ADDON = r"SKU \S+ of (batch|licence) \S+ has no add-on |add-on \S+ of SKU \S+ is no longer"
_ADDON_LICENSE = r"licence \S+ (is a unit licence|was minted offline)"
_FILE = r"BAD_REQUEST: "  # a damaged or truncated air-gapped file (issue 44)
CONTENT_REFUSALS: dict[str, tuple[str, ...]] = {
    "POST /v1/admin/batches": (_SKU, r"identity_policy "),
    "POST /v1/admin/licenses": (_SKU,),
    # A token is a signed document: its form, signature, key and claims are its content;
    # only DRF's field errors ("token: ...") and unknown fields are its shape.
    "POST /v1/admin/licenses/register": (r"(?!token: |unknown field)",),
    "POST /v1/admin/invoices": (r"customer \S+ owes nothing for ",),  # the records held
    # One record's fields compared with each other (JSON Schema compares none).
    "POST /v1/usage": (r"records\[\d+\]: period_end \(\d+\) must be after period_start",),
    "POST /v1/admin/seats/release": (r"licence \S+ is a ",),  # a licence that is no unit
    "GET /v1/admin/fleet": (_CURSOR, _CURSOR_BEFORE),
    "GET /v1/customer/fleet": (_CURSOR, _CURSOR_BEFORE),
    "GET /v1/customer/batches": (_PAGE_CURSOR,),
    "GET /v1/customer/usage": (_PAGE_CURSOR,),
    "POST /v1/admin/renew": (
        # The key may come as a header instead: no schema ties a header to a body field.
        r"idempotency_key is required",
        # A POST without any body: the schema's body, all of whose fields are optional
        # (one of batch_id and license_id is a oneOf), is not marked required, so
        # schemathesis may send none; the service asks for what to renew.
        r"name what to renew: batch_id",
        r"idempotency_key in the body and the Idempotency-Key header differ",
        # What the licence is and when it ends (data): a unit or offline licence, a
        # perpetual one, a term too short for its grace or past 9999 once renewed again.
        r"licence \S+ (is a unit licence|was minted offline)",
        r"(batch|licence) \S+ (is perpetual|is of SKU .*, which has no default term|ended at "
        r"\d+ and is in its grace period|would end after the year 9999)",
    ),
    # The quote of a renewal refuses what the renewal would (no idempotency key there).
    "POST /v1/admin/renew/quote": (
        r"name what to renew: batch_id",
        r"licence \S+ (is a unit licence|was minted offline)",
        r"(batch|licence) \S+ (is perpetual|is of SKU .*, which has no default term|ended at "
        r"\d+ and is in its grace period|would end after the year 9999)",
    ),
    # A customer's tax identity (issue 43): a country that is no ISO 3166 code, a VAT id
    # whose check digits or country are wrong, or without a country to check it against.
    "POST /v1/admin/customers": _TAX_IDENTITY,
    "PATCH /v1/admin/customers/{customer_id}": _TAX_IDENTITY,
    # The catalogue is data: which add-ons a SKU has; and what the licence is (issue 42).
    "POST /v1/admin/batches/{batch_id}/addons": (_ADDON,),
    "POST /v1/admin/licenses/{license_id}/addons": (_ADDON, _ADDON_LICENSE),
    "DELETE /v1/admin/licenses/{license_id}/addons/{addon}": (_ADDON_LICENSE,),
    # DNS and the address it gives (and http:// where SVC_WEBHOOK_ALLOW_HTTP is off).
    "POST /v1/admin/webhooks": (r"the host ", r"url must be https:// \(set"),
    # Issue 45 and 43, merged this stop: rules their schemas do not state yet (the
    # component names and digests, the identity policy's grammar, a credit line's and a
    # payment's amount and digits); each is a 400 naming the field, and the fuzz still
    # checks these operations for everything else (no 5xx, shapes, credentials). Stating
    # them in the schema is open work.
    "POST /v1/activate": (r"components ",),
    "GET /v1/license": (r"components ",),
    "POST /v1/admin/invoices/{number}/credit-note": (r"lines", r"line \d+"),
    "POST /v1/admin/invoices/{number}/credit-note/draft": (r"lines", r"line \d+"),
    "POST /v1/admin/invoices/{number}/payments": (r"amount", r"paid_on ", r"a correcting "),
    # A bank statement is a document: its XML is its content.
    "POST /v1/admin/payments/camt053": (r"bank statement refused: ",),
    # An air-gapped camera's file is a sealed document: its seal and fields are content.
    "POST /v1/admin/offline/activations": (_FILE,),
    "POST /v1/admin/offline/usage": (_FILE,),
    "POST /v1/customer/offline/activations": (_FILE,),
    "POST /v1/customer/offline/usage": (_FILE,),
}
POSITIVE_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "429"]
NEGATIVE_STATUSES = ["400", "401", "403", "404", "405", "409", "413", "415", "429"]
# Needs a licence minted offline under a registered air-gap key; 400 and 409 are fuzzed.
NEVER_SUCCEEDS = {"POST /v1/admin/licenses/register"}
# The customer key's customer is the one the fuzzed POST /v1/admin/suspend holds: a new
# seat is then refused (403 naming the hold, as POST /v1/activate does); 400 is fuzzed,
# and tests/test_offline_exchange.py answers it 200.
NEVER_SUCCEEDS |= {"POST /v1/customer/offline/activations"}
# The demo writes only on a development server (SVC_DEBUG): 404 here, by design. A clone
# suspicion and a bank statement that matches are not seeded (tests/licensing/
# test_identity.py and tests/billing/test_camt053.py answer them 200).
# The seeded invoice's preview of a credit note may come after the fuzzed credit note that
# credits it in full (the same half, one invoice): 409, nothing remains
# (tests/billing/test_partial_credit_notes.py answers previews 200).
NEVER_SUCCEEDS |= {
    "POST /v1/admin/invoices/{number}/credit-note/draft",
    "POST /v1/admin/demo",
    "POST /v1/admin/clones/{suspicion_id}/revoke-copy",
    "POST /v1/admin/payments/camt053",
}
# gunicorn's defaults (limit_request_line, limit_request_field_size), in bytes.
GUNICORN_REQUEST_LINE = 4094
GUNICORN_FIELD_SIZE = 8190


@dataclass
class Seeded:
    """The live server, the data seeded for it, and what the fuzzing sent."""

    service: LiveService
    # Per operation: {location: {name: value}} a valid request may take instead.
    values: dict[str, dict[str, dict[str, Any]]]
    unit_token: str
    customer_key: str
    operations: set[str] = field(default_factory=set)  # as the schema documents them
    cases: Counter = field(default_factory=Counter)  # (operation, status): requests
    modes: Counter = field(default_factory=Counter)  # positive / negative: requests
    refused_for_content: Counter = field(default_factory=Counter)  # (operation, detail)
    # Per operation: seconds of its cases, drawing included (each case's from the end of
    # the one before), printed with the answers: where the fuzz's time goes.
    seconds: Counter = field(default_factory=Counter)
    clock: float = field(default_factory=time.perf_counter)
    # (operation, status, what was sent) of a valid request refused, an invalid one let in
    mistakes: dict[str, list[str]] = field(
        default_factory=lambda: {"rejected-valid": [], "accepted-invalid": []}
    )


def _request(batch) -> str:
    return offline.request_text(
        batch_token=batch.license.token, device_id="fuzz-air-0", source="explicit",
        weak=False, nonce="fuzz", now=0,
    )  # fmt: skip


def _usage(unit, device_id: str) -> str:
    return offline.export_text(
        token=unit.token, device_id=device_id, license_id=unit.license_id, nonce="fuzz",
        records=[], now=0,
    )  # fmt: skip


def _seed() -> tuple[dict[str, dict[str, dict[str, Any]]], str, str]:
    customer = customer_create(name="Fuzz Cameras", kind="oem")
    batch = batch_issue(customer_id=customer.id, sku="VISION-PRO", units=5000)
    unit = unit_activate(batch_token=batch.license.token, device_id=DEVICE)
    dead = unit_activate(batch_token=batch.license.token, device_id="fuzz-cam-dead")
    # Issued three days ago: the customer's next invoice (up to today) has it to bill.
    direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="fuzz-cam-0002")
    with rewritten():
        License.objects.filter(pk=direct.pk).update(
            issued_at=direct.issued_at - dt.timedelta(days=3)
        )
    to_revoke = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="fuzz-cam-0003")
    # An issued invoice, to be credited: a direct licence of last week, billed up to today.
    billed = customer_create(name="Fuzz Billing", kind="end_user")
    old = license_issue(customer_id=billed.id, sku="DETECT-STD", device_id="fuzz-cam-0004")
    with rewritten():
        License.objects.filter(pk=old.pk).update(issued_at=old.issued_at - dt.timedelta(days=7))
    invoice = invoice_issue(customer_id=billed.id, period_days=30, end=start_of_day(old.issued_at))
    # The camera's batch renewed: GET /v1/license answers its renewed licence (200) to the
    # token it was activated with; another batch for the fuzzed renewals.
    license_renew(idempotency_key="fuzz-seed", batch_id=batch.id)
    renewable = batch_issue(customer_id=customer.id, sku="DETECT-STD", units=10)
    # Add-ons (issue 42) on the camera's batch and the direct licence, for their removal.
    addon_add(addon="anpr", batch_id=batch.id)
    addon_add(addon="streams-4", license_id=direct.id)
    # Two trial batches with a camera on each: one to convert (converted again: the same
    # answer), one only ever quoted (a converted batch's quote is a 409).
    converted, quoted = (
        batch_issue(customer_id=customer.id, sku="DETECT-STD", units=10, trial_days=30)
        for _ in range(2)
    )
    for trial, camera in ((converted, "fuzz-cam-trial-1"), (quoted, "fuzz-cam-trial-2")):
        unit_activate(batch_token=trial.license.token, device_id=camera)
    # Webhook endpoints on loopback (the server allows it here); the activations above
    # wrote events to send again. One endpoint to delete, one for the rest.
    kept = webhook_create(url="http://127.0.0.1:9/kept", events=["*"])
    doomed = webhook_create(url="http://127.0.0.1:9/doomed", events=["*"])
    event = Event.objects.order_by("id").first()
    hook_path = {"path_parameters": {"webhook_id": kept.pk}}
    # A read-only key of the billed customer: its invoice and licence are there to read.
    # With write access: it may also answer the billed customer's air-gapped files.
    _row, customer_key = customer_key_create(
        customer_id=billed.id, name="fuzz", created_by="t", write=True
    )
    billed_batch = batch_issue(customer_id=billed.id, sku="VISION-PRO", units=100)
    billed_unit = unit_activate(batch_token=billed_batch.license.token, device_id="fuzz-air-b")
    billed_invoice = {"path_parameters": {"number": invoice.number}}
    # Another key for the operators to revoke, and a pending invitation to withdraw.
    doomed_key, _ = customer_key_create(customer_id=billed.id, name="doomed", created_by="t")
    invitation, _link = invitation_create(
        customer_id=customer.id, email="fuzz@example.com", link_base="http://127.0.0.1:9/i/"
    )
    values = {
        "POST /v1/admin/webhooks": {
            "body": {"url": "http://127.0.0.1:9/hook", "customer_id": customer.id}
        },
        "GET /v1/admin/webhooks/{webhook_id}": hook_path,
        "DELETE /v1/admin/webhooks/{webhook_id}": {"path_parameters": {"webhook_id": doomed.pk}},
        "POST /v1/admin/webhooks/{webhook_id}/rotate-secret": hook_path,
        "POST /v1/admin/webhooks/{webhook_id}/enable": hook_path,
        "POST /v1/admin/webhooks/{webhook_id}/redeliver": {
            **hook_path,
            "body": {"event_id": event.event_id},
        },
        "POST /v1/activate": {"body": {"batch_token": batch.license.token}},
        "POST /v1/usage": {"body": {"device_id": DEVICE}},
        "POST /v1/admin/batches": {"body": {"customer_id": customer.id, "sku": "VISION-PRO"}},
        "POST /v1/admin/licenses": {"body": {"customer_id": customer.id, "sku": "DETECT-STD"}},
        "POST /v1/admin/licenses/register": {"body": {"token": direct.token}},
        "POST /v1/admin/revoke": {"body": {"license_id": to_revoke.id}},
        # One of licence, batch and customer: the billed customer, named alone.
        "POST /v1/admin/suspend": {
            "body": {"customer_id": billed.id, "license_id": ABSENT, "batch_id": ABSENT}
        },
        "POST /v1/admin/reinstate": {
            "body": {"customer_id": billed.id, "license_id": ABSENT, "batch_id": ABSENT}
        },
        "POST /v1/admin/seats/release": {"body": {"license_id": dead.license_id}},
        "POST /v1/admin/invoices": {"body": {"customer_id": customer.id}},
        # One of batch_id and license_id: the seeded batch, and no licence beside it.
        # A renewal needs its idempotency key, in the body or the header, not both: one
        # fixed key for the seeded batch (the same request again answers the same renewal).
        "POST /v1/admin/renew": {
            "body": {"batch_id": renewable.id, "license_id": ABSENT, "idempotency_key": "fuzz"},
            "headers": {"Idempotency-Key": ABSENT},
        },
        "POST /v1/admin/renew/quote": {"body": {"batch_id": renewable.id, "license_id": ABSENT}},
        # The batch's term as issued (a term given differs from the first conversion's).
        "POST /v1/admin/batches/{batch_id}/convert": {
            "path_parameters": {"batch_id": converted.id},
            "body": {"term_days": ABSENT},
        },
        "POST /v1/admin/batches/{batch_id}/convert/quote": {
            "path_parameters": {"batch_id": quoted.id}
        },
        "GET /v1/license": {"query": {"device_id": DEVICE}},
        "GET /v1/admin/batches/{batch_id}": {"path_parameters": {"batch_id": batch.id}},
        "GET /v1/admin/batches/{batch_id}/addons": {"path_parameters": {"batch_id": batch.id}},
        "POST /v1/admin/batches/{batch_id}/addons": {
            "path_parameters": {"batch_id": batch.id},
            "body": {"addon": "anpr"},
        },
        "DELETE /v1/admin/batches/{batch_id}/addons/{addon}": {
            "path_parameters": {"batch_id": batch.id, "addon": "anpr"}
        },
        "GET /v1/admin/licenses/{license_id}/addons": {
            "path_parameters": {"license_id": direct.id}
        },
        "POST /v1/admin/licenses/{license_id}/addons": {
            "path_parameters": {"license_id": direct.id},
            "body": {"addon": "streams-4"},
        },
        "DELETE /v1/admin/licenses/{license_id}/addons/{addon}": {
            "path_parameters": {"license_id": direct.id, "addon": "streams-4"}
        },
        "GET /v1/admin/customers/{customer_id}": {"path_parameters": {"customer_id": customer.id}},
        "GET /v1/admin/usage/{license_id}": {"path_parameters": {"license_id": unit.license_id}},
        "GET /v1/admin/invoice/{customer_id}": {"path_parameters": {"customer_id": customer.id}},
        "POST /v1/admin/invoices/{number}/credit-note": {
            "path_parameters": {"number": invoice.number}
        },
        # Issue 43: previews of a credit note, and the invoice's payments.
        "POST /v1/admin/invoices/{number}/credit-note/draft": {
            "path_parameters": {"number": invoice.number},
            "body": {"reason": "fuzz preview", "lines": ABSENT, "rebill": ABSENT},
        },
        "GET /v1/admin/invoices/{number}/payments": {"path_parameters": {"number": invoice.number}},
        "POST /v1/admin/invoices/{number}/payments": {
            "path_parameters": {"number": invoice.number},
            "body": {"amount": "1.00", "paid_on": ABSENT, "note": ABSENT},
        },
        "GET /v1/admin/invoices/{number}": {"path_parameters": {"number": invoice.number}},
        "GET /v1/admin/invoices/{number}.pdf": {"path_parameters": {"number": invoice.number}},
        "GET /v1/admin/invoices/{number}.xml": {"path_parameters": {"number": invoice.number}},
        "PATCH /v1/admin/customers/{customer_id}": {"path_parameters": {"customer_id": billed.id}},
        "POST /v1/admin/customers/{customer_id}/users": {
            "path_parameters": {"customer_id": customer.id}
        },
        "GET /v1/admin/customers/{customer_id}/users": {
            "path_parameters": {"customer_id": customer.id}
        },
        "GET /v1/admin/customer-keys": {"query": {"customer_id": billed.id}},
        "POST /v1/admin/customer-keys/{prefix}/revoke": {
            "path_parameters": {"prefix": doomed_key.prefix}
        },
        "POST /v1/admin/invitations/{invitation_id}/withdraw": {
            "path_parameters": {"invitation_id": str(invitation.pk)}
        },
        "GET /v1/customer/invoices/{number}": billed_invoice,
        "GET /v1/customer/invoices/{number}.pdf": billed_invoice,
        "GET /v1/customer/invoices/{number}.xml": billed_invoice,
        "GET /v1/customer/usage": {"query": {"license_id": old.id, "cursor": ABSENT}},
        "GET /v1/customer/fleet": {"query": {"batch_id": ABSENT, "cursor": ABSENT}},
        "GET /v1/customer/batches": {"query": {"cursor": ABSENT}},
        # Files of air-gapped cameras (issue 44): a request for each customer's batch, and
        # usage files of each one's unit (no records: the fuzzed ones are the field's).
        "POST /v1/admin/offline/activations": {"body": {"request": _request(batch)}},
        "POST /v1/customer/offline/activations": {"body": {"request": _request(billed_batch)}},
        "POST /v1/admin/offline/usage": {"body": {"usage": _usage(unit, DEVICE)}},
        "POST /v1/customer/offline/usage": {"body": {"usage": _usage(billed_unit, "fuzz-air-b")}},
        "GET /v1/admin/fleet": {
            "query": {
                "customer_id": customer.id,
                "batch_id": batch.id,
                # After the batch's newest unit: the page of the other one.
                "cursor": fleet_page(batch_id=batch.id, limit=1).next_cursor,
            }
        },
    }
    return values, unit.token, customer_key


@pytest.fixture
def seeded(transactional_db, tmp_path, settings):
    settings.SVC_WEBHOOK_ALLOW_HTTP = settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    values, unit_token, customer_key = _seed()
    answers_forget()
    service = start_gunicorn(
        tmp_path,
        SVC_PUBLIC_DOCS="1",
        # Every ignored_auth probe sends a wrong key; it must not lock loopback out.
        SVC_ADMIN_KEY_FAILURES="1000000",
        SVC_WEBHOOK_ALLOW_HTTP="1",
        SVC_WEBHOOK_ALLOW_PRIVATE="1",
        SVC_CUSTOMER_API_RATE="1000000",
    )
    target = Seeded(
        service=service, values=values, unit_token=unit_token, customer_key=customer_key
    )
    try:
        yield target
    finally:
        stop_gunicorn(service)
        by_operation: dict[str, Counter] = {}
        for (label, status), count in target.cases.items():
            by_operation.setdefault(label, Counter())[status] += count
        print(f"\n{sum(target.cases.values())} requests to {len(by_operation)} operations")
        costly = ", ".join(f"{label} {s:.1f} s" for label, s in target.seconds.most_common(30))
        print(f"{sum(target.seconds.values()):.0f} s; costliest: {costly}")
        for label, statuses in sorted(by_operation.items()):
            answers = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items()))
            print(f"  {label}  {answers}")
        print("refused for what they name (valid by the schema):")
        for (label, detail), n in sorted(target.refused_for_content.items()):
            print(f"  {label}  {n}: {detail}")
        modes = ", ".join(f"{mode} {n}" for mode, n in sorted(target.modes.items()))
        print(
            f"cases: {sum(target.modes.values())} ({modes}); "
            + "; ".join(f"{kind}: {len(seen)}" for kind, seen in target.mistakes.items())
        )
        for kind, seen in target.mistakes.items():
            for line in seen[:20]:
                print(f"  {kind}: {line}")
    if target.cases:  # the fuzzing ran: it reached past the 4xx of every operation
        never = {
            label
            for label in target.operations
            if not any(200 <= status < 300 for status in by_operation.get(label, ()))
        }
        assert never <= NEVER_SUCCEEDS, f"never answered 2xx: {sorted(never)}"
        assert target.mistakes == {"rejected-valid": [], "accepted-invalid": []}


# Ids are documented with the format "printable" (config.api.schema): str.isprintable, that
# is no character of the Unicode categories C (control, format, surrogate, private use,
# unassigned) or Z (separators) but the space; and not only spaces.
schemathesis.openapi.format(
    PRINTABLE,
    st.text(
        st.characters(exclude_categories=("C", "Z"), include_characters=" "), min_size=1
    ).filter(str.strip),
)


def _half(label: str) -> int:
    """Which of the two tests fuzzes an operation: a stable hash of its label, so that
    two workers fuzz the API side by side, each against its own server and seed."""
    return zlib.crc32(label.encode()) % 2


def _api_schema(seeded: Seeded, half: int):
    """The schema of the live server; ``half`` (0 or 1) names the operations this test
    fuzzes (:func:`_half`; the filter itself is the lazy schema's include below, as
    schemathesis's pytest plugin replaces a fixture schema's own filters)."""
    config = schemathesis.Config.from_dict(
        {
            **({"seed": int(SEED)} if SEED else {}),
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
            "checks": {
                "positive_data_acceptance": {"expected-statuses": POSITIVE_STATUSES},
                "negative_data_rejection": {
                    "enabled": True,
                    "expected-statuses": NEGATIVE_STATUSES,
                },
            },
            "auth": {
                "openapi": {
                    "AdminKey": {"api_key": seeded.service.admin_key},
                    "UnitToken": {"bearer": seeded.unit_token},
                    "CustomerKey": {"bearer": seeded.customer_key},
                }
            },
        }
    )
    schema = schemathesis.openapi.from_url(f"{seeded.service.url}/openapi.json", config=config)
    seeded.operations = {
        label
        for label in (result.ok().label for result in schema.get_all_operations())
        if _half(label) == half
    }

    validators: dict[tuple[str, str | None], Any] = {}

    @schema.hook
    def flatmap_case(context, case):
        """A valid request takes the seeded values: all of them half of the time, else
        each one half of the time (drawn, so shrunk)."""
        known = seeded.values.get(f"{case.method.upper()} {case.path}")
        if not known or case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
            return st.just(case)
        names = [
            (location, name)
            for location, items in known.items()
            for name in items
            if isinstance(getattr(case, location), dict)
        ]

        def substitute(flags: list[bool]) -> Any:
            for (location, name), flag in zip(names, flags, strict=True):
                if flag and known[location][name] is ABSENT:
                    getattr(case, location).pop(name, None)
                elif flag:
                    getattr(case, location)[name] = known[location][name]
            return case

        def still_valid(case) -> bool:
            # A value seeded into a body whose fields go together (one of batch_id and
            # license_id...) may make it invalid: such a case stays as drawn.
            if not isinstance(case.body, dict) or "body" not in known:
                return True
            key = (case.operation.label, case.media_type)
            if key not in validators:
                alternative = case.operation.get_body_for_media_type(case.media_type)
                validator_class = case.operation.schema.adapter.jsonschema_validator_cls
                validators[key] = make_validator(alternative.optimized_schema, validator_class)
            return validators[key].is_valid(case.body)

        def substitute_if_valid(flags: list[bool]) -> Any:
            drawn = {location: dict(getattr(case, location)) for location, _name in names}
            substitute(flags)
            if not still_valid(case):
                for location, items in drawn.items():
                    setattr(case, location, items)
            return case

        every = [True] * len(names)
        some = st.lists(st.booleans(), min_size=len(names), max_size=len(names))
        return st.one_of(st.just(every), some).map(substitute_if_valid)

    return schema


@pytest.fixture
def api_schema_even(seeded):
    return _api_schema(seeded, 0)


@pytest.fixture
def api_schema_odd(seeded):
    return _api_schema(seeded, 1)


def reaches_the_app(case, base_url: str) -> bool:
    """Whether gunicorn hands the request to the service: a request line or a header past
    its limits is answered by gunicorn itself (an HTML 414 or 400), as nginx does in
    production with its own limits; neither is the API's answer to check."""
    sent = case.as_transport_kwargs(base_url=base_url)
    prepared = requests.Request(
        method=sent["method"], url=sent["url"], params=sent["params"], headers=sent["headers"]
    ).prepare()
    line = f"{prepared.method} {prepared.path_url} HTTP/1.1"
    fields = (f"{name}: {value}" for name, value in prepared.headers.items())
    return len(line.encode()) <= GUNICORN_REQUEST_LINE and all(
        len(field.encode("latin-1", "replace")) <= GUNICORN_FIELD_SIZE for field in fields
    )


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request):
    # schemathesis 4.32's pytest integration reads Node._nodeid, which pytest 9.2 no
    # longer has (it keeps the structured id in _id); it only names subtests with it.
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


FUZZ_SETTINGS = settings(
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.django_db(transaction=True)
@(
    schemathesis.pytest.from_fixture("api_schema_even")
    .include(lambda context: _half(context.operation.label) == 0)
    .parametrize()
)
@FUZZ_SETTINGS
def test_api_answers_as_its_schema_says(case, seeded):
    """Half of the operations (:func:`_half` 0)."""
    _answers_as_its_schema_says(case, seeded)


@pytest.mark.django_db(transaction=True)
@(
    schemathesis.pytest.from_fixture("api_schema_odd")
    .include(lambda context: _half(context.operation.label) == 1)
    .parametrize()
)
@FUZZ_SETTINGS
def test_api_answers_as_its_schema_says_odd(case, seeded):
    """The other half (:func:`_half` 1)."""
    _answers_as_its_schema_says(case, seeded)


def _answers_as_its_schema_says(case, seeded: Seeded) -> None:
    assume(reaches_the_app(case, seeded.service.url))
    response = case.call()
    label = f"{case.method.upper()} {case.path}"
    seeded.cases[label, response.status_code] += 1
    now = time.perf_counter()
    seeded.seconds[label] += now - seeded.clock
    seeded.clock = now
    mode = case.meta.generation.mode if case.meta else None
    seeded.modes[mode.value if mode else "explicit"] += 1
    detail = _detail(response)
    if 400 <= response.status_code < 500:
        assert isinstance(detail, str) and detail, (label, response.status_code, _sent(case))
    excluded = []
    if (
        mode == GenerationMode.POSITIVE
        and response.status_code == 400
        and any(re.match(pattern, detail) for pattern in CONTENT_REFUSALS.get(label, ()))
    ):
        seeded.refused_for_content[label, detail[:60]] += 1
        excluded = [positive_data_acceptance]
    try:
        case.validate_response(response, excluded_checks=excluded)
    except FailureGroup as failures:
        sent = f"{label} {response.status_code} {detail[:80]!r} {_sent(case)}"
        for failure in failures.exceptions:
            if isinstance(failure, RejectedPositiveData):
                seeded.mistakes["rejected-valid"].append(sent)
            elif isinstance(failure, AcceptedNegativeData):
                seeded.mistakes["accepted-invalid"].append(sent)
        raise


def _detail(response) -> str:
    if "json" not in response.headers.get("content-type", [""])[0]:
        return ""
    try:
        answer = response.json()
    except ValueError:
        return ""
    return answer.get("detail", "") if isinstance(answer, dict) else ""


def _sent(case) -> str:
    parts = {"path": case.path_parameters, "query": case.query, "body": case.body}
    return " ".join(f"{name}={value!r}"[:200] for name, value in parts.items() if value)
