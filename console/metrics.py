"""``GET /metrics``: the Prometheus text format, for addresses in SVC_METRICS_ALLOWLIST
(the monitoring network) or with the operator key.

The counters and histograms are the processes' own (``config.metrics``; added up over
gunicorn's workers in multiprocess mode). Gauges of the whole cluster are read from the
database at each scrape: the revocation list's sequence number, the webhook backlog,
and the delivery attempts by result (a count of the attempt log, so it is the same on
every node: aggregate with ``max()``); with a read replica, its lag as this node sees it."""

from __future__ import annotations

import math
import os

from django.conf import settings
from django.db.models import Count
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from prometheus_client import REGISTRY as PROCESS_REGISTRY
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.views import APIView

from config import replica
from config.api.renderers import MetricsNegotiation
from config.clientip import client_ip, ip_in
from events.delivery import backlog
from events.models import DeliveryAttempt
from licensing.models import RevocationHead
from operators.authentication import OperatorKeyAuthentication
from operators.identity import HEADER
from operators.permissions import IsOperator, requires


class _ClusterCollector:
    """What the database knows, read at scrape time."""

    def collect(self):
        seq = RevocationHead.objects.filter(pk=1).values_list("seq", flat=True).first() or 0
        yield GaugeMetricFamily(
            "svc_revocation_list_seq", "The revocation list's sequence number.", value=seq
        )
        yield GaugeMetricFamily(
            "svc_event_backlog",
            "Events enabled webhook endpoints have still to receive.",
            value=backlog(),
        )
        deliveries = CounterMetricFamily(
            "svc_event_deliveries",
            "Webhook delivery attempts by result (ok, failed).",
            labels=["result"],
        )
        counted = dict(
            DeliveryAttempt.objects.values_list("ok").annotate(n=Count("id")).values_list("ok", "n")
        )
        deliveries.add_metric(["ok"], counted.get(True, 0))
        deliveries.add_metric(["failed"], counted.get(False, 0))
        yield deliveries
        if replica.REPLICA in settings.DATABASES:
            yield from _replica_gauges()


def _replica_gauges():
    """The read replica as this node sees it now (config.replica): its lag by the node's
    clock (NaN when it cannot be asked), whether it answers, and the bound beyond which
    reads go back to the primary."""
    lag = replica.replica_lag()
    yield GaugeMetricFamily(
        "svc_replica_lag_seconds",
        "Seconds the read replica is behind (0: it has replayed all it received); NaN "
        "when it does not answer.",
        value=math.nan if lag is None else lag,
    )
    yield GaugeMetricFamily(
        "svc_replica_up", "1 when the read replica answers.", value=0 if lag is None else 1
    )
    yield GaugeMetricFamily(
        "svc_replica_max_lag_seconds",
        "SVC_REPLICA_MAX_LAG_SECONDS: reads go back to the primary beyond this lag.",
        value=settings.SVC_REPLICA_MAX_LAG_SECONDS,
    )


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(PROCESS_REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(_ClusterCollector())
    return registry


class Monitoring:
    """A scraper on the monitoring network."""

    is_authenticated = True


class MonitoringNetwork(BaseAuthentication):
    """An address in SVC_METRICS_ALLOWLIST needs no key; any other goes on to the
    operator key's check."""

    def authenticate(self, request):
        if ip_in(client_ip(request._request), settings.SVC_METRICS_ALLOWLIST):
            return Monitoring(), None
        return None

    def authenticate_header(self, request) -> str:
        return HEADER  # a missing key is a 401, as on the admin API


class MonitoringOrOperator(BasePermission):
    message = IsOperator.message

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, Monitoring) or IsOperator().has_permission(request, view)


@extend_schema(exclude=True)  # Prometheus text, not part of the /v1 API
class MetricsApi(APIView):
    authentication_classes = [MonitoringNetwork, OperatorKeyAuthentication]
    permission_classes = [MonitoringOrOperator]

    # text/plain, OpenMetrics, or JSON-only clients (the text format), not 406.
    content_negotiation_class = MetricsNegotiation

    @requires("view_service")
    def get(self, request):
        # The format as prometheus-client's own exporter picks it: OpenMetrics when the
        # Accept header names it (Prometheus lists it first), else the text format.
        encode, content_type = choose_encoder(request.META.get("HTTP_ACCEPT", ""))
        return HttpResponse(encode(_registry()), content_type=content_type)
