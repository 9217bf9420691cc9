"""Named operator keys in the console: listed and revoked, never their key material."""

from __future__ import annotations

from django.contrib import admin, messages

from config.adminbase import ReadOnlyAdmin
from config.errors import ServiceError
from operators.models import OperatorKey
from operators.services import operator_key_revoke


@admin.register(OperatorKey)
class OperatorKeyAdmin(ReadOnlyAdmin):
    """Keys are created with ``manage.py create_admin_key NAME`` (it prints the key once);
    here they can be listed and revoked. Digests are never shown."""

    list_display = ["name", "prefix", "created_at", "created_by", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "created_by"]
    fields = ["name", "prefix", "created_at", "created_by", "revoked_at"]
    readonly_fields = fields
    actions = ["revoke_keys"]

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("operators.change_operatorkey")

    @admin.action(description="Revoke selected operator keys", permissions=["revoke"])
    def revoke_keys(self, request, queryset):
        for row in queryset:
            try:
                operator_key_revoke(name=row.name)
            except ServiceError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
        self.message_user(request, f"revoked {queryset.count()} operator key(s)")
