"""The usage part of the scheduled event pass (:mod:`events.scan`): a metered licence's
inferences reaching 80 and 100 % of its quota."""

from __future__ import annotations

import datetime as dt

from django.db.models import Sum

from billing.models import UsageDaily
from events.models import Event
from events.scan import ScanResult, event_once, scan_pass, thresholds_crossed
from licensing.models import License

QUOTA_PERCENTS = (80, 100)


@scan_pass
def quotas_scan(result: ScanResult, now: dt.datetime) -> None:
    """``usage.quota_threshold`` of each metered licence not revoked."""
    metered = {
        lic.id: lic
        for lic in License.objects.filter(
            revoked_at__isnull=True, claims__lim__api_calls__gt=0
        ).only("id", "customer_id", "sku", "device_id", "claims", "batch_id")
    }
    if not metered:
        return
    used = (
        UsageDaily.objects.filter(license_id__in=list(metered))
        .values("license_id")
        .annotate(inferences=Sum("inferences"))
    )
    for row in used:
        lic = metered[row["license_id"]]
        quota = int(lic.claims["lim"]["api_calls"])
        for percent in thresholds_crossed(QUOTA_PERCENTS, row["inferences"], quota):
            event_once(
                result,
                Event.Type.USAGE_QUOTA_THRESHOLD,
                customer_id=lic.customer_id,
                data={
                    "license_id": lic.id,
                    "customer_id": lic.customer_id,
                    "sku": lic.sku,
                    "device_id": lic.device_id,
                    "percent": percent,
                    "inferences": row["inferences"],
                    "api_calls": quota,
                }
                | ({"batch_id": lic.batch_id} if lic.batch_id else {}),
                once_key=f"usage.quota_threshold:{lic.id}:{quota}:{percent}",
            )
