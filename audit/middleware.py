"""The audit actor of every request: whoever acts during it (an operator key, which
``operators.authentication`` sets on the request, or a console user) is who the audit
log names. Resolved lazily, only when an action is recorded. Who may call what is
decided by the views' DRF authentication and permissions, not here: this app records.
"""

from __future__ import annotations

from audit.context import acting_as, request_actor


class AuditActorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with acting_as(request_actor(request)):
            return self.get_response(request)
