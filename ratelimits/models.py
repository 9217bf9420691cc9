"""Request counters of the rate limits, in the database: the store every worker and node
shares when no Redis is configured (``CACHE_URL``), as with ``make run``."""

from __future__ import annotations

from django.db import models


class RateCounter(models.Model):
    """Requests counted under one key (a limit and a client) in one fixed window."""

    key = models.CharField(max_length=200, primary_key=True, help_text="<limit>:<client>:<window>")
    count = models.PositiveIntegerField(default=0)
    expires = models.BigIntegerField(db_index=True, help_text="Unix second it may be deleted.")

    class Meta:
        verbose_name = "rate counter"

    def __str__(self) -> str:
        return f"{self.key}: {self.count}"
