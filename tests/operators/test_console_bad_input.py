"""The console never answers 500 to what a browser can send (issue 37, item 6): date
hierarchies out of range, action selections that are not ids, on every changelist of
every registered admin (Django's and third-party ones included); and a database that
drops the connection answers 503 with Retry-After on console pages, as on the API."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db import OperationalError
from django.db.backends import utils as backend_utils
from django.test import Client
from django.urls import reverse

from config.admin.base import GuardedListMixin
from operators.services import operator_key_create

pytestmark = pytest.mark.django_db

DATES = [
    "__year=99999999999999999999999",
    "__year=2026&{f}__month=13",
    "__year=2026&{f}__month=1&{f}__day=0",
    "__year=9999",  # no next year to end the span at
    "__year=9999&{f}__month=12",
    "__year=9999&{f}__month=12&{f}__day=31",
    "__year=-1",
    "__year=zzz",
]
SELECTIONS = ["\x00", "zzz", "-1", "9" * 30]


def _changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def _dated():
    reverse("admin:index")
    return [
        pytest.param(model, model_admin.date_hierarchy, id=model._meta.label)
        for model, model_admin in admin.site._registry.items()
        if model_admin.date_hierarchy
    ]


@pytest.fixture
def console(admin_client, fleet):
    operator_key_create(name="ops", roles=["operator"])
    return admin_client


@pytest.fixture
def fleet(customer, make_batch):
    make_batch(units=2)


def test_every_admin_is_guarded():
    reverse("admin:index")  # the URLconf guards them as it loads
    assert all(isinstance(a, GuardedListMixin) for a in admin.site._registry.values())
    assert len(_dated()) >= 5


@pytest.mark.parametrize(("model", "field"), _dated())
def test_out_of_range_dates_are_not_a_500(console, model, field):
    for query in DATES:
        url = f"{_changelist(model)}?{field}{query.format(f=field)}"
        response = console.get(url, follow=True)
        assert response.status_code < 500, url
        assert response.status_code in (200, 400), url


def _actions(rf, admin_user):
    reverse("admin:index")
    request = rf.get("/admin/")
    request.user = admin_user
    return [
        (model, name)
        for model, model_admin in admin.site._registry.items()
        for name in model_admin.get_actions(request)
    ]


def test_selections_that_are_not_ids_are_not_a_500(console, rf, admin_user):
    pairs = _actions(rf, admin_user)
    assert len(pairs) >= 15
    for model, action in pairs:
        for value in SELECTIONS:
            # With "index": the list's own form; without: an action's confirmation page.
            for form in ({"index": "0"}, {}):
                data = {"action": action, "_selected_action": [value], **form}
                response = console.post(_changelist(model), data)
                where = (model._meta.label, action, value, form)
                assert response.status_code < 500, where
                if value == "\x00" or (value in ("zzz", "9" * 30) and _numeric(model)):
                    assert response.status_code == 302, where
                    shown = console.get(response["Location"]).content.decode()
                    assert "Nothing was changed" in shown, where


def _numeric(model) -> bool:
    return model._meta.pk.get_internal_type() in (
        "AutoField", "BigAutoField", "BigIntegerField", "IntegerField",
    )  # fmt: skip


@pytest.fixture
def dropped(monkeypatch):
    """Every query from now on fails as one on a connection PostgreSQL closed does."""

    def closed(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(backend_utils.CursorWrapper, "execute", closed)
    monkeypatch.setattr(backend_utils.CursorWrapper, "executemany", closed)


@pytest.mark.parametrize(
    "path",
    [
        "/admin/",
        "/admin/dashboard/",
        "/admin/licensing/batch/",
        "/admin/customers/customer/",
        "/admin/audit/auditentry/",
        "/admin/login/",
    ],
)
def test_a_dropped_database_answers_503_on_console_pages(admin_user, path, request):
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    request.getfixturevalue("dropped")
    response = client.get(path)
    assert response.status_code == 503, path
    assert response["Retry-After"] == "5"
    assert "database is unavailable" in response.content.decode()


def test_a_dropped_database_answers_503_on_the_api(admin_api, dropped):
    response = admin_api.get("/v1/admin/catalogue")
    assert response.status_code == 503 and response["Retry-After"] == "5"
