"""Settings of the device application (``config.device_wsgi``): the service's settings
(``config.settings``, every variable the same) with the device API's routes and only the
middleware a camera's request needs.

Kept: response counting (``/metrics``), replica reads (``config.replica``), NUL-byte
refusal, proxy/TLS handling of forwarded headers, Django's security headers,
X-Frame-Options, and the audit actor (the client address of a refusal that is
recorded). Left out, because no device request uses them: static files, sessions, CSRF
(device views take no cookie), the console's login (authentication, messages, axes
lockouts) and CommonMiddleware's URL rewriting.
Throttling, limits and error bodies live in the views and the exception handler, which
both applications share.
"""

from __future__ import annotations

from config.settings import *  # noqa: F403 - the one settings file, narrowed below

ROOT_URLCONF = "config.device_urls"
WSGI_APPLICATION = "config.device_wsgi.application"
MIDDLEWARE = [
    "config.middleware.RetryAfterMiddleware",
    "config.metrics.ResponseCountMiddleware",
    "config.replica.ReplicaReadsMiddleware",
    "config.middleware.NulByteMiddleware",
    "config.middleware.UntrustedForwardingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "audit.middleware.AuditActorMiddleware",
]
