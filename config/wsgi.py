"""WSGI entry point (gunicorn config.wsgi). Loads the signer at start-up so a missing or
world-readable key file, or a PKCS#11 token that cannot sign (no such token within
signing.pkcs11_token.CONNECT_SECONDS, no such key, a refused PIN), stops the server
before it serves a single request. A key that loads but may not sign (revoked, retired,
uncertified) is said at start-up: the node serves, fails /healthz and answers 503
wherever a signature is needed, until it is pointed at a usable key."""

from __future__ import annotations

import logging
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from django.conf import settings  # noqa: E402

from config.seller import missing_message  # noqa: E402
from operators.selectors import shared_key_warning  # noqa: E402 - after setup
from signing.keyring import active_key_problem, signing_key  # noqa: E402

signing_key()
try:
    _problem = active_key_problem()
except Exception:  # noqa: BLE001 - the database may be down at start-up; /healthz says so
    _problem = ""
if _problem:
    logging.getLogger("signing.keyring").error(
        "this node answers 503 wherever a signature is needed, and /healthz fails: %s",
        _problem,
    )
try:
    _shared_key = shared_key_warning()
except Exception:  # noqa: BLE001 - the database may be down at start-up
    _shared_key = ""
if _shared_key:
    logging.getLogger("operators").warning(_shared_key)
if settings.SVC_SELLER_MISSING:
    logging.getLogger("billing").warning(missing_message(settings.SVC_SELLER_MISSING))
