"""Copy buttons for a secret shown once (issue 41): the new API key, a webhook's signing
secret, recovery codes and a new operator key each have a Copy button for
static/svc/console.js (no inline script), hidden until the script shows it; without
script the secret is still plain, selectable text and no dead button is shown. The walk
(tests/test_browser_walk.py) clicks one in Chromium and reads the clipboard."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def _button(page: str, target: str) -> str:
    found = re.search(rf'<button type="button" class="button" data-copy="{target}"[^>]*>', page)
    assert found, f"no Copy button for #{target}"
    return found[0]


def test_new_api_key_and_webhook_secret_have_copy_buttons(worlds):
    alpha, _ = worlds
    client = alpha.client()
    page = client.post("/portal/api-keys/", {"name": "fleet-sync"}).content.decode()
    key = re.search(r'<p class="svc-secret" id="new-key-value">([^<]+)</p>', page)[1]
    assert key.startswith("svc_") or len(key) > 20
    assert " hidden" in _button(page, "new-key-value")
    assert "<script" not in page.split("</head>", 1)[1]  # no inline script in the body
    assert 'src="/static/svc/console.js"' in page
    page = client.post(f"/portal/webhooks/{alpha.webhook.pk}/rotate/").content.decode()
    assert re.search(r'<p class="svc-secret" id="webhook-secret-value">whsec_', page)
    assert " hidden" in _button(page, "webhook-secret-value")
