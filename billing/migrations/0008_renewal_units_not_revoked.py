"""A batch renewal bills the units activated and *not revoked* when it was renewed
(contract §6.5; before, every unit activated, a stolen and revoked camera included).

Renewals still waiting for an invoice (their ledger entries sum to zero) are recounted
as of their ``renewed_at`` (stored to the second): units activated before the end of
that second whose licence was not revoked by then. Renewals an issued invoice already billed keep what it billed and their units
(an invoice is never rewritten, and the ledger must keep matching it): the migration
lists those that billed revoked units, with the batch and the number, for finance to
settle with the customer (a credit note reverses a whole invoice and its next invoice
would bill the renewal's recorded units again, so it is not the tool for this).
"""

import datetime as dt

from django.db import migrations
from django.db.models import Q, Sum


def recount(apps, schema_editor):
    Renewal = apps.get_model("licensing", "Renewal")
    Activation = apps.get_model("licensing", "Activation")
    LedgerEntry = apps.get_model("billing", "LedgerEntry")
    billed = dict(
        LedgerEntry.objects.filter(kind="renewal")
        .values("renewal_id")
        .annotate(n=Sum("quantity"))
        .exclude(n=0)
        .values_list("renewal_id", "n")
    )
    recounted, overbilled = 0, []
    for renewal in Renewal.objects.filter(batch__isnull=False).iterator():
        after = renewal.renewed_at + dt.timedelta(seconds=1)
        in_service = (
            Activation.objects.filter(batch_id=renewal.batch_id, activated_at__lt=after)
            .filter(Q(license__revoked_at__isnull=True) | Q(license__revoked_at__gte=after))
            .count()
        )
        if in_service >= renewal.units:
            continue
        if renewal.pk in billed:
            overbilled.append(
                f"renewal {renewal.pk} of batch {renewal.batch_id} on "
                f"{renewal.renewed_at:%Y-%m-%d}: {renewal.units - in_service} revoked of "
                f"{renewal.units} units billed"
            )
            continue
        Renewal.objects.filter(pk=renewal.pk).update(units=in_service)
        recounted += 1
    if recounted:
        print(f"\n  {recounted} waiting renewal(s) recounted without their revoked units")
    if overbilled:
        print(
            f"\n  {len(overbilled)} renewal(s) already invoiced billed revoked units "
            "(kept as invoiced; settle with the customer):"
        )
        for line in overbilled:
            print(f"    {line}")


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_renewals"),
        ("licensing", "0008_renewal_units_in_service"),
    ]

    operations = [migrations.RunPython(recount, migrations.RunPython.noop)]
