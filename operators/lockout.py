"""Login lockout (django-axes) for the console and the portal: three rules over the
failures of the cool-off window (``SVC_LOGIN_COOLOFF_MINUTES``), on top of axes' records.

A login (password, or a second-factor code) is refused (429) while any of these holds:

- **per account and address**: ``SVC_LOGIN_FAILURE_LIMIT`` (5) failures of one account
  from one address: someone guessing one password;
- **per account, every address**: ``SVC_LOGIN_ACCOUNT_FAILURE_LIMIT`` (20) failures of one
  account from any number of addresses: guessing spread over a botnet;
- **per address, every account**: ``SVC_LOGIN_ADDRESS_FAILURE_LIMIT`` (20) failures from
  one address over any number of accounts: password spraying;
- **codes, per account**: ``SVC_LOGIN_FAILURE_LIMIT`` wrong second-factor codes of one
  account from any addresses. Whoever gives codes knows the password already, so a
  second address does not get fresh tries.

Wrong codes are recorded by axes like wrong passwords, their user agent replaced by
:data:`CODE_AGENT` so the last rule can count them (a browser sending that user agent
for a password has it changed, so it cannot pass passwords off as codes). A right code
clears the account's failures (``axes_reset``); ``manage.py axes_reset_username NAME``
lifts an account's lockout, ``axes_reset_ip ADDRESS`` an address's.

Both are on the audit log as refusals (:func:`audit.services.audit_refusal`, counted per
minute): a wrong code ``second_factor.wrong_code``, a login refused for a lockout (the
attempt that locks, and each one while locked) ``login.locked_out``, the account tried
its actor.
"""

from __future__ import annotations

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Sum

from audit.context import Actor, note_refusal
from audit.services import audit_refusal
from config.clientip import client_ip

# The ``credentials`` key the second-factor page sets on a wrong code's failure.
CODE = "second_factor_code"
# What a wrong code's axes record holds as its user agent.
CODE_AGENT = "(second-factor code)"


def _total(attempts) -> int:
    return attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0


def _actor(request, username: str) -> Actor:
    """The account a login tried, as the audit log's actor (its kind from the account;
    an unknown name is a console or portal login's by where it came)."""
    user = get_user_model().objects.filter(username=username).first() if username else None
    if user is not None:
        kind = "superuser" if user.is_superuser else "staff" if user.is_staff else "customer"
    else:
        kind = "customer" if request.path.startswith("/portal/") else "staff"
    return Actor(name=(username or "(no name)")[:150], kind=kind, ip=client_ip(request) or None)


def _record(request, credentials: dict) -> None:
    """Record a wrong code, and a login the lockout refuses (once: the answer's 429
    is not recorded again)."""
    username = get_client_username(request, credentials) or ""
    target = f"{request.method} {request.path}"
    if credentials.get(CODE):
        audit_refusal(
            action="second_factor.wrong_code",
            status=None,
            target=target,
            message="a wrong, used or early second-factor code",
            actor=_actor(request, username),
        )
    if getattr(request, "axes_locked_out", False):
        audit_refusal(
            action="login.locked_out",
            status=429,
            target=target,
            message="login refused: locked out (operators.lockout)",
            detail={"by": "second-factor code" if credentials.get(CODE) else "password"},
            actor=_actor(request, username),
        )
        note_refusal(request, recorded=True)


class LockoutHandler(AxesDatabaseHandler):
    """axes' database handler, counting failures by the module's rules."""

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs):
        agent = getattr(request, "axes_user_agent", None)
        if agent is not None:
            if credentials.get(CODE):
                request.axes_user_agent = CODE_AGENT
            elif agent == CODE_AGENT:
                request.axes_user_agent = f"{CODE_AGENT} as sent"
        try:
            super().user_login_failed(sender, credentials, request, **kwargs)
        finally:
            if agent is not None:
                request.axes_user_agent = agent
        if request is not None:
            _record(request, credentials)

    def get_failures(self, request, credentials: dict | None = None) -> int:
        """The failures of the account and address by the pair rule, or at least the
        failure limit when any other rule locks them out (axes compares the answer with
        ``AXES_FAILURE_LIMIT``)."""
        recent = AccessAttempt.objects.filter(attempt_time__gte=get_cool_off_threshold(request))
        username = get_client_username(request, credentials)
        address = request.axes_ip_address
        pair = _total(recent.filter(username=username, ip_address=address)) if username else 0
        limit = settings.AXES_FAILURE_LIMIT
        if _total(recent.filter(ip_address=address)) >= settings.SVC_LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(pair, limit)
        if username and (
            _total(recent.filter(username=username)) >= settings.SVC_LOGIN_ACCOUNT_FAILURE_LIMIT
            or _total(recent.filter(username=username, user_agent=CODE_AGENT)) >= limit
        ):
            return max(pair, limit)
        return pair
