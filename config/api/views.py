"""The two kinds of API view, so that who may call one is visible where it is written.

A plain DRF ``APIView`` is an operator's: the default authentication and permission
(``REST_FRAMEWORK`` in settings) ask for ``X-Admin-Key``. A camera's endpoint derives
from :class:`DeviceApi`, which opts out of operator authentication in plain sight; such
a view checks what a device presents itself (a batch key, a unit token) or serves what
is public (the signed revocation list). A third kind, a customer's read-only endpoint
under ``/v1/customer/``, derives from ``portal.api.CustomerApi``, which names the
customer key's authentication and permission in the same way.
"""

from __future__ import annotations

from rest_framework.permissions import AllowAny
from rest_framework.views import APIView


class DeviceApi(APIView):
    """An endpoint cameras call: no operator key; the view authenticates the device."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
