from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand

from licensing.selectors import catalogue_list
from svccore import catalogue


class Command(BaseCommand):
    help = (
        "Write the live catalogue (as edited in the admin) as a catalogue file, the input "
        "of `svcctl mint --catalogue` on an offline workstation."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", help="file to write (default: standard output)")

    def handle(self, *args, out=None, **options):
        data = {"skus": [catalogue.to_json(sku.entry()) for sku in catalogue_list()]}
        text = json.dumps(data, indent=2) + "\n"
        if out:
            with open(out, "w", encoding="utf-8") as handle:
                handle.write(text)
            self.stderr.write(f"wrote {len(data['skus'])} SKUs to {out}")
        else:
            self.stdout.write(text, ending="")
            sys.stdout.flush()
