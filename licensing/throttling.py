"""Per-IP activation throttle (``SVC_ACTIVATION_RATE``, default 20 per 10 s).

The edge (nginx) enforces the same limit in production; this one keeps a bare app node
safe too, and holds an address to the limit however many nginx and nodes it reaches.
Provisioning lines in ``SVC_ACTIVATION_ALLOWLIST`` are exempt. The limit is exact: no
span of the rate's seconds, wherever it starts, holds more than its count of admitted
activations from one address (a sliding log of admitted instants, ``ratelimits.counters``).
The rate is read once (``svccore.rates``), and refused at start-up when malformed.
Refused requests are not logged, and the 429's ``Retry-After`` is the whole seconds until
the oldest counted activation leaves the span. The log is shared by every worker and
node: in Redis when ``CACHE_URL`` names one (one round trip, cheaper than the lookup it
protects), else, and while Redis fails, in the database. The store's clock decides, but
under a test clock (``SVC_TEST_CLOCK_FILE``, refused outside test databases): then the
server's clock does, so that a test steps through a window instead of sleeping it out.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from config import clock
from config.clientip import client_ip, ip_in
from ratelimits import counters
from svccore.rates import parse_rate


class ActivationRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        ip = client_ip(request)
        if ip_in(ip, settings.SVC_ACTIVATION_ALLOWLIST):
            return True
        self.limit, self.span = parse_rate(settings.SVC_ACTIVATION_RATE)
        now = clock.now().timestamp() if settings.SVC_TEST_CLOCK_FILE else None
        decision = counters.hit("activate", ip, limit=self.limit, span=self.span, now=now)
        self.retry_after = decision.retry_after
        return decision.allowed

    def wait(self) -> float | None:
        return self.retry_after
