"""The replica router's decisions and the middleware's second try (config.replica),
without a replica: the database connections and the lag check are stand-ins. The real
replica is tests/test_replica.py's."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from config import replica
from config.settings_checks import database, replica_database
from licensing.models import License

PRIMARY_URL = "postgres://svc@db-primary:5432/licensing"


@pytest.fixture
def routed(monkeypatch, settings):
    """An eligible request's state, a primary with no transaction open, and a replica
    whose lag the test sets (``routed.lag``; None: it does not answer)."""
    settings.SVC_REPLICA_MAX_LAG_SECONDS = 5
    settings.SVC_REPLICA_CHECK_SECONDS = 0
    primary = SimpleNamespace(in_atomic_block=False)
    replica_connection = SimpleNamespace(close_if_unusable_or_obsolete=lambda: None)
    monkeypatch.setattr(
        replica, "connections", {replica.PRIMARY: primary, replica.REPLICA: replica_connection}
    )
    state = SimpleNamespace(lag=0.0, checks=0, primary=primary)

    def lag():
        state.checks += 1
        return state.lag

    monkeypatch.setattr(replica, "replica_lag", lag)
    replica.health.forget()
    request = replica.RequestReads(accept=replica.replica_rule("admin-fleet"))
    token = replica._request.set(request)
    state.request = request
    yield state
    replica._request.reset(token)
    replica.health.forget()


def test_an_eligible_read_goes_to_the_replica_and_the_whole_request_stays_there(routed):
    router = replica.ReplicaRouter()
    assert router.db_for_read(License) == "replica"
    routed.lag = 60  # later in the request: one source for the whole request
    assert router.db_for_read(License) == "replica"
    assert routed.checks == 1


def test_a_lagging_replica_sends_reads_to_the_primary(routed):
    routed.lag = 5.5
    assert replica.ReplicaRouter().db_for_read(License) == "default"
    assert routed.request.reason == "lag"


def test_a_replica_that_does_not_answer_is_left_alone_a_while(routed):
    routed.lag = None
    router = replica.ReplicaRouter()
    assert router.db_for_read(License) == "default"
    assert routed.request.reason == "down"
    routed.lag = 0.0
    assert router.db_for_read(License) == "default"  # not asked again for DOWN_SECONDS
    assert routed.checks == 1


def test_the_lag_is_checked_once_per_interval(routed, settings):
    settings.SVC_REPLICA_CHECK_SECONDS = 3600
    for _ in range(3):
        replica.health.verdict()
    assert routed.checks == 1


def test_a_request_that_wrote_reads_the_primary(routed):
    router = replica.ReplicaRouter()
    assert router.db_for_write(License) == "default"
    assert router.db_for_read(License) == "default"
    assert routed.request.reason == "wrote"


def test_a_read_inside_a_transaction_on_the_primary_reads_the_primary(routed):
    routed.primary.in_atomic_block = True
    assert replica.ReplicaRouter().db_for_read(License) == "default"


def test_a_write_after_a_replica_read_stops_the_request_for_a_second_try(routed):
    router = replica.ReplicaRouter()
    assert router.db_for_read(License) == "replica"
    with pytest.raises(replica.ReplicaWriteAfterRead):
        router.db_for_write(License)
    assert routed.request.aborted
    # A session saved after the view is the primary's whatever was read before.
    assert router.db_for_write(Session) == "default"


def test_sessions_and_logins_are_read_on_the_primary(routed):
    assert replica.ReplicaRouter().db_for_read(Session) == "default"


def test_reads_outside_an_eligible_request_are_the_primarys():
    router = replica.ReplicaRouter()
    assert router.db_for_read(License) == "default"
    assert router.allow_migrate("replica", "licensing") is False
    assert router.allow_migrate("default", "licensing") is None


@pytest.mark.parametrize(
    ("name", "eligible"),
    [
        ("revocations", True),
        ("revocations-status", True),
        ("license-refresh", True),
        ("admin-fleet", True),
        ("console-dashboard", True),
        ("console-invoice-preview", True),
        ("admin:licensing_unit_changelist", True),
        ("admin:licensing_unit_change", False),
        ("console-invoice-issue", False),
        ("activate", False),
        ("usage", False),
        (None, False),
    ],
)
def test_views_are_marked_by_url_name(name, eligible):
    assert (replica.replica_rule(name) is not None) is eligible


def test_the_refresh_stands_on_the_replica_only_when_nothing_changed():
    rule = replica.replica_rule("license-refresh")
    assert rule(304) and not rule(200) and not rule(403)
    assert replica.replica_rule("revocations")(304)
    assert not replica.replica_rule("revocations")(409)


@pytest.fixture
def no_replica_connection(monkeypatch):
    closing = SimpleNamespace(close_if_unusable_or_obsolete=lambda: None)
    monkeypatch.setattr(replica, "connections", {replica.REPLICA: closing})


def _middleware(get_response):
    """The middleware as a node with a replica builds it (only its presence is read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # overriding DATABASES, on purpose
        with override_settings(DATABASES={**settings.DATABASES, replica.REPLICA: {}}):
            return replica.ReplicaReadsMiddleware(get_response)


def test_without_a_replica_the_middleware_leaves_the_chain():
    with pytest.raises(MiddlewareNotUsed):
        replica.ReplicaReadsMiddleware(lambda request: HttpResponse())


def _resolved(request, name: str):
    request.resolver_match = SimpleNamespace(view_name=name)
    return request


@pytest.mark.parametrize(
    ("trouble", "reason"),
    [("failed", "failed"), ("aborted", "wrote"), ("status", "answer")],
)
def test_an_answer_the_replica_cannot_stand_behind_is_done_again_on_the_primary(
    trouble, reason, no_replica_connection
):
    calls = []

    def view(request):
        middleware.process_view(request, None, (), {})
        state = replica._request.get()
        calls.append(state.accept is not None)
        if state.accept is None:
            return HttpResponse("primary")
        state.used_replica = True
        state.failed = trouble == "failed"
        state.aborted = trouble == "aborted"
        return HttpResponse("replica", status=404 if trouble == "status" else 200)

    middleware = _middleware(view)
    before = replica.metrics.REPLICA_FALLBACKS.labels(reason)._value.get()
    response = middleware(_resolved(RequestFactory().get("/v1/admin/fleet"), "admin-fleet"))
    assert response.content == b"primary"
    assert calls == [True, False]
    assert replica.metrics.REPLICA_FALLBACKS.labels(reason)._value.get() == before + 1
    assert replica._request.get() is None


def test_a_post_is_never_eligible():
    seen = []

    def view(request):
        middleware.process_view(request, None, (), {})
        seen.append(replica._request.get().accept)
        return HttpResponse("ok")

    middleware = _middleware(view)
    middleware(_resolved(RequestFactory().post("/v1/admin/fleet"), "admin-fleet"))
    assert seen == [None]


def test_the_replica_is_configured_read_only_and_mirrors_the_primary_in_tests():
    db = replica_database("postgres://svc@db-replica:5432/licensing", primary=database(PRIMARY_URL))
    assert db["ENGINE"] == "config.db.replica"
    assert db["HOST"] == "db-replica"
    assert "default_transaction_read_only=on" in db["OPTIONS"]["options"]
    assert db["OPTIONS"]["connect_timeout"] == 3
    assert db["TEST"] == {"MIRROR": "default"}


@pytest.mark.parametrize(
    ("primary", "url", "message"),
    [
        ("sqlite:///var/db.sqlite3", "postgres://h/db", "DATABASE_URL is not PostgreSQL"),
        (PRIMARY_URL, "sqlite:///replica.sqlite3", "must be a postgres:// URL"),
    ],
)
def test_a_replica_url_that_cannot_be_one_stops_start_up(primary, url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        replica_database(url, primary=database(primary))


def test_a_request_about_to_write_what_it_read_reads_it_again_on_the_primary(routed):
    """licensing.status_store signs and stores a status: read from the replica, its
    inputs are read again on the primary before the write, which then stands (no second
    try of the whole request, no wasted signature)."""
    router = replica.ReplicaRouter()
    assert replica.primary_from_now() is False  # nothing read from the replica yet
    assert router.db_for_read(License) == "replica"
    assert replica.primary_from_now() is True
    assert router.db_for_read(License) == "default"
    assert router.db_for_write(License) == "default"
    assert not routed.request.aborted and routed.request.reason == "wrote"
    assert replica.primary_from_now() is False  # once is enough
