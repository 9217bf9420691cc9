"""Second factors of console users (django-otp): a TOTP authenticator and one-time
recovery codes. The console's pages are in ``console.second_factor``; this module holds
what they do, audited.

- A user enrols one authenticator: an unconfirmed TOTP device until its first right code,
  then confirmed. Confirming also gives ten recovery codes, shown once. Each of them
  logs in once in place of a code.
- :func:`second_factor_match` checks a code against the user's confirmed devices (the
  authenticator, then the recovery codes). A code is used once: django-otp refuses a
  TOTP code of a time step already used.
- :func:`second_factor_reset` removes another user's devices, so that user enrols again
  at the next login. It needs ``reset_second_factors`` (the caller checks it) and is
  audited.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django_otp import devices_for_user, match_token
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.models import AuditEntry
from audit.services import audit_record_safely, audited
from config.errors import NotFound

AUTHENTICATOR = "authenticator"
RECOVERY = "recovery codes"
RECOVERY_CODES = 10


def has_second_factor(user) -> bool:
    return any(True for _ in devices_for_user(user, confirmed=True))


def enrolment_device(user) -> TOTPDevice:
    """The user's authenticator being enrolled: unconfirmed, made on first need and kept
    until confirmed, so that reloading the page shows the same QR code."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).order_by("id").first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name=AUTHENTICATOR, confirmed=False)
    return device


def second_factor_confirm(*, user, device: TOTPDevice, token: str) -> list[str] | None:
    """Confirm ``device`` with its first right ``token``: its recovery codes (replacing
    any earlier ones), or None when the code is wrong. Audited when confirmed (never a
    code)."""
    if not device.verify_token(token.strip().replace(" ", "")):
        return None
    with transaction.atomic():
        device.confirmed = True
        device.save(update_fields=["confirmed"])
        StaticDevice.objects.filter(user=user).delete()
        codes = StaticDevice.objects.create(user=user, name=RECOVERY, confirmed=True)
        tokens = [StaticToken.random_token() for _ in range(RECOVERY_CODES)]
        StaticToken.objects.bulk_create(StaticToken(device=codes, token=t) for t in tokens)
    audit_record_safely(
        action="second_factor.enrol",
        result=AuditEntry.Result.OK,
        target=user.get_username(),
        detail={"recovery_codes": len(tokens)},
        message="authenticator enrolled; recovery codes issued",
    )
    return tokens


def second_factor_match(user, token: str):
    """The confirmed device ``token`` is a right code of (the authenticator's, or a
    recovery code, which is used up), or None."""
    token = token.strip().replace(" ", "")
    if not token or len(token) > 16:
        return None
    return match_token(user, token)


def recovery_codes_left(user) -> int:
    return StaticToken.objects.filter(device__user=user, device__confirmed=True).count()


@audited("second_factor.reset", target=lambda result, arguments: arguments["username"])
@transaction.atomic
def second_factor_reset(*, username: str) -> int:
    """Remove every second factor of ``username``: it enrols again at its next login.
    Returns how many devices were removed."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound(f"no console user named {username!r}")
    removed = 0
    for model in (TOTPDevice, StaticDevice):
        removed += model.objects.filter(user=user).delete()[1].get(model._meta.label, 0)
    return removed
