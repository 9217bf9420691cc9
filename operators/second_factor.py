"""Second factors of console users (django-otp): a TOTP authenticator and one-time
recovery codes. The console's pages are in ``console.second_factor``; this module holds
what they do, audited.

- A user enrols one authenticator: an unconfirmed TOTP device until its first right code,
  then confirmed. The secret of an enrolment is bound to the session that was shown it
  (:func:`enrolment_device_new`, :func:`enrolment_device_of`): every new enrolment page
  makes a new one, and only the session holding it may confirm it, so a secret another
  session saw (someone who knows the password, watching) never becomes the user's
  device. Confirming removes every other unconfirmed device of the user and gives ten
  recovery codes, shown once. Each of them logs in once in place of a code.
- :func:`second_factor_match` checks a code against the user's confirmed devices (the
  authenticator, then the recovery codes). A code is used once: django-otp refuses a
  TOTP code of a time step already used.
- :func:`second_factor_reset` removes another user's devices, so that user enrols again
  at the next login. It needs ``reset_second_factors`` (the caller checks it), and a
  resetter must hold at least everything the target holds (:func:`may_reset`: its
  roles, its permissions, superuser status); audited.
"""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.db import transaction
from django_otp import devices_for_user, match_token
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit.models import AuditEntry
from audit.services import audit_record_safely, audited
from config import clock
from config.errors import Forbidden, NotFound
from operators.selectors import user_holds_all_of

AUTHENTICATOR = "authenticator"
RECOVERY = "recovery codes"
RECOVERY_CODES = 10
# The session's key holding the id of the authenticator this session is enrolling.
ENROLMENT_SESSION_KEY = "second_factor_enrolment"
# An enrolment page not confirmed within this long is void (and its device removed).
ENROLMENT_MAX_AGE = dt.timedelta(minutes=30)


def has_second_factor(user) -> bool:
    return any(True for _ in devices_for_user(user, confirmed=True))


def enrolment_device_new(user, session) -> TOTPDevice:
    """A new unconfirmed authenticator for ``user``, bound to ``session`` (its id kept
    there): what an enrolment page shows. Replaces the device this session was shown
    before and removes the user's enrolments past :data:`ENROLMENT_MAX_AGE`; another
    session's current enrolment stays (it cannot confirm this one, nor this it)."""
    with transaction.atomic():
        stale = TOTPDevice.objects.filter(user=user, confirmed=False)
        previous = session.get(ENROLMENT_SESSION_KEY)
        old = stale.filter(created_at__lt=clock.now() - ENROLMENT_MAX_AGE)
        if isinstance(previous, int):
            old = old | stale.filter(pk=previous)
        old.delete()
        device = TOTPDevice.objects.create(
            user=user, name=AUTHENTICATOR, confirmed=False, created_at=clock.now()
        )
    session[ENROLMENT_SESSION_KEY] = device.pk
    return device


def enrolment_device_of(user, session) -> TOTPDevice | None:
    """The unconfirmed authenticator ``session`` was shown (:func:`enrolment_device_new`),
    if it is still there and young enough to confirm; else None."""
    pk = session.get(ENROLMENT_SESSION_KEY)
    if not isinstance(pk, int):
        return None
    return TOTPDevice.objects.filter(
        pk=pk,
        user=user,
        confirmed=False,
        created_at__gte=clock.now() - ENROLMENT_MAX_AGE,
    ).first()


def second_factor_confirm(*, user, device: TOTPDevice, token: str) -> list[str] | None:
    """Confirm ``device`` with its first right ``token``: its recovery codes (replacing
    any earlier ones), or None when the code is wrong or the user has a confirmed
    authenticator already (two sessions confirming at once: the first wins, under a lock
    of the user's row). Every other unconfirmed device of the user is removed. Audited
    when confirmed (never a code)."""
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        if has_second_factor(user):
            return None
        if not device.verify_token(token.strip().replace(" ", "")):
            return None
        device.confirmed = True
        device.save(update_fields=["confirmed"])
        TOTPDevice.objects.filter(user=user, confirmed=False).delete()
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
    recovery code, which is used up), or None. A recovery code's use is audited
    (``second_factor.recovery_code``, with the codes left): it may be someone else's."""
    token = token.strip().replace(" ", "")
    if not token or len(token) > 16:
        return None
    device = match_token(user, token)
    if isinstance(device, StaticDevice):
        left = recovery_codes_left(user)
        audit_record_safely(
            action="second_factor.recovery_code",
            result=AuditEntry.Result.OK,
            target=user.get_username(),
            detail={"recovery_codes_left": left},
            message=f"logged in with a recovery code; {left} left",
        )
    return device


def recovery_codes_left(user) -> int:
    return StaticToken.objects.filter(device__user=user, device__confirmed=True).count()


def may_reset(resetter, target) -> bool:
    """Whether ``resetter`` may reset ``target``'s second factor: it holds at least every
    role of the target, in effect: every permission the target holds (through its roles,
    Django groups, or given to it directly); :func:`operators.selectors.user_holds_all_of`.
    A superuser may reset anyone; nobody else may reset a superuser. So a key-admin
    resets viewers and other key-admins, never an operator, a finance user or a
    superuser."""
    return user_holds_all_of(resetter, target)


@audited("second_factor.reset", target=lambda result, arguments: arguments["username"])
@transaction.atomic
def second_factor_reset(*, username: str, by=None) -> int:
    """Remove every second factor of ``username`` (enrolments under way included): it
    enrols again at its next login, and any session it verified is no longer verified.
    ``by`` is the console user asking (None: the host's administrator, on the command
    line), refused (Forbidden) unless :func:`may_reset`. Returns how many devices were
    removed."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound(f"no console user named {username!r}")
    if by is not None and not may_reset(by, user):
        raise Forbidden(
            f"you may not reset the second factor of {username!r}: a resetter must hold "
            "every role and permission the user holds (a superuser's only a superuser)"
        )
    removed = 0
    for model in (TOTPDevice, StaticDevice):
        removed += model.objects.filter(user=user).delete()[1].get(model._meta.label, 0)
    return removed
