from __future__ import annotations

import argparse
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.context import acting_from_cli
from config.errors import ServiceError
from licensing.models import License
from licensing.services import license_issue
from signing import keyring
from svccore import ids, licensefile


class Command(BaseCommand):
    help = (
        "Issue a device-bound licence (act=optional: it runs air-gapped) through the licence "
        "service, signed by this server's key, and write it as a licence file (mode 600: its "
        "token is the device's credential): the SVC1 token on the first line, then the "
        "signing key's certificate (SVCK1) when it has one. Like POST /v1/admin/licenses it "
        "is stored, audited, priced at one unit and revocable; the customer must exist. For "
        "a licence signed on an offline workstation use `svcctl mint` and register it with "
        "POST /v1/admin/licenses/register."
    )

    def add_arguments(self, parser):
        parser.add_argument("--sku", required=True, help="catalogue SKU, e.g. DETECT-STD")
        parser.add_argument("--customer", required=True, help="customer id (CUST-...)")
        parser.add_argument("--device", required=True, help="the camera's fingerprint")
        parser.add_argument("--days", type=int, help="term (default: the SKU's; 0 = perpetual)")
        parser.add_argument("--out", required=True, help="licence file to write")
        parser.add_argument("--quota", type=int, help="metered API calls (default: SKU's)")
        parser.add_argument("--streams", type=int, help="concurrent streams (default: SKU cap)")
        parser.add_argument("--force", action="store_true", help="replace an existing --out")
        # Options of the offline path, refused with a pointer to it.
        parser.add_argument("--key", help=argparse.SUPPRESS)
        parser.add_argument("--catalogue", help=argparse.SUPPRESS)

    def handle(self, *args, **options):
        if options["key"] or options["catalogue"]:
            raise CommandError(
                "manage.py mint signs with this server's key and its live catalogue; to sign "
                "with another key or catalogue file use `svcctl mint` on the offline "
                "workstation, then register the licence (POST /v1/admin/licenses/register)"
            )
        out = Path(options["out"])
        if out.exists() and not options["force"]:
            raise CommandError(f"{out} already exists; pass --force to replace it")
        if not out.parent.is_dir():
            raise CommandError(f"directory {out.parent} does not exist")
        # As customer_create stores an operator-chosen id: upper case, CUST- prefix.
        customer = ids.chosen_customer_id(options["customer"])
        with acting_from_cli():
            try:
                lic = license_issue(
                    customer_id=customer,
                    sku=options["sku"],
                    device_id=options["device"],
                    term_days=options["days"],
                    api_quota=options["quota"],
                    max_streams=options["streams"],
                    activation=License.Activation.OPTIONAL,
                )
            except ServiceError as exc:
                raise CommandError(exc.detail) from None
        certificate = keyring.active_certificate()
        license = licensefile.LicenseFile(
            token=lic.token, certificates=(certificate,) if certificate else ()
        )
        try:
            licensefile.write(out, license, force=options["force"])
        except licensefile.LicenseFileError as exc:
            raise CommandError(
                f"licence {lic.id} was issued and stored but could not be written: {exc}; "
                "copy its token from the admin or revoke it"
            ) from None
        self.stdout.write(
            f"licence {lic.id} for device {lic.device_id} ({lic.sku}, {lic.customer_id}) "
            f"written to {out}" + (" with its key certificate" if certificate else "")
        )
