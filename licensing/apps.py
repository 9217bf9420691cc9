from django.apps import AppConfig


class LicensingConfig(AppConfig):
    name = "licensing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported for what they register: licensing's part of the event scan
        # (events.scan), and the revocation list's writes a signing key's change calls
        # (signing.services).
        from licensing import scan  # noqa: F401
        from licensing.services import keys  # noqa: F401
