"""The service's URLs plus ``GET /bench/floor``: a DRF view that does nothing (no
database, no cache), the floor a cached endpoint is compared with."""

from __future__ import annotations

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import handler500
from config.urls import urlpatterns as service_urlpatterns

__all__ = ["handler500", "urlpatterns"]


class FloorApi(APIView):
    def get(self, request):
        return Response({"ok": True})


urlpatterns = [path("bench/floor", FloorApi.as_view()), *service_urlpatterns]
