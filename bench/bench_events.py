"""Events benchmark, on PostgreSQL (a database of its own, ``svc_bench_events``):

1. what the event log costs a new activation: ``unit_activate`` writing licence,
   activation record and event in one statement, against the same call writing licence
   and activation record as before the event log (two INSERTs, no event), in
   interleaved rounds (target: within 5 %);
2. webhook deliveries per second of one worker (``events.delivery.deliver_one`` in a
   loop, as ``deliver_events`` runs it) to a receiver on loopback that answers 204 at
   once, with one endpoint and with four.

Run from the repository root: ``python bench/bench_events.py`` (or ``make bench``).
Settings: BENCH_PG (server URL without database), BENCH_ACTIVATIONS, BENCH_EVENTS.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "svc_bench_events"
ACTIVATIONS = int(os.environ.get("BENCH_ACTIVATIONS", "400"))
EVENTS = int(os.environ.get("BENCH_EVENTS", "1000"))
ROUNDS = 5


class _Quick(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the http.server name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def activation_cost() -> None:
    from config.rows import insert_row
    from customers.services import customer_create
    from licensing.services import activation, batch_issue

    customer = customer_create(name="Bench Events", kind="oem")
    batch = batch_issue(
        customer_id=customer.id, sku="DETECT-STD", units=ACTIVATIONS * ROUNDS * 2 + 10
    )
    token = batch.license.token
    activation.unit_activate(batch_token=token, device_id="warm-up")
    real = activation.insert_rows

    def before(*rows) -> None:  # as before the event log: two INSERTs, no event
        for model, values in rows[:-1]:
            insert_row(model, **values)

    def run(tag: str, n: int) -> float:
        started = time.perf_counter()
        for i in range(ACTIVATIONS):
            activation.unit_activate(batch_token=token, device_id=f"{tag}-{n}-{i}")
        return (time.perf_counter() - started) / ACTIVATIONS * 1e6

    with_event, without = [], []
    for n in range(ROUNDS):
        activation.insert_rows = real
        with_event.append(run("with", n))
        activation.insert_rows = before
        without.append(run("without", n))
    activation.insert_rows = real
    a, b = statistics.median(with_event), statistics.median(without)
    print(f"new activation, {ACTIVATIONS} x {ROUNDS} rounds (median us per activation):")
    print(f"  with its event        {a:8.0f} us")
    print(f"  as before (no event)  {b:8.0f} us")
    print(f"  throughput ratio      {b / a:8.3f}   (target >= 0.95)")


def deliveries(endpoints: int) -> None:
    from django.conf import settings

    from events import delivery
    from events.models import Event, Webhook
    from events.services import event_emit, webhook_create

    settings.SVC_WEBHOOK_ALLOW_HTTP = settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
    Webhook.objects.all().delete()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quick)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    for n in range(endpoints):
        webhook_create(url=f"http://127.0.0.1:{port}/ep{n}", events=["*"])
    for n in range(EVENTS):
        event_emit(Event.Type.LICENSE_REVOKED, customer_id="CUST-BENCH",
                   data={"license_id": f"LIC-{n}", "reason": "bench"})  # fmt: skip
    sent = 0
    started = time.perf_counter()
    while True:
        outcome = delivery.deliver_one()
        if outcome is None:
            break
        if outcome is not delivery.NOTHING_TO_SEND:
            assert outcome.ok, outcome
            sent += 1
    elapsed = time.perf_counter() - started
    server.shutdown()
    print(f"  {endpoints} endpoint(s): {sent} deliveries in {elapsed:.1f} s = "
          f"{sent / elapsed:,.0f} per second per worker")  # fmt: skip


def main() -> int:
    _support.recreate_database(PG, DB_NAME)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _support.configure_django(Path(tmp), PG, DB_NAME)
            from licensing.services import catalogue_seed

            catalogue_seed()
            activation_cost()
            print(f"webhook deliveries, one worker, {EVENTS} events, a receiver answering 204:")
            deliveries(1)
            deliveries(4)
    finally:
        from django.db import connections

        connections.close_all()
        _support.recreate_database(PG, DB_NAME, create=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
