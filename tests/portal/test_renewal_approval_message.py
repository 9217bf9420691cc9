"""Approving a customer's renewal request says each new end (issue 41: the renew result
names the new end date), as the console's own renewal does; the portal's request list
shows it in its "New end" column."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from config.admin.display import utc_time
from licensing.models import Batch

pytestmark = pytest.mark.django_db


def test_approval_names_the_new_end_in_the_console_and_the_portal(worlds, admin_client):
    alpha, _ = worlds
    url = "/admin/portal/renewalrequest/"
    response = admin_client.post(
        url, {"action": "approve", "_selected_action": [alpha.renewal.pk], "apply": "1"}
    )
    assert response.status_code == 302
    new_end = utc_time(Batch.objects.get(pk=alpha.batch.pk).expires_at)
    said = " | ".join(str(m) for m in get_messages(response.wsgi_request))
    assert f"Approved 1 renewal request (batch {alpha.batch.pk} now ends {new_end})" in said, said
    portal = alpha.client().get("/portal/renewals/").content.decode()
    assert new_end.removesuffix(" UTC") in portal
