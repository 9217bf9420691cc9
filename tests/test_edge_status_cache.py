"""The edge's caches (issue 46): nginx with deploy/nginx/licensing.conf.template and its
status-cache.conf and list-cache.conf, in front of a device node (config.device_wsgi)
whose clock the test holds (SVC_TEST_CLOCK_FILE, stopped).

A second status GET is served from nginx's cache (X-Cache-Status: HIT, no new
signature), a device's If-None-Match is answered 304 by nginx, a revocation reaches the
device once the entry's max-age has run out (nginx revalidates with the cached ETag and
gets the revoked status), an unchanged status is revalidated with a node's 304, and the
list's pages are cached and revalidated too. The only real-time wait is nginx's own
max-age of one second, awaited by polling for the entry to stop being a HIT: what the
test asserts is what comes after, never how long it took."""

from __future__ import annotations

import datetime as dt
import shutil
import time
import urllib.parse

import pytest

from config import clock
from devices.documents import parse_status, status_etag
from licensing.models import StatusDocument
from licensing.services import license_issue, license_revoke
from signing import keyring
from tests.conftest import start_gunicorn, stop_gunicorn, tool_missing
from tests.test_edge import NGINX, SERVER_NAME, EdgeConnection, _call, _start_nginx

T = dt.datetime(2026, 7, 1, 9, 0, tzinfo=dt.UTC)
WINDOW = 3600

pytestmark = [
    pytest.mark.live,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="module")
def cached_edge(django_db_setup, signing_key_file, tmp_path_factory):
    """nginx -> one device node, the node's clock stopped at T (``cached_edge.at``)."""
    if NGINX is None:
        tool_missing("nginx is not installed (apt-get install nginx; .ci/run does)")
    directory = tmp_path_factory.mktemp("edge-cache")
    clock_file = directory / "server-clock"
    clock.stop_at(clock_file, T)
    node = start_gunicorn(
        directory,
        app="config.device_wsgi",
        SVC_TEST_CLOCK_FILE=str(clock_file),
        SVC_TRUSTED_PROXIES="127.0.0.1/32",
        SVC_ALLOWED_HOSTS=f"{SERVER_NAME},127.0.0.1",
        SVC_STATUS_WINDOW_SECONDS=str(WINDOW),
        SVC_STATUS_MAX_AGE="300",
    )
    nginx = None
    try:
        nginx, edge = _start_nginx(directory, [node])
        edge.at = lambda seconds: clock.stop_at(clock_file, T + dt.timedelta(seconds=seconds))
        yield edge
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(timeout=10)
        stop_gunicorn(node)
        shutil.rmtree(directory / "cache", ignore_errors=True)


def _path(license_id: str, device_id: str) -> str:
    return "/v1/revocations/status?" + urllib.parse.urlencode(
        {"license_id": license_id, "device_id": device_id}
    )


def _status(edge, license_id: str, device_id: str, **headers):
    return _call(EdgeConnection(edge), "GET", _path(license_id, device_id), headers=headers)


def _direct(edge, license_id: str, device_id: str) -> None:
    """A status asked of the node itself (no cache): what it signs is stored."""
    import urllib.request

    url = edge.nodes[0].url + _path(license_id, device_id)
    request = urllib.request.Request(url, headers={"X-Forwarded-Proto": "https"})
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        assert answer.status == 200


def _until_not_hit(edge, license_id: str, device_id: str):
    """The first answer nginx does not give from a fresh entry (max-age is 1 s here)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = _status(edge, license_id, device_id)
        if answer.headers["X-Cache-Status"] != "HIT":
            return answer
        time.sleep(0.2)
    raise AssertionError("nginx kept serving a one-second entry for 30 s")


@pytest.fixture
def customer_id(customer):
    return customer.id


def test_a_second_status_get_is_served_by_nginx_and_a_held_status_is_a_304(
    cached_edge, customer_id
):
    cached_edge.at(0)
    lic = license_issue(customer_id=customer_id, sku="DETECT-STD", device_id="cam-edge-1")
    first = _status(cached_edge, lic.id, "cam-edge-1")
    assert first.status == 200 and first.headers["X-Cache-Status"] == "MISS"
    assert first.headers["Cache-Control"] == "public, max-age=300"
    document = first.json()["status"]
    assert first.headers["ETag"] == status_etag(document)
    signed = StatusDocument.objects.get(license_id=lic.id).issued_at
    again = _status(cached_edge, lic.id, "cam-edge-1")
    assert again.status == 200 and again.headers["X-Cache-Status"] == "HIT"
    assert again.body == first.body
    assert StatusDocument.objects.get(license_id=lic.id).issued_at == signed  # no new one
    # Another device's status of the same licence is another entry.
    other = _status(cached_edge, lic.id, "cam-edge-2")
    assert other.headers["X-Cache-Status"] == "MISS" and other.json()["device_id"] == "cam-edge-2"
    # The device names the status it holds: nginx answers 304 from the entry.
    held = _status(cached_edge, lic.id, "cam-edge-1", **{"If-None-Match": status_etag(document)})
    assert held.status == 304 and held.body == b""
    assert held.headers["X-Cache-Status"] == "HIT" and held.headers["ETag"] == first.headers["ETag"]


def test_a_revocation_reaches_the_device_when_the_entry_is_revalidated(cached_edge, customer_id):
    cached_edge.at(0)
    lic = license_issue(customer_id=customer_id, sku="DETECT-STD", device_id="cam-edge-3")
    _direct(cached_edge, lic.id, "cam-edge-3")  # signed at T, its window ends at T + 3600
    cached_edge.at(WINDOW - 1)  # one second of the window left: max-age=1
    cached = _status(cached_edge, lic.id, "cam-edge-3")
    assert cached.headers["X-Cache-Status"] == "MISS"
    assert cached.headers["Cache-Control"] == "public, max-age=1"
    assert not cached.json()["revoked"]
    license_revoke(license_id=lic.id, reason="stolen")
    answer = _until_not_hit(cached_edge, lic.id, "cam-edge-3")
    # nginx asked the node with the cached ETag; the status changed, so a 200 came back.
    assert answer.status == 200 and answer.headers["X-Cache-Status"] == "EXPIRED"
    status = parse_status(answer.json()["status"], keyring.public_key())
    assert status.revoked and answer.headers["ETag"] != cached.headers["ETag"]
    assert answer.headers["Cache-Control"] == "public, max-age=300"  # a new window
    assert _status(cached_edge, lic.id, "cam-edge-3").headers["X-Cache-Status"] == "HIT"


def test_an_unchanged_status_is_revalidated_with_the_node_s_304(cached_edge, customer_id):
    cached_edge.at(0)
    lic = license_issue(customer_id=customer_id, sku="DETECT-STD", device_id="cam-edge-4")
    _direct(cached_edge, lic.id, "cam-edge-4")
    cached_edge.at(WINDOW - 1)
    cached = _status(cached_edge, lic.id, "cam-edge-4")
    assert cached.headers["Cache-Control"] == "public, max-age=1"
    answer = _until_not_hit(cached_edge, lic.id, "cam-edge-4")
    assert answer.status == 200 and answer.headers["X-Cache-Status"] == "REVALIDATED"
    assert answer.body == cached.body and answer.headers["ETag"] == cached.headers["ETag"]
    # The node's 304 carried max-age=1 (the window's last second): nginx never holds the
    # document past its window.
    assert answer.headers["Cache-Control"] == "public, max-age=1"


def test_list_pages_are_cached_and_revalidated(cached_edge):
    first = _call(EdgeConnection(cached_edge), "GET", "/v1/revocations?since=0")
    assert first.status == 200 and first.headers["X-Cache-Status"] in {"MISS", "EXPIRED"}
    assert first.headers["Cache-Control"] == "no-cache"  # devices and CDNs revalidate
    again = _call(
        EdgeConnection(cached_edge),
        "GET",
        "/v1/revocations?since=0",
        headers={"If-None-Match": first.headers["ETag"]},
    )
    assert again.status == 304
    later = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        later = _call(EdgeConnection(cached_edge), "GET", "/v1/revocations?since=0")
        if later.headers["X-Cache-Status"] != "HIT":
            break
        time.sleep(0.2)
    assert later is not None and later.headers["X-Cache-Status"] in {"REVALIDATED", "EXPIRED"}
    assert later.status == 200
