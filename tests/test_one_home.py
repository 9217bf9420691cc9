"""One home per rule (issue 24): where a rule is decided once, these tests pin that the
places that use it agree, and that no second copy of it is written."""

from __future__ import annotations

import ast
import datetime as dt
import re
from pathlib import Path

import pytest

from devices import term
from licensing.models import Renewal
from licensing.selectors import expiring_list
from licensing.services.renewals import renewal_end
from svccore.timeunits import DAY, term_state_at, unix

REPO = Path(__file__).resolve().parent.parent
SERVER = ("config", "customers", "licensing", "billing", "audit", "operators", "ratelimits")
SERVER += ("console", "svccore", "svcctl", "bench")

BASIS = {
    term.ACTIVE: Renewal.Basis.BEFORE_EXPIRY,
    term.GRACE: Renewal.Basis.IN_GRACE,
    term.EXPIRED: Renewal.Basis.AFTER_GRACE,
}


def _moments(exp: int, grace_days: int) -> list[float]:
    end = exp + grace_days * DAY
    return [exp - 1, exp, exp + 0.5, exp + 1, end - 1, end, end + 0.5, end + 1]


@pytest.mark.parametrize("grace_days", [0, 1, 14])
def test_the_device_and_renewals_draw_the_grace_boundary_on_the_same_second(grace_days):
    exp = 1_900_000_000
    expires_at = dt.datetime.fromtimestamp(exp, tz=dt.UTC)
    claims = {"nbf": exp - 30 * DAY, "exp": exp, "grace_days": grace_days}
    for moment in _moments(exp, grace_days):
        now = dt.datetime.fromtimestamp(moment, tz=dt.UTC)
        device = term.license_state(claims, moment)
        assert term_state_at(expires_at, grace_days, now) == device, moment
        basis, _ = renewal_end(expires_at=expires_at, grace_days=grace_days, term_days=30, now=now)
        assert basis == BASIS[device], (moment, device, basis)


@pytest.mark.django_db
def test_the_expiring_list_shows_what_a_camera_runs_in_grace_and_nothing_it_refuses(make_batch):
    batch = make_batch(units=2, sku="VISION-PRO")
    grace_days = batch.license.grace_days
    exp = unix(batch.expires_at)
    claims = {"nbf": exp - 30 * DAY, "exp": exp, "grace_days": grace_days}
    for moment in _moments(exp, grace_days):
        now = dt.datetime.fromtimestamp(moment, tz=dt.UTC)
        device = term.license_state(claims, moment)
        listed = {item.batch_id: item for item in expiring_list(days=1, now=now)}
        if device == term.EXPIRED:
            assert batch.id not in listed, moment
        else:
            assert listed[batch.id].in_grace == (device == term.GRACE), (moment, device)


@pytest.mark.django_db
def test_the_grace_event_is_written_on_the_second_a_camera_enters_grace(make_batch):
    """events.scan writes ``license.grace_started`` by the camera's rule: not at the end
    second (still the term), from the next one, never once grace is over."""
    from events.models import Event
    from events.scan import events_scan

    batch = make_batch(units=2, sku="VISION-PRO")
    grace_days = batch.license.grace_days
    exp = unix(batch.expires_at)
    claims = {"nbf": exp - 30 * DAY, "exp": exp, "grace_days": grace_days}
    for moment in _moments(exp, grace_days):
        Event.objects.filter(type="license.grace_started").delete()
        events_scan(now=dt.datetime.fromtimestamp(moment, tz=dt.UTC))
        written = Event.objects.filter(type="license.grace_started").exists()
        assert written == (term.license_state(claims, moment) == term.GRACE), moment


def test_the_records_per_upload_are_one_number_for_the_device_and_the_service():
    """devices.bounds holds it; the device's sync and the service's ingestion use it, and
    no other module writes a number of records per call of its own."""
    from billing import limits
    from devices import bounds, sync

    assert limits.MAX_RECORDS_PER_CALL == sync.MAX_RECORDS_PER_UPLOAD == 1000
    assert limits.MAX_RECORDS_PER_CALL is bounds.MAX_RECORDS_PER_UPLOAD
    written = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in [*_server_modules(), *(REPO / "devices").glob("*.py")]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any("RECORDS" in getattr(t, "id", "") for t in node.targets)
    ]
    home = REPO / "devices" / "bounds.py"
    assert written == [f"devices/bounds.py:{_line_of(home, 'MAX_RECORDS_PER_UPLOAD =')}"]


def test_the_device_refuses_by_one_rule_in_start_require_and_count():
    """devices.engine decides revoked, expired and missing evidence in one place."""
    source = (REPO / "devices" / "engine.py").read_text(encoding="utf-8")
    assert source.count("raise self._refused()") == 1
    assert source.count("raise SyncRequired(self._blocked)") == 1
    assert source.count("self._check_usable(now)") == 3


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_perpetual_term_is_active_for_ever():
    now = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)
    assert term_state_at(None, 14, now) == term.ACTIVE
    assert unix(None) == 0


def _server_modules() -> list[Path]:
    return [
        p
        for package in SERVER
        for p in (REPO / package).rglob("*.py")
        if "migrations" not in p.parts
    ]


def test_time_units_and_conversions_are_written_once():
    """``DAY`` is devices.term's (the device module is vendored alone), ``unix`` is
    svccore.timeunits'; every other module imports them."""
    written = []
    for path in _server_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and node.name == "unix":
                written.append(f"{path.relative_to(REPO)}: def unix")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if node.value.value == 86_400 and any(
                    isinstance(t, ast.Name) and t.id in ("DAY", "DAY_SECONDS") for t in node.targets
                ):
                    written.append(f"{path.relative_to(REPO)}: DAY = 86400")
    assert written == ["svccore/timeunits.py: def unix"]


def test_the_batch_fixture_has_grace_to_test():
    # The expiring-list test above proves nothing on a SKU without grace.
    from svccore import catalogue

    entries = {entry["sku"]: entry for entry in catalogue.load_entries()}
    assert entries["VISION-PRO"]["grace_days"] > 0


@pytest.mark.parametrize(
    ("typed", "stored"),
    [("acme", "CUST-ACME"), (" cust-acme ", "CUST-ACME"), ("CUST-X_1", "CUST-X_1"), ("ß", "ß")],
)
def test_a_typed_customer_id_is_normalised_by_one_rule(typed, stored):
    from svccore import claims, ids

    assert ids.chosen_customer_id(typed) == stored
    if stored.isascii():  # what mint signs into a licence is the id the API stores
        entry = claims.catalogue_entry("DETECT-STD")
        minted = claims.mint_claims(entry=entry, customer=typed, device_id="cam-1")
        assert minted["sub"] == stored


@pytest.mark.django_db
def test_the_api_stores_a_chosen_id_by_the_same_rule(admin_api):
    body = {"name": "Acme Cameras", "kind": "oem", "id": " acme-7 "}
    response = admin_api.post("/v1/admin/customers", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["customer_id"] == "CUST-ACME-7"
    refused = admin_api.post(
        "/v1/admin/customers", {"name": "Other", "kind": "oem", "id": "ß"}, format="json"
    )
    assert refused.status_code == 400


def test_every_device_error_code_is_a_constant_and_documented():
    """devices.Code names each code once; no raise site writes the string (nor a table
    of codes, as activation's refusals once did with codes Code lacked), and the device
    guide lists every one."""
    from devices.errors import Code

    code_shaped = re.compile(r"\A[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\Z")
    literal = []
    for path in (REPO / "devices").glob("*.py"):
        if path.name == "errors.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        # A constant's own value (NAME = "X"), __all__ and getattr(obj, "NAME") name
        # things; any other code-shaped string is a code written out.
        named = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "code":
                if isinstance(node.value, ast.Constant):
                    literal.append(f"{path.name}:{node.value.lineno}")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id == "code" for t in node.targets):
                    literal.append(f"{path.name}:{node.lineno}")
                else:
                    named.add(id(node.value))
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                named.update(id(item) for item in ast.walk(node.value))
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr":
                named.update(id(arg) for arg in node.args[1:2])
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if code_shaped.match(node.value) and id(node) not in named:
                    literal.append(f"{path.name}:{node.lineno} {node.value}")
    assert literal == []
    guide = (REPO / "docs" / "devices.md").read_text()
    assert sorted(c for c in Code.all() if f"`{c}`" not in guide) == []


@pytest.mark.django_db
def test_the_server_and_mint_put_the_same_claims_from_a_catalogue_entry(customer):
    from licensing.services import license_issue
    from svccore import claims

    served = license_issue(
        customer_id=customer.id, sku="VISION-PRO", device_id="cam-1", api_quota=5, max_streams=2
    ).claims
    minted = claims.mint_claims(
        entry=claims.catalogue_entry("VISION-PRO"),
        customer=customer.id,
        device_id="cam-1",
        api_quota=5,
        max_streams=2,
    )
    for name in ("sku", "sub", "dev", "act", "ent", "lim", "grace_days"):
        assert served[name] == minted[name], name
    assert served["exp"] - served["iat"] == minted["exp"] - minted["iat"]


@pytest.mark.django_db
def test_a_number_out_of_bounds_is_refused_in_the_same_words_everywhere(customer):
    from config.errors import InvalidInput
    from licensing.services import license_issue
    from svccore import claims

    with pytest.raises(InvalidInput, match="max_streams must be 1-1,024, not 2,000"):
        license_issue(customer_id=customer.id, sku="VISION-PRO", device_id="c", max_streams=2000)
    with pytest.raises(claims.ClaimsError, match="streams must be 1-1,024, not 2,000"):
        claims.mint_claims(
            entry=claims.catalogue_entry("VISION-PRO"),
            customer="C",
            device_id="c",
            max_streams=2000,
        )


def test_every_home_the_development_guide_names_exists():
    """docs/development.md's table "Where a rule lives" names each home by its dotted
    path; a rename that forgets the guide fails here."""
    import importlib
    import re

    guide = (REPO / "docs" / "development.md").read_text()
    section = guide.split("## Where a rule lives", 1)[1]
    names = {
        name
        for name in re.findall(r"`([a-z_]+(?:\.[A-Za-z_]+)+)(?:\(\))?`", section)
        if name.split(".")[0] in ("devices", "svccore", "config", "billing", "operators")
    }
    assert len(names) >= 12
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                found = getattr(found, attribute)
            break
        else:
            pytest.fail(f"{name} names no module")


def test_the_server_clock_moves_and_stops_for_tests(server_clock):
    """config.clock.now() is the one server clock: a test moves it by an offset, or stops
    it at a moment (an activation ten days ago happens ten days ago, nothing rewritten)."""
    import datetime as dt

    from config import clock

    server_clock(-86_400)
    assert abs((dt.datetime.now(dt.UTC) - clock.now()).total_seconds() - 86_400) < 5
    moment = dt.datetime(2026, 1, 5, 12, 30, 15, 250_000, tzinfo=dt.UTC)
    with server_clock.at(moment):
        assert clock.now() == moment
        assert abs(clock.offset_seconds() - (moment - dt.datetime.now(dt.UTC)).total_seconds()) < 5
    assert abs((dt.datetime.now(dt.UTC) - clock.now()).total_seconds() - 86_400) < 5


@pytest.fixture
def invoiced(customer, server_clock):
    """An issued invoice of three direct DETECT-STD licences issued three days ago."""
    from billing.services import invoice_issue
    from licensing.services import license_issue

    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with server_clock.at(today - dt.timedelta(days=3)):
        for n in range(3):
            license_issue(customer_id=customer.pk, sku="DETECT-STD", device_id=f"cam-{n}")
    return invoice_issue(customer_id=customer.pk, period_days=30)


@pytest.mark.django_db
def test_the_credit_note_preview_shows_the_lines_the_credit_note_is_issued_with(
    admin_client, invoiced
):
    """The console's confirmation page runs billing's credit_note_issue and rolls it back
    (credit_note_draft): what it shows is what is issued, "Credit of INV-..." and the
    batch and licence ids included, and the preview stores nothing."""
    from audit.models import AuditEntry
    from billing.models import DocumentSequence, Invoice
    from billing.services import credit_note_draft
    from config.admin.display import money
    from console.views import _lines_shown

    url = f"/admin/documents/{invoiced.number}/credit-note/"
    preview = admin_client.get(url)
    assert preview.status_code == 200
    drafted_lines = credit_note_draft(number=invoiced.number)["lines"]
    assert not Invoice.objects.filter(kind="credit_note").exists()
    assert not DocumentSequence.objects.filter(series="CN", last__gt=0).exists()
    assert not AuditEntry.objects.filter(action="invoice.credit").exists()

    admin_client.post(url, {"reason": "wrong SKU agreed"})
    note = Invoice.objects.get(kind="credit_note")
    issued = [line.as_dict() for line in note.lines.order_by("position")]
    assert drafted_lines == issued
    assert all(line["description"].startswith(f"Credit of {invoiced.number}: ") for line in issued)
    assert preview.context["lines"] == _lines_shown({"currency": note.currency, "lines": issued})
    assert preview.context["total"] == money(note.total, note.currency)


def test_an_invoice_line_becomes_a_dict_in_one_place():
    """billing.models.InvoiceLine.as_dict is the one line -> dict: no module writes a dict
    of a line's attributes by hand (issuing, drafts, exports and the console once did,
    four times, and the console's copy had dropped the batch and licence ids)."""
    from billing.models import LINE_FIELDS

    written = []
    for path in _server_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Dict):
                continue
            by_key = {
                key.value: value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant)
            }
            copied = [
                key
                for key, value in by_key.items()
                if key in LINE_FIELDS and isinstance(value, ast.Attribute) and value.attr == key
            ]
            if len(copied) >= 4:  # a presentation (the PDF's formatted row) copies fewer
                written.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert written == []


def test_the_fleet_page_maximum_is_one_number():
    """svccore.paging.FLEET_PAGE_MAX: the fleet's selector, its query (admin and portal)
    and svcctl's --limit all take it; no other module writes a fleet limit of its own."""
    from licensing import selectors, serializers
    from portal.serializers import CustomerFleetQuery
    from svccore.paging import FLEET_PAGE_MAX
    from svcctl.commands import base

    assert selectors.FLEET_MAX is base.FLEET_LIMIT_MAX is FLEET_PAGE_MAX
    for query in (serializers.FleetQuery, CustomerFleetQuery):
        assert query().fields["limit"].max_value == FLEET_PAGE_MAX
    written = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in [*_server_modules(), *(REPO / "portal").rglob("*.py")]
        if "migrations" not in path.parts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any(_a_fleet_maximum(getattr(t, "id", "")) for t in node.targets)
    ]
    home = REPO / "svccore" / "paging.py"
    assert written == [f"svccore/paging.py:{_line_of(home, 'FLEET_PAGE_MAX =')}"]


def _a_fleet_maximum(name: str) -> bool:
    # FLEET_MAX, FLEET_LIMIT_MAX, ...; not the cursor's length, nor a page a person reads
    return "FLEET" in name and name.endswith("MAX") and "CURSOR" not in name


def test_keyset_paging_is_written_once():
    """config.api.paging reads every page: no other module slices ``[: limit + 1]`` or takes
    an id cursor apart itself (the fleet, invoices, usage conflicts and events did, three
    ways, and the events' and conflicts' selectors checked their cursor less)."""
    written = []
    for path in [*_server_modules(), *(REPO / "events").rglob("*.py"), *_portal_modules()]:
        if path.relative_to(REPO).as_posix() == "config/api/paging.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            upper = getattr(node, "upper", None) if isinstance(node, ast.Slice) else None
            if isinstance(upper, ast.BinOp) and isinstance(upper.op, ast.Add):
                if getattr(upper.left, "id", "") == "limit":
                    written.append(f"{path.relative_to(REPO)}:{node.lineno} [: limit + 1]")
            if isinstance(node, ast.keyword) and node.arg in ("id__lt", "pk__gte"):
                written.append(f"{path.relative_to(REPO)}:{node.lineno} {node.arg}")
    assert written == []


def _portal_modules() -> list[Path]:
    return [p for p in (REPO / "portal").rglob("*.py") if "migrations" not in p.parts]


@pytest.mark.django_db
def test_the_portal_pages_batches_and_licenses_by_config_paging(make_batch, customer, server_clock):
    """The customer API's batches and usage lists (portal.api, once with a ``_page`` of
    its own) page through config.api.paging.named_row_page: newest first by issued_at then id,
    rows issued in the same second included; the next cursor is the id of the last row
    shown, as the portal always gave it; a cursor naming no row is refused in the id
    lists' words."""
    from config.api.paging import named_row_page
    from config.errors import InvalidInput
    from portal.selectors import batches_of, licenses_of

    moment = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with server_clock.at(moment):
        make_batch(units=1)
        make_batch(units=1)
    with server_clock.at(moment + dt.timedelta(days=1)):
        make_batch(units=1)
    for rows in (batches_of(customer), licenses_of(customer)):
        seen, cursor = [], None
        while True:
            page, cursor = named_row_page(rows, cursor=cursor, limit=1, by="issued_at")
            seen.extend(page)
            if cursor is None:
                break
            assert cursor == page[-1].pk
        assert len(seen) >= 3
        assert [row.pk for row in seen] == list(rows.values_list("pk", flat=True))
    for cursor in ("nope", "b_0"):
        with pytest.raises(InvalidInput, match="cursor must be a next_cursor this API gave"):
            named_row_page(batches_of(customer), cursor=cursor, limit=10, by="issued_at")


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", ["abc", "12345678901234567890", "٣", "-1"])
def test_every_id_list_refuses_a_cursor_it_did_not_give_in_the_same_words(cursor):
    from billing.selectors import invoices_page, usage_conflicts_page
    from config.errors import InvalidInput
    from events.selectors import events_page

    for page in (invoices_page, usage_conflicts_page, events_page):
        with pytest.raises(InvalidInput, match="cursor must be a next_cursor this API gave"):
            page(cursor=cursor, limit=10)


@pytest.mark.django_db
def test_the_id_lists_and_the_fleet_page_on_without_a_gap(make_batch):
    """A page of one, then the next from its cursor, reaches every row once; the id
    lists' cursors are the row ids in decimal, as the API has always given them."""
    from events.models import Event
    from events.selectors import events_page
    from licensing.selectors import fleet_page
    from licensing.services import unit_activate

    batch = make_batch(units=3)
    for n in range(3):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{n}")
    for page_of, key in ((events_page, "events"), (fleet_page, "units")):
        seen, cursor = [], None
        while True:
            page = page_of(cursor=cursor, limit=1)
            rows = getattr(page, key)
            seen.extend(rows)
            cursor = page.next_cursor
            if cursor is None:
                break
        if key == "events":
            assert [e.id for e in seen] == list(
                Event.objects.order_by("-id").values_list("id", flat=True)
            )
            assert events_page(limit=1).next_cursor == str(seen[0].id)
        else:
            assert sorted(u["device_id"] for u in seen) == ["cam-0", "cam-1", "cam-2"]
