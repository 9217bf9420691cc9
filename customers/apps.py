from django.apps import AppConfig


class CustomersConfig(AppConfig):
    name = "customers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from customers import schemas  # noqa: F401 - registers the schema of a chosen id
