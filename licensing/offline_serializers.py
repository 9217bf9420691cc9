"""Shapes of the air-gapped file exchange (issue 44): the file's text in, the signed
answer file's text out with what the exchange did."""

from __future__ import annotations

from rest_framework import serializers

from config.api.fields import BodyIn, StrictCharField
from devices.offline import MAX_REQUEST_CHARS

# A usage file holds at most 1000 hours (the device's upload bound): about 55 KB, and
# under 110 KB with every counter at its largest.
USAGE_FILE_CHARS = 128 << 10


class OfflineActivationIn(BodyIn):
    request = StrictCharField(
        min_length=1,
        max_length=MAX_REQUEST_CHARS,
        trim_whitespace=True,
        help_text="The activation request file's text (SVCQ1), as `python -m devices "
        "offline-request` wrote it; white space inside is ignored.",
    )


class OfflineActivationOut(serializers.Serializer):
    answer = serializers.CharField(
        help_text="The signed answer file's text (SVCA1): save it as a .svcresp file for "
        "`python -m devices offline-install`."
    )
    license_id = serializers.CharField()
    device_id = serializers.CharField()
    reactivated = serializers.BooleanField(
        help_text="true: the device was on file; its licence again, no seat taken."
    )
    batch_units_remaining = serializers.IntegerField(
        allow_null=True, help_text="Units left on the batch; null for a re-activation."
    )


class OfflineUsageIn(BodyIn):
    usage = StrictCharField(
        min_length=1,
        max_length=USAGE_FILE_CHARS,
        trim_whitespace=True,
        help_text="The usage export file's text (SVCE1), as `python -m devices "
        "usage-export` wrote it.",
    )
