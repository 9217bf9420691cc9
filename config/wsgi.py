"""WSGI entry point (gunicorn config.wsgi). Loads the signer at start-up so a missing or
world-readable key file, or a PKCS#11 token that cannot sign (no such token or key, a
refused PIN), stops the server before it serves a single request."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from licensing.signing import signing_key  # noqa: E402 - needs Django set up first

signing_key()
