"""``manage.py check --deploy``: a production node without a seller (config.seller) issues
no invoice; the deployment check says so as an error, where start-up only logs it."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from config.seller import missing_message


@checks.register(checks.Tags.compatibility, deploy=True)
def seller_is_set(app_configs, **kwargs) -> list[checks.CheckMessage]:
    if not settings.SVC_SELLER_MISSING:
        return []
    return [checks.Error(missing_message(settings.SVC_SELLER_MISSING), id="billing.E001")]
