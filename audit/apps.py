from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log and operator keys"
    default_auto_field = "django.db.models.BigAutoField"
