from django.apps import AppConfig


class OperatorsConfig(AppConfig):
    name = "operators"
    verbose_name = "Operator access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from operators import schema  # noqa: F401 - registers the AdminKey scheme
        from operators.admin import lockout_admin_register, second_factor_labels
        from operators.services import roles_ensure

        post_migrate.connect(roles_ensure, sender=self)
        # Every admin module is imported by now (the admin app's ready() comes first).
        lockout_admin_register()
        second_factor_labels()
