"""The changing fleet of ``bench/bench_status_scale.py``: licences revoked through the
service (``licensing.services.license_revoke``: the licence, its revocation-list entry,
the event), at a steady rate, until SIGTERM; then prints how many it revoked.

A revocation re-signs that licence's statuses at their next request and nothing else
(``licensing.status_store``: the basis holds the revocation time), so this is the whole
of what a change costs the service besides the revocation itself. The licences come one
a line from a file, in the order to revoke them; each second's share is revoked in one
transaction. Run by the benchmark as ``python bench/_status_churn.py IDS PER_SECOND``
with its environment (Django's settings, DATABASE_URL under a role of its own, so the
benchmark can leave this process's queries out of the service's).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ids_file, per_second = sys.argv[1], float(sys.argv[2])
    import django

    django.setup()
    from django.db import transaction

    from licensing.services import license_revoke

    stopping = False

    def stop(*_) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    ids = Path(ids_file).read_text().split()
    done = 0
    started = time.monotonic()
    while not stopping and done < len(ids):
        due = min(len(ids), int((time.monotonic() - started) * per_second))
        if due > done:
            with transaction.atomic():
                for license_id in ids[done:due]:
                    license_revoke(license_id=license_id, reason="bench: churn")
            done = due
        time.sleep(0.05)
    seconds = time.monotonic() - started
    print(f"{done} {seconds:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
