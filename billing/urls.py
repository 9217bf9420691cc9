"""/v1 routes of billing (included under /v1/ by config.urls)."""

from __future__ import annotations

urlpatterns: list = []
