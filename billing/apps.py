from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported for what they register: the schema of billing's query fields, and
        # billing's part of the event scan (events.scan).
        from billing import reminders, scan, schemas  # noqa: F401
