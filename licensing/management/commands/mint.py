from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from licensing.selectors import catalogue_list
from svcctl import offline


class Command(BaseCommand):
    help = (
        "Sign an air-gapped, device-bound licence (act=optional) into a file: the same code "
        "as `svcctl mint`, defaulting to this server's signing key, issuer and live "
        "catalogue. Nothing is stored in the database."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sku", required=True)
        parser.add_argument("--customer", required=True, help="customer id")
        parser.add_argument("--device", required=True, help="the camera's fingerprint")
        parser.add_argument("--days", type=int, help="term (default: the SKU's; 0 = perpetual)")
        parser.add_argument("--out", required=True, help="where to write the token")
        parser.add_argument("--key", help="signing key file (default: SVC_SIGNING_KEY_FILE)")
        parser.add_argument("--catalogue", help="catalogue file (default: the live catalogue)")
        parser.add_argument("--quota", type=int, help="metered API calls (default: SKU's)")
        parser.add_argument("--streams", type=int, help="concurrent streams (default: SKU cap)")
        parser.add_argument("--force", action="store_true", help="replace an existing --out")

    def handle(self, *args, **options):
        try:
            if options["catalogue"]:
                entry = offline.catalogue_entry(options["sku"], options["catalogue"])
            else:
                live = {sku.code: sku for sku in catalogue_list()}
                if options["sku"] not in live:
                    raise offline.OfflineError(
                        f"unknown SKU {options['sku']!r}; the catalogue has {', '.join(live)}"
                    )
                entry = live[options["sku"]].entry()
            _, claims = offline.mint(
                entry=entry,
                customer=options["customer"],
                device_id=options["device"],
                key_file=options["key"] or settings.SVC_SIGNING_KEY_FILE,
                out=options["out"],
                days=options["days"],
                issuer=settings.SVC_ISSUER,
                max_streams=options["streams"],
                api_quota=options["quota"],
                force=options["force"],
            )
        except offline.OfflineError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"licence {claims['lic']} for device {claims['dev']} ({claims['sku']}, "
            f"{claims['sub']}) written to {options['out']}"
        )
