from django.apps import AppConfig


class LicensingConfig(AppConfig):
    name = "licensing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from licensing import scan  # noqa: F401 - registers its part of the event scan
