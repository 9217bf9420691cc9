"""The portal and the console show each unit's check-in lease end and its suspension
(issue 42), in the same words: the portal's fleet, its search and its batch page, the
console's licence list and fleet."""

from __future__ import annotations

import datetime as dt

from django.urls import reverse

from licensing import services
from licensing.models import Batch, License
from svccore import dates
from svccore.timeunits import DAY


def test_portal_and_console_show_lease_end_and_suspension(
    worlds, server_clock, admin_client, admin_user
):
    alpha, beta = worlds
    Batch.objects.filter(pk=alpha.batch.pk).update(max_offline_days=7)
    unit = License.objects.get(pk=alpha.units[0])
    License.objects.filter(pk=unit.pk).update(checked_in_at=unit.issued_at)
    lease_to = dates.moment(unit.issued_at + dt.timedelta(days=7))
    client = alpha.client()
    for page in (
        client.get(reverse("portal-fleet")),
        client.get(reverse("portal-fleet"), {"q": "Alpha-cam"}),
        client.get(reverse("portal-batch", args=[alpha.batch.pk])),
        admin_client.get("/admin/licensing/license/", {"q": unit.pk}),
        admin_client.get("/admin/licensing/activation/", {"q": "Alpha-cam-001"}),
    ):
        text = page.content.decode()
        assert page.status_code == 200
        assert f"lease to {lease_to}" in text, page.request["PATH_INFO"]
    server_clock(8 * DAY)
    client = alpha.client()  # a new session: the first one idled out over the week
    lapsed = client.get(reverse("portal-fleet")).content.decode()
    assert f"lease ended {lease_to}: sync needed" in lapsed and "svc-lease-lapsed" in lapsed
    services.license_suspend(batch_id=alpha.batch.pk, reason="invoice unpaid")
    admin_client.force_login(admin_user)  # the console's session idled out too
    for page in (
        client.get(reverse("portal-fleet")),
        admin_client.get("/admin/licensing/activation/", {"q": "Alpha-cam-001"}),
        admin_client.get("/admin/licensing/license/", {"q": unit.pk}),
    ):
        assert 'svc-state-suspended">suspended</span>' in page.content.decode()
    # Another customer's units are neither leased nor suspended.
    other = beta.client().get(reverse("portal-fleet")).content.decode()
    assert "suspended" not in other and "lease to" not in other
