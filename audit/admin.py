"""The audit log, read-only.

The log's list shows one short line per entry (a summary of the message and of the
action's arguments); an entry's page shows them in full."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.utils.html import format_html

from audit.models import AuditEntry
from config.admin.base import ReadOnlyAdmin
from config.admin.display import pretty_json

SUMMARY_CHARS = 100  # of the message, and of the arguments, in the list
ACTOR_KINDS = {
    "api_key": "API key",
    "customer_key": "customer API key",
    "device": "camera",
    "staff": "console",
    "superuser": "console (superuser)",
    "cli": "command line",
}
ARGUMENT_CHARS = 28  # of each argument's value in the summary


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def detail_summary(detail: Any) -> str:
    """An action's arguments on one short line: ``customer_id=CUST-ACME, units=10``, each
    value cut to ARGUMENT_CHARS characters (tokens are long) and the whole line to
    SUMMARY_CHARS."""
    if not isinstance(detail, dict):
        return _cut(json.dumps(detail, default=str), SUMMARY_CHARS)
    shown = (v if isinstance(v, str) else json.dumps(v, default=str) for v in detail.values())
    pairs = (f"{name}={_cut(v, ARGUMENT_CHARS)}" for name, v in zip(detail, shown, strict=True))
    return _cut(", ".join(pairs), SUMMARY_CHARS)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    # How many times an aggregated refusal happened is shown with its result ("refused
    # (401) x 7"): a column of its own made the list scroll sideways at 1280 px.
    list_display = ["at", "who", "action", "target", "result_shown", "summary"]
    list_filter = ["action", "result", "actor_kind", "status", "at"]
    search_fields = ["actor", "target", "message", "ip", "key_name", "capability"]
    date_hierarchy = "at"
    list_per_page = 100
    fields = ["at", "actor", "actor_kind", "ip", "action", "target", "result_shown", "status",
              "repeats", "key_name", "capability", "message", "detail_shown"]  # fmt: skip
    readonly_fields = fields
    # An entry has no history of its own (the log is append-only): Django's empty page.
    history_view = admin.ModelAdmin.history_view

    @admin.display(description="who", ordering="actor")
    def who(self, entry: AuditEntry):
        return format_html(
            '{}<br><span class="svc-quiet svc-nowrap">{}{}</span>',
            entry.actor,
            ACTOR_KINDS.get(entry.actor_kind, entry.actor_kind),
            f", {entry.ip}" if entry.ip else "",
        )

    @admin.display(description="result", ordering="result")
    def result_shown(self, entry: AuditEntry):
        if entry.result == AuditEntry.Result.OK:
            return entry.result
        shown = f"{entry.result} ({entry.status})" if entry.status else entry.result
        if entry.repeats > 1:
            shown = f"{shown} \u00d7 {entry.repeats:,}"
        return format_html('<span class="svc-red">{}</span>', shown)

    @admin.display(description="details")
    def summary(self, entry: AuditEntry):
        arguments = detail_summary(entry.detail) if entry.detail else ""
        needed = [f"key {entry.key_name}"] if entry.key_name else []
        needed += [f"needs {entry.capability}"] if entry.capability else []
        if needed:
            arguments = _cut(", ".join([*needed, arguments] if arguments else needed),
                             SUMMARY_CHARS)  # fmt: skip
        if not entry.message:
            return arguments or None
        return format_html(
            '{}<br><span class="svc-quiet">{}</span>', _cut(entry.message, SUMMARY_CHARS), arguments
        )

    @admin.display(description="arguments")
    def detail_shown(self, entry: AuditEntry):
        return pretty_json(entry.detail)
