"""Two-factor console logins (``SVC_REQUIRE_2FA``): after the password, a code from an
authenticator app (TOTP), or one of the user's recovery codes.

:class:`SecondFactorMiddleware` sends a staff user whose session has passed no second
factor to :func:`second_factor` before any other console page. A user with no
authenticator enrols there first: a QR code (and the secret to type in), then the
first code, then ten recovery codes, shown once. Every enrolment page shows a new
secret, bound to the session that saw it: only that session can confirm it. The
session id changes at every step up (the password, by Django's login; the second factor,
here) and at logout, so a copy of an earlier session id is worth nothing. A wrong code
counts as a failed login for django-axes, so the password's lockout covers codes too,
and wrong codes of one account from any address lock it (:mod:`operators.lockout`). A user who is
locked out is logged out. The work itself (devices, codes, the audit) is
:mod:`operators.second_factor`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import segno
from axes.handlers.proxy import AxesProxyHandler
from axes.utils import reset as axes_reset
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import logout, user_login_failed
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp import login as otp_login

from operators.lockout import CODE
from operators.second_factor import (
    ENROLMENT_SESSION_KEY,
    enrolment_device_new,
    enrolment_device_of,
    has_second_factor,
    recovery_codes_left,
    second_factor_confirm,
    second_factor_match,
)

PATH = "/admin/second-factor/"
# What a user may reach before its second factor: logging in and out, this page.
OPEN = ("/admin/login/", "/admin/logout/", PATH)


class SecondFactorMiddleware:
    """With ``SVC_REQUIRE_2FA``, a logged-in staff user whose session has passed no
    second factor reaches only :data:`OPEN` of the console; anything else redirects to
    :data:`PATH` (and back afterwards)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            settings.SVC_REQUIRE_2FA
            and request.path.startswith("/admin/")
            and not request.path.startswith(OPEN)
        ):
            user = getattr(request, "user", None)
            if user is not None and user.is_authenticated and not user.is_verified():
                query = urlencode({"next": request.get_full_path()})
                return HttpResponseRedirect(f"{PATH}?{query}")
        return self.get_response(request)


class CodeForm(forms.Form):
    code = forms.CharField(
        max_length=20,
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "autofocus": True, "size": 12}
        ),
        help_text="The 6 digits your authenticator app shows now, or one recovery code.",
    )


@dataclass(frozen=True)
class Site:
    """Where a second-factor page lives: the console's, or the customer portal's."""

    template: str
    codes_template: str
    home: str  # URL name of where to go without a ``next``
    login: str  # URL name of the login page
    logout: str  # URL name of the logout page
    context: Callable[[HttpRequest], dict]


CONSOLE = Site(
    template="console/second_factor.html",
    codes_template="console/second_factor_codes.html",
    home="admin:index",
    login="admin:login",
    logout="admin:logout",
    context=admin.site.each_context,
)


def _next(request: HttpRequest, site: Site = CONSOLE) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return reverse(site.home)


def _credentials(request: HttpRequest) -> dict:
    return {"username": request.user.get_username()}


def _locked_out(request: HttpRequest, site: Site) -> HttpResponse:
    logout(request)
    messages.error(
        request,
        f"Too many wrong passwords or codes: this account is locked for "
        f"{settings.AXES_COOLOFF_TIME * 60:g} minutes. An administrator can lift it "
        "(manage.py axes_reset_username NAME).",
    )
    return HttpResponseRedirect(reverse(site.login))


def second_factor(request: HttpRequest, site: Site = CONSOLE) -> HttpResponse:
    """Ask the code (or enrol the authenticator first), then go on to ``next``."""
    user = request.user
    if user.is_verified():
        return HttpResponseRedirect(_next(request, site))
    if AxesProxyHandler.is_locked(request, _credentials(request)):
        return _locked_out(request, site)
    enrolled = has_second_factor(user)
    device = None
    form = CodeForm(request.POST or None)
    if not enrolled:
        if request.method == "POST":
            device = enrolment_device_of(user, request.session)
        if device is None:
            if request.method == "POST" and form.is_valid():
                form.add_error(
                    "code",
                    "This set-up page has expired or was replaced: scan the new code below "
                    "and enter the 6 digits it shows.",
                )
            device = enrolment_device_new(user, request.session)
    base = {**site.context(request), "logout_url": reverse(site.logout)}
    if request.method == "POST" and form.is_valid():
        code = form.cleaned_data["code"]
        if enrolled:
            matched = second_factor_match(user, code)
            recovery = None
        else:
            recovery = second_factor_confirm(user=user, device=device, token=code)
            matched = device if recovery else None
        if matched is not None:
            otp_login(request, matched)
            # A step up: the pre-verification session id must not carry it (fixation).
            request.session.cycle_key()
            request.session.pop(ENROLMENT_SESSION_KEY, None)
            axes_reset(username=user.get_username())
            if recovery:
                return TemplateResponse(
                    request,
                    site.codes_template,
                    {**base, "title": "Recovery codes", "codes": recovery,
                     "next": _next(request, site)},
                )  # fmt: skip
            if matched.persistent_id.startswith("otp_static"):
                messages.warning(
                    request,
                    f"You logged in with a recovery code; {recovery_codes_left(user)} left.",
                )
            return HttpResponseRedirect(_next(request, site))
        # A wrong code, marked so: codes count per account from any address too.
        user_login_failed.send(
            sender=__name__, credentials={**_credentials(request), CODE: True}, request=request
        )
        if AxesProxyHandler.is_locked(request, _credentials(request)):
            return _locked_out(request, site)
        form.add_error(
            "code",
            "That code is not right, was already used, or came too soon after a wrong one: "
            "wait for the next code and enter it.",
        )
    context = {
        **base,
        "title": "Second factor" if enrolled else "Set up your authenticator",
        "form": form,
        "enrolled": enrolled,
        "next": _next(request, site),
    }
    if device is not None:
        context["qr_svg"] = segno.make(device.config_url, error="m").svg_inline(scale=4)
        context["secret"] = _base32(device.bin_key)
    return TemplateResponse(request, site.template, context)


def _base32(key: bytes) -> str:
    """The key as an authenticator app takes it typed in: base32 in groups of four."""
    text = base64.b32encode(key).decode().rstrip("=")
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))
