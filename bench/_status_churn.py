"""The changing fleet of ``bench/bench_status_scale.py``: licences revoked at a steady
rate until SIGTERM; then prints how many it revoked and in how many seconds.

A revocation re-signs that licence's statuses at their next request and nothing else
(``licensing.status_store``: the basis holds the revocation time, no writer
invalidates), so the revocation itself is the whole of what a change costs besides the
re-signing. Two ways (``MODE``):

- ``sql`` (the default): the service's writes as one statement a second for that
  second's share: the licences' revocation time and reason, the list's entries numbered
  on from the head, the head moved on (``license_revoke`` and ``revocation_append``,
  without the outbox event). On the shared 2-core machine the service path below
  reached a quarter of 1 % a minute of 10^6 licences beside the measured node;
- ``service``: ``licensing.services.license_revoke`` per licence (the licence, its list
  entry, the event), each second's share in one transaction.

The licences come one a line from a file, in the order to revoke them. Run by the
benchmark as ``python bench/_status_churn.py IDS PER_SECOND [MODE]`` with its
environment (Django's settings, DATABASE_URL under a role of its own, so the benchmark
can leave this process's queries out of the service's).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


# What license_revoke writes, for many licences in one statement: the revocation, the
# list's entries numbered on from the head (locked by its UPDATE until the commit, as
# revocation_append holds it), usable until expiry and the unit's grace.
REVOKE_SQL = """
WITH revoked AS (
    UPDATE licensing_license SET revoked_at = now(), revoke_reason = 'bench: churn'
    WHERE id = ANY(%s) AND revoked_at IS NULL
    RETURNING id, revoked_at, expires_at, grace_days
), head AS (
    UPDATE licensing_revocationhead SET seq = seq + (SELECT count(*) FROM revoked)
    WHERE id = 1 RETURNING seq
)
INSERT INTO licensing_revocation (seq, license_id, revoked_at, usable_until)
SELECT (SELECT seq FROM head) - (SELECT count(*) FROM revoked) + row_number() OVER (ORDER BY id),
    id, revoked_at, COALESCE(extract(epoch FROM expires_at)::bigint + grace_days * 86400, 0)
FROM revoked
"""


def main() -> int:
    ids_file, per_second = sys.argv[1], float(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "sql"
    import django

    django.setup()
    from django.db import connection, transaction

    from licensing.services import license_revoke

    def revoke(chunk: list[str]) -> None:
        with transaction.atomic():
            if mode == "service":
                for license_id in chunk:
                    license_revoke(license_id=license_id, reason="bench: churn")
            else:
                with connection.cursor() as cursor:
                    cursor.execute(REVOKE_SQL, [chunk])

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
            revoke(ids[done:due])
            done = due
        time.sleep(0.05)
    seconds = time.monotonic() - started
    print(f"{done} {seconds:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
