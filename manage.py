#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from audit.context import acting_from_cli

    # Operator actions taken by any management command are audited as this OS user.
    with acting_from_cli():
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
