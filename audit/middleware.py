"""The audit actor of every request: whoever acts during it (an operator key, which
``operators.authentication`` sets on the request, or a console user) is who the audit
log names. Resolved lazily, only when an action is recorded. Who may call what is
decided by the views' DRF authentication and permissions, not here: this app records,
and records every refusal (401, 402, 403, 429) whoever answered it
(:mod:`audit.refusals`)."""

from __future__ import annotations

from audit.context import acting_as, request_actor
from audit.refusals import note_exception, record_refused_request
from audit.services import REFUSAL_STATUSES


class AuditActorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with acting_as(request_actor(request)):
            response = self.get_response(request)
            if response.status_code in REFUSAL_STATUSES:
                record_refused_request(request, response)
        return response

    def process_exception(self, request, exception):
        note_exception(request, exception)  # what a 403 said; the answer stays Django's
        return None
