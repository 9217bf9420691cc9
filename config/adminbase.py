"""Base classes for the operator console's model admins.

Rows that carry business rules (batches, licences, activations, invoices, the audit log)
are created by services and never edited or deleted in place from the admin.
"""

from __future__ import annotations

from django.contrib import admin


class NoEditAdmin(admin.ModelAdmin):
    """Rows may be added (through a service-backed form), never changed or deleted."""

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(NoEditAdmin):
    """Viewable by staff with the view permission; never added, changed or deleted here."""

    def has_add_permission(self, request, obj=None):
        return False


class LicenceRevokeMixin:
    """Permission for the revoke-with-reason actions on licences and what holds them."""

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("licensing.change_license")
