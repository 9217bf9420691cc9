"""``python manage.py db_roles --app-role NAME [--maintenance-login NAME] [--apply]``

The PostgreSQL roles production runs with (issue 38 item 4, docs/operators.md
"Database roles"): the tables belong to the role that migrates (the owner); the
application connects as a role that is no superuser, owns nothing and may read and
write rows, never TRUNCATE, never change the maintenance trail, never delete audit
entries; the billing guards honour ``billing.maintenance`` only for members of
``svc_maintenance``, whose login role a repair connects as. Prints the SQL; with
``--apply`` runs it on the database as the connected role (the owner, with CREATEROLE).
Passwords are not set here (``ALTER ROLE ... PASSWORD`` at the psql prompt): no secret
passes through a command line or a log.
"""

from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

MAINTENANCE_ROLE = "svc_maintenance"  # named by the guards (billing migration 0013)
TRAIL = "billing_maintenancetrail"
AUDIT = "audit_auditentry"
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _create(role: str, options: str) -> str:
    return (
        f"DO $$ BEGIN CREATE ROLE {role} {options}; "
        "EXCEPTION WHEN duplicate_object THEN NULL; END $$;"
    )


def _rows_of(role: str) -> list[str]:
    """What an application role may do to the tables: rows only."""
    return [
        f"GRANT USAGE ON SCHEMA public TO {role};",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role};",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {role};",
        # The trail is written only by billing_maintenance_use (SECURITY DEFINER).
        f"REVOKE ALL ON {TRAIL} FROM {role};",
        f"REVOKE ALL ON SEQUENCE {TRAIL}_id_seq FROM {role};",
        f"GRANT SELECT ON {TRAIL} TO {role};",
        # Appended to, never removed from (UPDATE stays: the guard lets only a growing
        # repeats count through).
        f"REVOKE DELETE, TRUNCATE ON {AUDIT} FROM {role};",
    ]


def role_statements(
    *, database: str, app_role: str, maintenance_login: str | None = None
) -> list[str]:
    """The SQL that sets up the roles and grants on ``database``."""
    for name in (app_role, maintenance_login):
        if name is not None and not _NAME.fullmatch(name):
            raise CommandError(
                f"role name {name!r}: use 1-63 lower-case letters, digits and '_', "
                "not starting with a digit"
            )
    if app_role == MAINTENANCE_ROLE or app_role == maintenance_login:
        raise CommandError("the application role must not be the maintenance role")
    statements = [
        _create(MAINTENANCE_ROLE, "NOLOGIN"),
        _create(app_role, "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"),
        # The application is never a maintenance member, nor a superuser.
        f"ALTER ROLE {app_role} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;",
        f"REVOKE {MAINTENANCE_ROLE} FROM {app_role};",
        f'GRANT CONNECT ON DATABASE "{database}" TO {app_role};',
        *_rows_of(app_role),
    ]
    if maintenance_login:
        statements += [
            _create(maintenance_login, "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"),
            f"GRANT {MAINTENANCE_ROLE} TO {maintenance_login};",
            f'GRANT CONNECT ON DATABASE "{database}" TO {maintenance_login};',
            *_rows_of(maintenance_login),
            # A repair may remove audit entries (retention) under the recorded bypass.
            f"GRANT DELETE ON {AUDIT} TO {maintenance_login};",
        ]
    return statements


class Command(BaseCommand):
    help = (
        "Print (or, with --apply, run) the SQL that sets up the PostgreSQL roles: the "
        "application role (no superuser, owns nothing, rows only), the svc_maintenance "
        "role whose members alone may use the billing.maintenance bypass, and optionally "
        "a maintenance login role. Run as the owner of the tables."
    )

    def add_arguments(self, parser):
        parser.add_argument("--app-role", required=True, metavar="NAME")
        parser.add_argument("--maintenance-login", metavar="NAME")
        parser.add_argument(
            "--apply", action="store_true", help="run the SQL instead of printing it"
        )

    def handle(self, *args, app_role: str, maintenance_login: str | None, apply: bool, **kw):
        if connection.vendor != "postgresql":
            raise CommandError(
                "database roles are for PostgreSQL; SQLite has none (the ORM guards and "
                "reconcile cover it)"
            )
        statements = role_statements(
            database=connection.settings_dict["NAME"],
            app_role=app_role,
            maintenance_login=maintenance_login,
        )
        if not apply:
            for statement in statements:
                self.stdout.write(statement)
            return
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        self.stdout.write(
            f"roles set up on {connection.settings_dict['NAME']}: application {app_role}"
            + (f", maintenance login {maintenance_login}" if maintenance_login else "")
        )
