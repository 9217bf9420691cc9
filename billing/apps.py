from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported for what they register: the schema of billing's query fields,
        # billing's part of the event scan (events.scan), the reminders' part of the
        # worker's pass and the deployment check of the seller.
        from billing import checks, reminders, scan, schemas  # noqa: F401
