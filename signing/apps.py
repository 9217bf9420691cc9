from django.apps import AppConfig


class SigningConfig(AppConfig):
    name = "signing"
    verbose_name = "Signing keys"
    default_auto_field = "django.db.models.BigAutoField"
