"""The console finds a camera by any part of its device id, and a licence by any part of
its id, any case, as the portal does (issue 41: ``8E305A87`` found nothing inside a
MAC-derived id, the search was by the id's start). On PostgreSQL a trigram index
(licensing migration 0013, pg_trgm) serves it; bench/bench_search.py times it at scale."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from licensing.models import License
from licensing.services import license_issue, unit_activate
from tests.operators.test_admin_scale import page_query, pg_only, plan_of

pytestmark = pytest.mark.django_db

MAC_DERIVED = "cam-b827eb8e305a87"


@pytest.fixture
def cameras(customer, make_batch):
    batch = make_batch(units=5)
    for device in (MAC_DERIVED, "cam-0c1d2e3f4a5b", "lobby_50%"):
        unit_activate(batch_token=batch.license.token, device_id=device)
    direct = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="door-B8E305")
    return batch, direct


def _listed(admin_client, name: str, term: str) -> str:
    page = admin_client.get(reverse(name), {"q": term})
    assert page.status_code == 200
    return page.content.decode()


@pytest.mark.parametrize("term", ["8E305A87", "8e305a87", "EB8E", "305a87"])
def test_the_fleet_finds_a_camera_by_any_part_of_its_device_id(admin_client, cameras, term):
    text = _listed(admin_client, "admin:licensing_activation_changelist", term)
    assert MAC_DERIVED in text and "cam-0c1d2e3f4a5b" not in text


def test_the_license_list_finds_by_any_part_of_a_device_or_license_id(admin_client, cameras):
    _, direct = cameras
    text = _listed(admin_client, "admin:licensing_license_changelist", "b8e305")
    assert "door-B8E305" in text and MAC_DERIVED in text and "cam-0c1d2e3f4a5b" not in text
    middle = direct.pk[6:14]  # a part of LIC-..., not its start
    text = _listed(admin_client, "admin:licensing_license_changelist", middle.lower())
    assert direct.pk in text
    assert License.objects.filter(id__icontains=middle).count() == 1


def test_wildcards_in_a_term_are_taken_literally(admin_client, cameras):
    text = _listed(admin_client, "admin:licensing_activation_changelist", "_50%")
    assert "lobby_50%" in text and MAC_DERIVED not in text
    none = _listed(admin_client, "admin:licensing_activation_changelist", "%")
    assert "lobby_50%" in none and "cam-0c1d2e3f4a5b" not in none
    assert "0 activations" in _listed(admin_client, "admin:licensing_activation_changelist", "b_8")


@pg_only
@pytest.mark.parametrize(
    ("path", "table", "index"),
    [
        ("activation/?q=8E305A87", "licensing_activation", "activation_device_trgm"),
        ("license/?q=8E305A87", "licensing_license", "license_device_trgm"),
        ("license/?q=8E305A87", "licensing_license", "license_id_trgm"),
    ],
)
def test_a_search_by_part_reads_the_trigram_index(admin_client, cameras, path, table, index):
    """The page's own query, planned without a scan of the table or a walk of an index
    in order (on tables this small either is cheapest): what finds the rows is then the
    trigram index, and nothing else could (LIKE '%...%' cannot use a B-tree)."""
    sql = page_query(admin_client, "/admin/licensing/" + path, table)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        plan = plan_of(sql, ordered=False)
        cursor.execute("RESET enable_indexscan")
    assert f"Bitmap Index Scan on {index}" in plan, plan
    assert f"Seq Scan on {table}" not in plan, plan
