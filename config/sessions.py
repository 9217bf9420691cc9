"""Console and portal sessions end when idle and when old (issue 39).

A signed-in session (the console's staff, the portal's customer users) ends
``SVC_SESSION_IDLE_SECONDS`` after its last request (default 1800: 30 minutes) and
``SVC_SESSION_MAX_SECONDS`` after it signed in, however busy (default 43200: 12 hours).
An ended session is logged out (flushed, its id replaced) before the view runs, so the
console and the portal answer as to anyone not signed in: a redirect to their login page.
The API (``/v1/``, keys, no session) is not concerned.

Times are the server's clock (:mod:`config.clock`), kept in the session as Unix seconds.
The last activity is written at most every :func:`touch_interval` seconds (a tenth of the
idle limit, at most a minute), not on every request: a session ends between ``idle`` and
``idle + touch_interval`` seconds after its last request.
"""

from __future__ import annotations

from collections.abc import Callable

from django.apps import AppConfig
from django.conf import settings
from django.contrib.auth import SESSION_KEY, logout
from django.contrib.auth.signals import user_logged_in
from django.http import HttpRequest, HttpResponse

from config import clock

STARTED = "svc_session_started"
SEEN = "svc_session_seen"
# Paths that carry no signed-in session of their own.
_SESSIONLESS = ("/v1/", "/healthz", "/metrics", "/static/")


def touch_interval() -> int:
    return max(1, min(60, settings.SVC_SESSION_IDLE_SECONDS // 10))


def expired_because(session, now: float) -> str | None:
    """Why the signed-in ``session`` has ended at ``now`` (Unix seconds), or None."""
    started, seen = session.get(STARTED), session.get(SEEN)
    if started is None or seen is None:
        return None
    if now - started >= settings.SVC_SESSION_MAX_SECONDS:
        return "lifetime"
    if now - seen >= settings.SVC_SESSION_IDLE_SECONDS:
        return "idle"
    return None


def start(session, now: float) -> None:
    session[STARTED] = session[SEEN] = now


def _logged_in(sender, request, user, **kwargs) -> None:
    """Every login starts a new lifetime: also one that keeps its session's data (Django
    keeps it when the same user signs in again)."""
    if request is not None and hasattr(request, "session"):
        start(request.session, clock.now().timestamp())


class SessionLimits(AppConfig):
    """Connects :func:`_logged_in` (INSTALLED_APPS names this config)."""

    name = "config"
    label = "svc_sessions"
    verbose_name = "Session limits"

    def ready(self) -> None:
        user_logged_in.connect(_logged_in, dispatch_uid="config.sessions.start")


class SessionLimitsMiddleware:
    """Ends an idle or too old signed-in session (see the module's docstring). After
    Django's session and authentication middleware, before anything reads the user."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(_SESSIONLESS) or request.path == "/metrics":
            return self.get_response(request)
        session = request.session
        now = clock.now().timestamp()
        if SESSION_KEY in session and expired_because(session, now):
            logout(request)  # flushes the session and gives it a new id
        response = self.get_response(request)
        # A session that is signed in after the view (a login, or an ongoing one).
        session = request.session
        if SESSION_KEY in session:
            if session.get(STARTED) is None:
                start(session, now)
            elif now - session.get(SEEN, 0) >= touch_interval():
                session[SEEN] = now
        return response
