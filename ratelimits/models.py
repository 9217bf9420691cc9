"""The rate limits' sliding logs in the database: the store every worker and node shares
when no Redis is configured (``CACHE_URL``), as with ``make run``, and the one a request
falls back to while Redis is unreachable (``ratelimits.counters``)."""

from __future__ import annotations

from django.db import models


class RateLog(models.Model):
    """The requests one key (a limit and a client) was admitted in the last span: at most
    the limit's count of instants, so a row stays small and is rewritten whole."""

    key = models.CharField(max_length=200, primary_key=True, help_text="<limit>:<client>")
    hits = models.TextField(
        blank=True,
        default="",
        help_text="Instants of the admitted requests still in the span: Unix microseconds, "
        "ascending, separated by spaces.",
    )
    expires = models.BigIntegerField(
        db_index=True, help_text="Unix second after which every hit is out of its span."
    )

    class Meta:
        verbose_name = "rate log"

    def __str__(self) -> str:
        return f"{self.key}: {len(self.hits.split())} hits"
