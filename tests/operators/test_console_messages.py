"""The console's messages say what happened (issue 41): "Revoked 1 unit licence" was
flashed for a licence revoked before; the key-revoke page counted "312 unit (activated
from a batch)s" (a plural built from a display label); the index showed "OTP_STATIC",
"OTP_TOTP" and "TOTP devices" beside cameras called devices."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from config.admin.display import utc_time
from devices import token as codec
from licensing.models import Activation, Batch, License
from licensing.services import license_issue, license_revoke, unit_activate
from signing.models import SigningKey

pytestmark = pytest.mark.django_db


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _revoke(admin_client, *license_ids: str):
    return admin_client.post(
        reverse("admin:licensing_license_changelist"),
        {
            "action": "revoke_licenses",
            "_selected_action": list(license_ids),
            "apply": "1",
            "reason": "stolen",
        },
    )


def test_revoking_a_revoked_license_says_nothing_changed(admin_client, customer):
    lic = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    license_revoke(license_id=lic.pk, reason="first")
    shown = _messages(_revoke(admin_client, lic.pk))
    assert shown == [
        "1 licence was already revoked: nothing changed (the first time and reason stay)."
    ]
    assert License.objects.get(pk=lic.pk).revoke_reason == "first"


def test_a_mixed_selection_counts_what_was_revoked_and_what_already_was(admin_client, customer):
    fresh = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="cam-1")
    old = [
        license_issue(customer_id=customer.id, sku="DETECT-STD", device_id=f"cam-{n}")
        for n in (2, 3)
    ]
    for lic in old:
        license_revoke(license_id=lic.pk, reason="earlier")
    shown = _messages(_revoke(admin_client, fresh.pk, *(lic.pk for lic in old)))
    assert shown == [
        "Revoked 1 licence; devices drop them at their next sync.",
        "2 licences were already revoked: nothing changed (the first time and reason stay).",
    ]


def test_releasing_a_released_seat_says_so(admin_client, make_batch):
    batch = make_batch(units=5)
    unit_activate(batch_token=batch.license.token, device_id="cam-dead")
    url = reverse("admin:licensing_activation_changelist")
    record = Activation.objects.get(device_id="cam-dead")
    body = {"action": "release_seats", "_selected_action": [record.pk], "apply": "1",
            "reason": "dead"}  # fmt: skip
    first = _messages(admin_client.post(url, body))
    assert len(first) == 1 and first[0].startswith("Released 1 seat:")
    admin_client.get(url)  # the list shows (and so clears) that message
    again = _messages(admin_client.post(url, body))
    assert again == [
        "1 seat was already released: nothing changed (the first time and reason stay)."
    ]


def test_the_key_revoke_page_counts_licenses_in_words(admin_client, make_batch, signing_key):
    public = signing_key.public_key()
    SigningKey.objects.get_or_create(
        kid=codec.key_id(public),
        defaults={
            "public_key": codec.public_key_b64url(public),
            "fingerprint": codec.key_fingerprint(public),
            "use": SigningKey.Use.ONLINE,
        },
    )
    batch = make_batch(units=5)
    for n in range(3):
        unit_activate(batch_token=batch.license.token, device_id=f"cam-{n}")
    kid = License.objects.get(pk=batch.license_id).claims["kid"]
    key = SigningKey.objects.get(pk=kid)
    page = admin_client.post(
        reverse("admin:signing_signingkey_changelist"),
        {"action": "revoke_keys", "_selected_action": [key.pk]},
    )
    text = page.content.decode()
    assert page.status_code == 200 and "3 unit licences" in text and "1 batch key" in text
    assert "(activated from a batch)s" not in text


def test_the_index_names_the_second_factors_for_people(admin_client):
    text = admin_client.get(reverse("admin:index")).content.decode()
    shown = (
        "Second factor: authenticator apps",
        "Second factor: recovery codes",
        "Enrolled authenticator apps (one-time codes)",
        "Recovery code lists",
    )
    for name in shown:
        assert name in text, name
    for raw in ("Otp_Totp", "Otp_Static", "TOTP devices", "Static devices"):
        assert raw not in text, raw


def test_a_renewal_says_the_new_end_and_a_resent_form_renews_nothing(admin_client, make_batch):
    batch = make_batch(units=2, sku="DETECT-STD")
    url = reverse("admin:licensing_batch_changelist")
    body = {"action": "renew_batches", "_selected_action": [batch.pk], "apply": "1",
            "request_key": "k1", "term_days": "30", "quoted_term": "30"}  # fmt: skip
    shown = _messages(admin_client.post(url, body))
    new_end = utc_time(Batch.objects.get(pk=batch.pk).expires_at)
    assert shown == [
        f"Renewed 1 batch ({batch.pk} now ends {new_end}); billed once each as a renewal "
        "line. Cameras fetch their renewed licences at their next sync."
    ]
    admin_client.get(url)  # the list shows (and so clears) that message
    again = _messages(admin_client.post(url, body))
    assert again == [
        "1 batch already renewed by this form (sent twice): nothing renewed or billed again."
    ]
