"""WSGI entry point of the device API alone (``gunicorn config.device_wsgi``): the
routes cameras call (activate, usage, licence refresh, revocation list, healthz) and
``/metrics``, with only the middleware they need (``config.device_settings``). The
console and the admin API stay in ``config.wsgi``; the edge routes by path
(``deploy/nginx``). One process serving both, as ``make run`` does, is ``config.wsgi``,
which has every route.

Start-up is ``config.wsgi``'s: the signer is loaded first, so a missing or unusable key
stops the server before it serves."""

from __future__ import annotations

import os

# This application is the device one whatever the environment says: its settings are
# the service's, narrowed (config.device_settings).
os.environ["DJANGO_SETTINGS_MODULE"] = "config.device_settings"

from config.wsgi import application  # noqa: E402, F401 - the same start-up checks
