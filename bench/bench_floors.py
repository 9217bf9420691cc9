"""The device path against independent floors (issue 27): the shared
``../shared/bench/compare/run-compare`` serves a bare Django view, a bare DRF view and a
hand-written activation, each in its own gunicorn, beside this checkout's device
application (``config.device_wsgi``) on a fresh PostgreSQL database, and prints the
ratios (new activation vs hand-written, re-activation and the revocation list vs bare
DRF, ``/healthz`` vs bare Django). Run once per worker count (``FLOOR_WORKERS``,
default ``1 2 4``) to show how both scale.

Needs wrk and PostgreSQL on 127.0.0.1 (trust auth); skipped, saying why, without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMPARE = REPO.parent / "shared" / "bench" / "compare" / "run-compare"


def main() -> int:
    missing = [
        what
        for what, ok in (
            (f"{COMPARE} (the shared floors, beside the checkout)", COMPARE.exists()),
            ("wrk (apt-get install wrk)", shutil.which("wrk")),
            ("psql (PostgreSQL's client)", shutil.which("psql")),
        )
        if not ok
    ]
    if missing:
        print("skipped: missing " + ", ".join(missing))
        return 0
    # The floors' own environment: no development env file (var/dev.env) mixed in.
    env = {**os.environ, "SVC_ENV_FILE": ""}
    failed = 0
    for workers in os.environ.get("FLOOR_WORKERS", "1 2 4").split():
        print(f"-- {workers} sync worker(s) each, wrk c=16", flush=True)
        failed |= subprocess.call([str(COMPARE), str(REPO)], env={**env, "WORKERS": workers})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
