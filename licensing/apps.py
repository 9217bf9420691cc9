from django.apps import AppConfig


class LicensingConfig(AppConfig):
    name = "licensing"
    default_auto_field = "django.db.models.BigAutoField"
