from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The customer portal: customer accounts (invited by operators), their pages under
    /portal/, read-only customer API keys (/v1/customer/...) and renewal requests."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "portal"
    verbose_name = "Customer portal"

    def ready(self) -> None:
        from portal import signals

        signals.connect()
