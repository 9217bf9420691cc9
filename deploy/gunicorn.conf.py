"""gunicorn settings of an app node behind the edge (deploy/nginx).

deploy/systemd/svc@.service passes this file with ``-c`` and the bind address and port on
the command line; the service's own settings come from the environment file
(deploy/systemd/svc.env). tests/test_edge.py runs its nodes with this file too.
"""

from __future__ import annotations

import os

wsgi_app = "config.wsgi"
worker_class = "gthread"
# Processes per node (WEB_CONCURRENCY, as gunicorn reads it), each with `threads` threads.
workers = int(os.environ.get("WEB_CONCURRENCY", "3"))
threads = 4
# Longer than nginx's upstream keepalive_timeout (60 s): the edge closes an idle
# connection to a node first, so it never sends a request down one the node is closing
# (nginx would answer such a POST 502, since it cannot know whether the node ran it).
keepalive = 75
timeout = 30
# As long a request line and header as nginx passes on (its 8k buffers), so an answer
# for an over-long one comes from the edge as JSON, never as gunicorn's own HTML page.
limit_request_line = 8190
limit_request_field_size = 8190
# On restart (SIGTERM from systemd), requests in flight get this long to finish.
graceful_timeout = 20
# The edge logs every request with the node that served it; the node logs errors.
accesslog = None
errorlog = "-"

# Metrics of every worker meet in one directory (prometheus-client's multiprocess mode;
# GET /metrics adds them up). systemd gives each node its own /tmp (PrivateTmp), so the
# default is the node's own; it is emptied when the node starts.
os.environ.setdefault("SVC_METRICS_DIR", "/tmp/svc-metrics")  # noqa: S108 - private per node


def on_starting(server):
    import shutil

    shutil.rmtree(os.environ["SVC_METRICS_DIR"], ignore_errors=True)
    os.makedirs(os.environ["SVC_METRICS_DIR"], exist_ok=True)


def child_exit(server, worker):
    # A worker that exits: its gauges stop counting (counters and histograms stay).
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
