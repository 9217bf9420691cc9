"""Environment for the test run, loaded as a pytest plugin (``-p config.testing`` in
pyproject) before pytest-django reads the settings. Production settings fail closed
without a secret; the tests get a throwaway one here instead of a default in settings."""

from __future__ import annotations

import os
import secrets

# Never the developer's var/dev.env (written by `make run`): tests set their own values,
# and a test of production settings must see none of the development ones.
os.environ["SVC_ENV_FILE"] = ""
os.environ.setdefault("SVC_SECRET_KEY", secrets.token_urlsafe(32))
os.environ.setdefault("SVC_ADMIN_KEY", "test-admin-key-" + secrets.token_urlsafe(16))
os.environ.setdefault("SVC_ISSUER", "svc-test")
# The test client and the live test servers speak plain HTTP on loopback, as `make run`
# does; tests/test_deploy_settings.py checks the production defaults.
os.environ.setdefault("SVC_SSL_REDIRECT", "0")
os.environ.setdefault("SVC_SECURE_COOKIES", "0")
# Console tests log in without a second factor; tests/operators/test_second_factor.py
# turns it on.
os.environ.setdefault("SVC_REQUIRE_2FA", "0")
# Production start-up requires a seller (config.seller): the demo one `make run` writes.
from config.seller import DEMO as _DEMO_SELLER  # noqa: E402

for _name, _value in _DEMO_SELLER.items():
    os.environ.setdefault(_name, _value)
