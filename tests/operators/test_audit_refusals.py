"""Issue 39 item 4: every refusal on the record, with a bound.

The audit matrix: each kind of refusal (admin API 401/403/429, a key lacking the
capability, expired and revoked keys, the console's 403, the customer API's 401/403/429,
a portal user at another customer's webhook, the camera endpoints' 401/402/403/429,
wrong second-factor codes, lockouts, recovery-code logins) produces exactly the row
expected: actor, actor kind, key name, capability, address, result, status, repeats.
Then the bound: 10,000 identical refusals are one row a minute, through the recording
function and a few hundred through HTTP; concurrent workers lose no count (PostgreSQL).
Then the names: ``bootstrap`` is reserved, names are unique per kind, a revoke names its
key, an invitation's acceptance names the invited person.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.context import Actor
from audit.models import AuditEntry
from audit.services import audit_refusal
from config import clock
from config.errors import Conflict, InvalidInput
from licensing.models import License
from operators.models import OperatorKey
from operators.services import operator_key_create, operator_key_revoke, roles_ensure
from tests.operators.test_second_factor import (
    PASSWORD,
    _code,
    _enrol,
    _login,
    two_factor,  # noqa: F401 - fixture
)
from tests.portal.conftest import make_world

pytestmark = pytest.mark.django_db

FIELDS = ("actor", "actor_kind", "key_name", "capability", "ip", "status", "result", "repeats")
HOME = "127.0.0.1"  # the test client's REMOTE_ADDR


def only(action: str) -> dict:
    """The one row of ``action``, as the matrix compares it."""
    rows = list(AuditEntry.objects.filter(action=action).values(*FIELDS, "target"))
    assert len(rows) == 1, (action, rows)
    return rows[0]


def row(actor, kind, *, key="", capability="", status, repeats=1, ip=HOME, target=None):
    expected = {
        "actor": actor,
        "actor_kind": kind,
        "key_name": key,
        "capability": capability,
        "ip": ip,
        "status": status,
        "result": "refused",
        "repeats": repeats,
    }
    if target is not None:
        expected["target"] = target
    return expected


def matches(action: str, expected: dict) -> None:
    got = only(action)
    assert {name: got[name] for name in expected} == expected, got


@pytest.fixture
def minute(server_clock):
    """Stop the server's clock 10 s into a minute, so refusals of one test share it."""
    now = clock.now().replace(second=10, microsecond=0)
    with server_clock.at(now):
        yield now


def key(name: str, *roles: str, **extra) -> str:
    roles_ensure()
    return operator_key_create(name=name, roles=list(roles), **extra)[1]


def api(admin_key: str | None = None) -> APIClient:
    client = APIClient()
    if admin_key:
        client.credentials(HTTP_X_ADMIN_KEY=admin_key)
    return client


# --- the admin API ---------------------------------------------------------------------


def test_admin_api_missing_wrong_and_throttled_keys(minute, settings):
    settings.SVC_ADMIN_KEY_FAILURES = 3
    assert api().get("/v1/admin/catalogue").status_code == 401
    matches(
        "admin_key.missing",
        row("anonymous", "system", status=401, target="GET /v1/admin/catalogue"),
    )
    wrong = api("svcop_000000000000_" + "x" * 43)
    assert [wrong.get("/v1/admin/catalogue").status_code for _ in range(5)] == [403] * 3 + [429] * 2
    matches("admin_key.refused", row("anonymous", "system", status=403, repeats=3))
    matches("admin_key.throttled", row("anonymous", "system", status=429, repeats=2))
    assert "x" * 43 not in str(list(AuditEntry.objects.values()))


def test_a_key_lacking_the_capability_is_named_with_it(minute):
    """The issue's two: a viewer key revoking (403), a finance key issuing a batch."""
    viewer, finance = key("ops-viewer", "viewer"), key("ops-finance", "finance")
    answer = api(viewer).post("/v1/admin/revoke", {"license_id": "LIC-X"}, format="json")
    assert answer.status_code == 403
    answer = api(finance).post("/v1/admin/batches", {"customer_id": "C"}, format="json")
    assert answer.status_code == 403
    rows = {
        r["actor"]: r
        for r in AuditEntry.objects.filter(action="admin_api.forbidden").values(*FIELDS, "target")
    }
    assert rows == {
        "ops-viewer": row(
            "ops-viewer", "api_key", key="ops-viewer", capability="revoke_licences",
            status=403, target="POST /v1/admin/revoke",
        ),
        "ops-finance": row(
            "ops-finance", "api_key", key="ops-finance", capability="issue_licences",
            status=403, target="POST /v1/admin/batches",
        ),
    }  # fmt: skip


def test_revoked_and_expired_keys_are_named(minute, server_clock):
    revoked = key("ops-gone", "viewer")
    operator_key_revoke(name="ops-gone")
    assert api(revoked).get("/v1/admin/catalogue").status_code == 403
    got = AuditEntry.objects.get(action="admin_key.refused")
    assert (got.actor, got.actor_kind, got.key_name, got.detail["key_state"]) == (
        "ops-gone", "api_key", "ops-gone", "revoked",
    )  # fmt: skip
    expiring = key("ops-brief", "viewer", expires_at=clock.now() + dt.timedelta(hours=1))
    assert api(expiring).get("/v1/admin/catalogue").status_code == 200
    with server_clock.at(minute + dt.timedelta(hours=2)):
        assert api(expiring).get("/v1/admin/catalogue").status_code == 403
    got = AuditEntry.objects.get(action="admin_key.refused", key_name="ops-brief")
    assert (got.actor, got.actor_kind, got.detail["key_state"], got.repeats) == (
        "ops-brief", "api_key", "expired", 1,
    )  # fmt: skip


def test_a_failing_audit_write_never_turns_a_refusal_into_a_500(minute, monkeypatch, caplog):
    def broken(**_):
        raise RuntimeError("audit table unavailable")

    monkeypatch.setattr("audit.services.refusal_fingerprint", broken)
    with caplog.at_level(logging.ERROR):
        assert api("svcop_000000000000_" + "y" * 43).get("/v1/admin/catalogue").status_code == 403
        assert api().get("/v1/admin/catalogue").status_code == 401
    assert not AuditEntry.objects.exists()
    assert "could not record refusal admin_key.refused" in caplog.text


# --- the console -----------------------------------------------------------------------


def test_a_console_user_without_the_permission(minute, django_user_model, customer):
    """The issue's: a viewer editing a customer in the console (403)."""
    roles_ensure()
    user = django_user_model.objects.create_user("vic", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(user)
    assert client.get("/admin/customers/customer/add/").status_code == 403
    path = f"/admin/customers/customer/{customer.pk}/change/"
    assert client.post(path, {"name": "Renamed"}).status_code == 403
    rows = AuditEntry.objects.filter(action="console.forbidden").order_by("id")
    assert [{n: getattr(r, n) for n in (*FIELDS, "target")} for r in rows] == [
        row("vic", "staff", capability="manage_customers", status=403,
            target="GET /admin/customers/customer/add/"),
        row("vic", "staff", capability="(nobody)", status=403, target=f"POST {path}"),
    ]  # fmt: skip
    assert client.get("/admin/dashboard/reconcile/").status_code in (403, 405)


# --- the customer API and the portal ---------------------------------------------------


@pytest.fixture
def worlds(server_clock, settings, minute):
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    return make_world(server_clock, "Alpha"), make_world(server_clock, "Beta")


def test_customer_api_refusals(worlds, settings):
    alpha, _ = worlds
    label = f"sync ({alpha.key_prefix})"
    client = APIClient()
    assert client.get("/v1/customer/fleet").status_code == 401
    matches("customer_key.missing", row("anonymous", "system", status=401))
    client.credentials(HTTP_AUTHORIZATION="Bearer svccu_000000000000_" + "x" * 43)
    assert client.get("/v1/customer/fleet").status_code == 403
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {alpha.key}")
    settings.SVC_CUSTOMER_API_RATE = 1
    assert [client.get("/v1/customer/fleet").status_code for _ in range(3)] == [200, 429, 429]
    matches(
        "customer_key.rate_limited",
        row(alpha.customer.pk, "customer_key", key=label, status=429, repeats=2),
    )
    alpha.client().post(reverse("portal-api-key-revoke", args=[alpha.key_prefix]))
    settings.SVC_CUSTOMER_API_RATE = 1000
    assert client.get("/v1/customer/fleet").status_code == 403
    rows = AuditEntry.objects.filter(action="customer_key.refused").order_by("id")
    assert [(r.actor, r.actor_kind, r.key_name, r.status, r.repeats) for r in rows] == [
        ("anonymous", "system", "", 403, 1),
        (alpha.customer.pk, "customer_key", label, 403, 1),
    ]
    assert rows[1].detail["key_state"] == "revoked"


def test_a_portal_user_at_another_customers_webhook(worlds):
    alpha, beta = worlds
    client = alpha.client()
    for name in ("portal-webhook-rotate", "portal-webhook-delete"):
        assert client.post(reverse(name, args=[beta.webhook.pk])).status_code == 404
    rows = AuditEntry.objects.filter(action="portal.webhook_refused")
    assert rows.count() == 1  # the same refusal (actor, address, target) twice
    got = rows.get()
    assert (got.actor, got.actor_kind, got.target, got.status, got.repeats, got.result) == (
        alpha.account.user.get_username(), "customer", f"webhook {beta.webhook.pk}", 404, 2,
        "refused",
    )  # fmt: skip
    beta.webhook.refresh_from_db()  # untouched


def test_a_portal_lockout_names_the_customer_user(worlds, settings):
    alpha, _ = worlds
    settings.AXES_FAILURE_LIMIT = 2
    username = alpha.account.user.get_username()
    client = Client()
    answers = [
        client.post(reverse("portal-login"), {"username": username, "password": "wrong"})
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 429, 429]
    matches(
        "login.locked_out",
        row(username, "customer", status=429, repeats=2, target="POST /portal/login/"),
    )
    assert not AuditEntry.objects.filter(action="portal.throttled").exists()


def test_an_accepted_invitation_names_the_invited_person(worlds):
    alpha, _ = worlds
    entry = AuditEntry.objects.get(action="customer_user.accept", target=alpha.account.user.email)
    assert (entry.actor, entry.actor_kind) == (alpha.account.user.get_username(), "customer")


# --- the camera endpoints ---------------------------------------------------------------


def activate(token, device_id):
    body = {"batch_token": token, "device_id": device_id}
    return APIClient().post("/v1/activate", body, format="json")


def test_camera_refusals(minute, make_batch, settings):
    batch = make_batch(units=1)
    batch_key = f"{batch.license_id} (batch {batch.pk})"
    assert activate(batch.license.token, "cam-1").status_code == 200
    assert activate(batch.license.token, "cam-2").status_code == 402
    matches("device.payment_required", row("cam-2", "device", key=batch_key, status=402))
    unit = License.objects.get(device_id="cam-1")
    assert activate(unit.token, "cam-3").status_code == 403  # not a batch key
    matches("device.forbidden", row("cam-3", "device", key=unit.pk, status=403,
                                    target="POST /v1/activate"))  # fmt: skip
    body = {"device_id": "cam-1", "license_id": unit.pk, "records": []}
    assert APIClient().post("/v1/usage", body, format="json").status_code == 401
    matches("device.unauthenticated", row("cam-1", "device", status=401))
    other = APIClient(HTTP_AUTHORIZATION=f"Bearer {unit.token}")
    answer = other.post("/v1/usage", body | {"device_id": "cam-9"}, format="json")
    assert answer.status_code == 403
    assert other.get("/v1/license", {"device_id": "cam-9"}).status_code == 403
    rows = AuditEntry.objects.filter(action="device.forbidden").order_by("id")
    assert [(r.actor, r.actor_kind, r.key_name, r.target, r.status) for r in rows] == [
        ("cam-3", "device", unit.pk, "POST /v1/activate", 403),
        ("cam-9", "device", unit.pk, "POST /v1/usage", 403),
        ("cam-9", "device", unit.pk, "GET /v1/license", 403),
    ]

    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "1/60s"
    more = make_batch(units=5)
    answers = [activate(more.license.token, f"cam-r{n}").status_code for n in range(3)]
    assert answers == [200, 429, 429]
    rows = AuditEntry.objects.filter(action="device.throttled").order_by("id")
    assert [(r.actor, r.key_name, r.status, r.repeats) for r in rows] == [
        ("cam-r1", f"{more.license_id} (batch {more.pk})", 429, 1),
        ("cam-r2", f"{more.license_id} (batch {more.pk})", 429, 1),
    ]


def test_a_forged_token_names_no_key_and_a_bad_device_id_no_device(minute, make_batch, settings):
    batch = make_batch(units=1)
    head, payload, signature = batch.license.token.rsplit(".", 2)
    forged = f"{head}.{payload}.{'A' * len(signature)}"
    assert activate(forged, "cam-f").status_code == 403
    assert only("device.forbidden")["key_name"] == ""
    # The activation limit answers before the body is checked: a device id no camera may
    # have (a NUL, a bidi override) is not stored; the row says "unknown device".
    settings.SVC_ACTIVATION_ALLOWLIST = []
    settings.SVC_ACTIVATION_RATE = "1/60s"
    assert activate(batch.license.token, "cam-1").status_code == 200
    assert activate(batch.license.token, "cam\u0000\u202e").status_code == 429
    entry = AuditEntry.objects.get(action="device.throttled")
    assert (entry.actor, entry.actor_kind) == ("unknown device", "device")


# --- second factor, lockouts ----------------------------------------------------------


@pytest.fixture
def vera(db, django_user_model):
    roles_ensure()
    user = django_user_model.objects.create_user("vera", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="viewer"))
    return user


def test_wrong_codes_lockouts_and_recovery_codes(two_factor, vera, minute, settings):  # noqa: F811
    settings.AXES_FAILURE_LIMIT = 3
    codes = _enrol(_login(), vera)
    client = _login()
    assert client.post("/admin/second-factor/", {"code": codes[0]}).status_code == 302
    entry = only("second_factor.recovery_code")
    assert (entry["actor"], entry["actor_kind"], entry["result"]) == ("vera", "staff", "ok")
    assert AuditEntry.objects.get(action="second_factor.recovery_code").detail == {
        "recovery_codes_left": 9
    }
    client = _login()
    for _ in range(3):
        client.post("/admin/second-factor/", {"code": "123456"})
    matches("second_factor.wrong_code", row("vera", "staff", status=None, repeats=3))
    matches("login.locked_out", row("vera", "staff", status=429))
    locked = Client().post("/admin/login/", {"username": "vera", "password": PASSWORD})
    assert locked.status_code == 429
    rows = AuditEntry.objects.filter(action="login.locked_out").order_by("id")
    # The code that locked, then the password after: two targets, two rows.
    assert [(r.target, r.repeats) for r in rows] == [
        ("POST /admin/second-factor/", 1),
        ("POST /admin/login/", 1),
    ]
    assert _code(vera) not in str(list(AuditEntry.objects.values()))


def test_a_locked_out_password_login_is_one_row_not_two(minute, django_user_model, settings):
    settings.AXES_FAILURE_LIMIT = 2
    django_user_model.objects.create_user("lou", password=PASSWORD, is_staff=True)
    statuses = [
        Client().post("/admin/login/", {"username": "lou", "password": "no"}).status_code
        for _ in range(4)
    ]
    assert statuses == [200, 429, 429, 429]
    matches("login.locked_out", row("lou", "staff", status=429, repeats=3))
    assert not AuditEntry.objects.filter(action="console.throttled").exists()


# --- the bound --------------------------------------------------------------------------


def test_a_flood_of_refusals_is_two_rows_over_two_minutes(db, server_clock):
    """Driven through the recording function: 2,000 in one minute, 2,000 in the next
    (a row holds any number: 10,000 took 28 s of CI on PostgreSQL for the same two)."""
    start = clock.now().replace(second=0, microsecond=0)
    actor = Actor(name="anonymous", kind="system", ip="203.0.113.7")
    for offset in (0, 60):
        with server_clock.at(start + dt.timedelta(seconds=offset + 5)):
            for _ in range(2_000):
                audit_refusal(
                    action="admin_key.refused", status=403, target="GET /v1/admin/fleet",
                    actor=actor,
                )  # fmt: skip
    rows = AuditEntry.objects.order_by("at")
    assert [(r.at, r.repeats) for r in rows] == [
        (start + dt.timedelta(seconds=5), 2_000),
        (start + dt.timedelta(seconds=65), 2_000),
    ]


def test_a_few_hundred_http_refusals_are_bounded(minute, settings):
    """300 wrong keys from one address and 300 from another: 10 refused then 290
    throttled each (SVC_ADMIN_KEY_FAILURES 10): four rows for 600 requests."""
    settings.SVC_ADMIN_KEY_FAILURES = 10
    for address in ("198.51.100.1", "198.51.100.2"):
        client = api("svcop_000000000000_" + "z" * 43)
        answers = [client.get("/v1/admin/fleet", REMOTE_ADDR=address).status_code
                   for _ in range(300)]  # fmt: skip
        assert answers == [403] * 10 + [429] * 290
    rows = AuditEntry.objects.order_by("ip", "action")
    assert [(r.ip, r.action, r.repeats) for r in rows] == [
        ("198.51.100.1", "admin_key.refused", 10),
        ("198.51.100.1", "admin_key.throttled", 290),
        ("198.51.100.2", "admin_key.refused", 10),
        ("198.51.100.2", "admin_key.throttled", 290),
    ]


def test_the_minute_turning_starts_a_new_row(server_clock):
    start = clock.now().replace(second=0, microsecond=0)
    for second in (58, 59, 60, 61):
        with server_clock.at(start + dt.timedelta(seconds=second)):
            assert api().get("/v1/admin/catalogue").status_code == 401
    assert list(AuditEntry.objects.order_by("at").values_list("repeats", flat=True)) == [2, 2]


@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_lose_no_count(server_clock):
    """Two workers (threads, each its own database connection) record the same refusal
    400 times each, starting together: the first insert races, then the increments."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serialises every write; the race is PostgreSQL's")
    start = clock.now().replace(second=5, microsecond=0)
    barrier = threading.Barrier(2)
    failures = []

    def worker():
        try:
            barrier.wait()
            for _ in range(400):
                assert audit_refusal(action="admin_key.refused", status=403, target="GET /x",
                                     actor=Actor("anonymous", "system", "203.0.113.9"))  # fmt: skip
        except Exception as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    with server_clock.at(start):
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not failures
    assert list(AuditEntry.objects.values_list("repeats", flat=True)) == [800]


def test_an_aggregated_row_changes_only_repeats(minute):
    for _ in range(3):
        api().get("/v1/admin/catalogue")
    before = AuditEntry.objects.values().get()
    api().get("/v1/admin/catalogue")
    after = AuditEntry.objects.values().get()
    assert (before.pop("repeats"), after.pop("repeats")) == (3, 4)
    assert after == before


# --- names -------------------------------------------------------------------------------


def test_bootstrap_is_reserved_everywhere(db, admin_user):
    roles_ensure()
    for name in ("bootstrap", "Bootstrap", "BOOTSTRAP"):
        with pytest.raises(InvalidInput, match="reserved for the bootstrap key"):
            operator_key_create(name=name, roles=["viewer"])
    with pytest.raises(CommandError, match="reserved for the bootstrap key"):
        call_command("create_admin_key", "bootstrap", "--scope", "viewer")
    client = Client()
    client.force_login(admin_user)
    page = client.post(
        "/admin/operators/operatorkey/add/", {"name": "bootstrap", "roles": ["viewer"]}
    )
    assert page.status_code == 200 and "reserved for the bootstrap key" in page.content.decode()
    assert not AuditEntry.objects.filter(action="operator_key.create", result="ok").exists()


def test_operator_key_names_are_unique_whatever_the_case(db):
    key("ops-one", "viewer")
    with pytest.raises(Conflict, match="'ops-one' already exists"):
        operator_key_create(name="OPS-One", roles=["viewer"])


def test_a_revoke_names_the_key_not_the_row(db):
    key("ops-old", "viewer")
    row = operator_key_revoke(name="ops-old")
    entry = AuditEntry.objects.get(action="operator_key.revoke")
    assert entry.target == f"ops-old ({row.prefix})" != str(row.pk)


def test_the_console_list_and_page_show_repeats(minute, admin_user):
    for _ in range(7):
        api().get("/v1/admin/catalogue")
    entry = AuditEntry.objects.get()
    client = Client()
    client.force_login(admin_user)
    listing = client.get("/admin/audit/auditentry/?result=refused").content.decode()
    assert "refused (401) \u00d7 7" in listing
    page = client.get(f"/admin/audit/auditentry/{entry.pk}/change/").content.decode()
    assert "Repeats" in page and "7" in page and "401" in page
    # The filters the console's index may link to find the row (and only it).
    for query in ("result=refused", "action=admin_key.missing", "status=401",
                  "actor_kind=system&result=refused"):  # fmt: skip
        listing = client.get(f"/admin/audit/auditentry/?{query}")
        assert listing.status_code == 200, query  # not the ?e=1 of an unknown filter
        assert listing.context["cl"].result_count == 1, query
    none = client.get("/admin/audit/auditentry/?action=login.locked_out")
    assert none.context["cl"].result_count == 0


def test_a_key_named_bootstrap_before_the_reservation_is_told_apart(minute):
    """A row named so by an older version (or by hand) is never logged as the bootstrap
    key: its prefix goes with its name."""
    legacy = key("legacy", "viewer")
    stored = OperatorKey.objects.get(name="legacy")
    OperatorKey.objects.filter(pk=stored.pk).update(name="bootstrap")
    answer = api(legacy).post("/v1/admin/revoke", {"license_id": "LIC-X"}, format="json")
    assert answer.status_code == 403
    name = f"bootstrap (named key {stored.prefix})"
    matches(
        "admin_api.forbidden",
        row(name, "api_key", key=name, capability="revoke_licences", status=403),
    )


@pytest.mark.live
def test_a_flood_through_gunicorn_workers_is_one_row_per_refusal(moved_service, server_clock):
    """400 wrong keys from 16 connections at once against gunicorn (3 workers x 4
    threads, production limits: SVC_ADMIN_KEY_FAILURES 10), its clock stopped in one
    minute: the first ones 403, then 429, and the log holds two rows whose counts are
    exactly the answers given, whichever worker gave them."""
    url = f"{moved_service.url}/v1/admin/catalogue"
    guess = {"X-Admin-Key": "svcop_000000000000_" + "w" * 43}

    def wrong(_) -> int:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=guess), timeout=60):
                return 200
        except urllib.error.HTTPError as answer:
            return answer.code

    with server_clock.at(clock.now().replace(second=5, microsecond=0)):
        with ThreadPoolExecutor(16) as pool:
            answers = Counter(pool.map(wrong, range(400)))
    assert set(answers) == {403, 429} and answers[403] >= 10
    rows = {entry.action: entry for entry in AuditEntry.objects.all()}
    assert set(rows) == {"admin_key.refused", "admin_key.throttled"}
    assert rows["admin_key.refused"].repeats == answers[403]
    assert rows["admin_key.throttled"].repeats == answers[429]
    assert {entry.ip for entry in rows.values()} == {"127.0.0.1"}
