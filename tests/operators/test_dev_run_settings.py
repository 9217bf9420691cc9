"""`make run` starts the console without a second factor, as docs/configuration.md and
docs/operators.md say (issue 41): the gunicorn line runs without SVC_DEBUG, so it was on,
and a newcomer needed an authenticator app before the first console login. Production's
default (no var/dev.env) stays on."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys

import pytest
from django.core.management import call_command

from tests.conftest import REPO

pytestmark = pytest.mark.django_db

SHOW = (
    "import django; django.setup(); from django.conf import settings; "
    "print('2fa', settings.SVC_REQUIRE_2FA, 'debug', settings.DEBUG)"
)


def make_run_exports() -> dict[str, str]:
    """The variables the Makefile's run target exports before gunicorn, read as make
    does from the `export ...` line (with its continuation) of the run recipe."""
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    line = re.search(r"export ((?:[^;\n]|\\\n)+);", recipe)
    assert line, "the run target exports its environment before gunicorn"
    words = shlex.split(line.group(1).replace("\\\n", " "))
    assert "gunicorn" in recipe.split("export", 1)[1]
    return dict(word.split("=", 1) for word in words)


def settings_of(environment: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "DJANGO_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", **environment})
    result = subprocess.run(
        [sys.executable, "-c", SHOW],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_make_run_serves_the_console_without_a_second_factor(tmp_path):
    exports = make_run_exports()
    assert "SVC_DEBUG" not in exports  # gunicorn runs production code paths
    assert exports["SVC_ENV_FILE"] == "var/dev.env"
    # dev_setup writes that file (var/ by default; here into tmp_path, as --var does).
    call_command("dev_setup", var=str(tmp_path), stdout=io.StringIO())
    written = (tmp_path / "dev.env").read_text()
    assert "SVC_REQUIRE_2FA=0" in written.splitlines()
    served = settings_of({**exports, "SVC_ENV_FILE": str(tmp_path / "dev.env")})
    assert served == "2fa False debug False"


def test_production_defaults_keep_the_second_factor(tmp_path):
    call_command("dev_setup", var=str(tmp_path), stdout=io.StringIO())
    # The same secrets, but not the development file: 2FA is on.
    secrets = dict(
        line.split("=", 1)
        for line in (tmp_path / "dev.env").read_text().splitlines()
        if line.startswith(("SVC_SECRET_KEY=", "SVC_ADMIN_KEY=", "SVC_SELLER_"))
    )
    assert settings_of({"SVC_ENV_FILE": "", **secrets}) == "2fa True debug False"
