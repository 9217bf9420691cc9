from django.apps import AppConfig


class OperatorsConfig(AppConfig):
    name = "operators"
    verbose_name = "Operator access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from operators import schema  # noqa: F401 - registers the AdminKey scheme
