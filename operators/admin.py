"""Operator access in the console: named operator keys (listed and revoked, never their
key material), console users, whose second factor a key administrator may reset, and
roles (groups).

No escalation: whoever grants (a key's roles, a user's groups and permissions, a group's
permissions) grants only what it holds itself; a user is edited only by someone holding
at least everything that user holds, and only a superuser makes a superuser."""

from __future__ import annotations

import datetime as dt

from axes.admin import AccessAttemptAdmin
from axes.handlers.proxy import AxesProxyHandler
from axes.models import AccessAttempt
from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, Permission
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from config import clock
from config.admin.base import GuardedListMixin, NoEditAdmin, may, service_form_view
from config.errors import ServiceError
from operators.models import OperatorKey
from operators.roles import ROLES
from operators.second_factor import has_second_factor, second_factor_reset
from operators.selectors import user_capabilities, user_holds_all_of, user_permissions_held
from operators.services import operator_key_create, operator_key_revoke


class OperatorKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="Who or what uses the key, e.g. alice or billing-cron."
    )
    roles = forms.MultipleChoiceField(
        choices=[(role, role) for role in ROLES],
        widget=forms.CheckboxSelectMultiple,
        help_text="What the key may do (docs: Roles): only roles you hold. Give it only what "
        "it needs.",
    )
    expires_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Expires after (days)",
        help_text="Empty: until revoked.",
    )


@admin.register(OperatorKey)
class OperatorKeyAdmin(NoEditAdmin):
    """Keys are created here or with ``manage.py create_admin_key NAME --scope ROLES``;
    the key is shown once, then only its keyed hash is stored. Listed and revoked here;
    digests are never shown."""

    add_capability = "manage_operator_access"

    list_display = ["name", "roles_shown", "prefix", "created_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "created_by"]
    fields = ["name", "roles_shown", "prefix", "created_at", "created_by", "expires_at",
              "revoked_at"]  # fmt: skip
    readonly_fields = fields
    actions = ["revoke_keys"]

    def has_revoke_permission(self, request) -> bool:
        return may(request, "manage_operator_access")

    @admin.display(description="roles")
    def roles_shown(self, row: OperatorKey) -> str:
        return ", ".join(row.roles) or "none"

    def add_view(self, request, form_url="", extra_context=None):
        def perform(data):
            days = data["expires_days"]
            row, key = operator_key_create(
                name=data["name"].strip(),
                roles=list(data["roles"]),
                expires_at=clock.now() + dt.timedelta(days=days) if days else None,
                created_by=request.user.get_username(),
                granter=user_capabilities(request.user),
            )
            self.message_user(
                request,
                format_html(
                    'Operator key {} ({}): <code id="operator-key">{}</code> — shown only '
                    "now; use it as X-Admin-Key (svcctl: SVC_ADMIN_KEY). "
                    '<button type="button" class="button" data-copy="operator-key" hidden>'
                    "Copy</button>",
                    row.name,
                    ", ".join(row.roles),
                    key,
                ),
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:operators_operatorkey_changelist"))

        return service_form_view(
            self, request, form_class=OperatorKeyForm, title="Create operator API key",
            perform=perform, submit_label="Create key",
        )  # fmt: skip

    @admin.action(description="Revoke selected operator keys", permissions=["revoke"])
    def revoke_keys(self, request, queryset):
        for row in queryset:
            try:
                operator_key_revoke(name=row.name)
            except ServiceError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
        self.message_user(request, f"revoked {queryset.count()} operator key(s)")


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class ConsoleUserAdmin(UserAdmin):
    """Django's user admin (its own per-model permissions), with whether each user has a
    second factor and the action that resets it (``reset_second_factors``)."""

    list_display = [*UserAdmin.list_display, "second_factor"]
    actions = ["reset_second_factor"]

    @admin.display(description="second factor", boolean=True)
    def second_factor(self, user) -> bool:
        return has_second_factor(user)

    def has_reset_permission(self, request) -> bool:
        return may(request, "reset_second_factors")

    # A key administrator sees the users whose second factor it may reset.
    def has_module_permission(self, request):
        return super().has_module_permission(request) or self.has_reset_permission(request)

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or self.has_reset_permission(request)

    # No escalation: a user is changed only by someone holding everything it holds, who
    # grants only groups and permissions it holds, and never superuser status.
    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or user_holds_all_of(request.user, obj))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or user_holds_all_of(request.user, obj))

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or self.has_change_permission(request, obj):
            return fieldsets
        # Viewing only (a key administrator): no password field, whose "Reset password"
        # link opens a form that answers 403 (the browser walk, issue 41).
        return [
            (name, {**options, "fields": [f for f in options["fields"] if f != "password"]})
            for name, options in fieldsets
        ]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields.append("is_superuser")
        return fields

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if not request.user.is_superuser:
            held = user_permissions_held(request.user)
            if db_field.name == "user_permissions":
                kwargs["queryset"] = held
            elif db_field.name == "groups":
                kwargs["queryset"] = groups_within(held)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @admin.action(
        description="Reset the second factor of selected users (they enrol again)",
        permissions=["reset"],
    )
    def reset_second_factor(self, request, queryset):
        for user in queryset:
            try:
                removed = second_factor_reset(username=user.get_username(), by=request.user)
            except ServiceError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
                continue
            self.message_user(
                request,
                f"Second factor of {user.get_username()} reset: {removed} device(s) removed; "
                "they set up an authenticator again at their next login.",
            )


def groups_within(held):
    """The groups (roles) every permission of which is in ``held``: those a holder of
    ``held`` may grant."""
    return Group.objects.exclude(permissions__in=Permission.objects.exclude(pk__in=held))


admin.site.unregister(Group)


@admin.register(Group)
class RoleAdmin(GroupAdmin):
    """Django's group admin, without escalation: a group is changed only by someone
    holding all its permissions, who adds only permissions it holds."""

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or _holds_group(request, obj))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or _holds_group(request, obj))

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "permissions" and not request.user.is_superuser:
            kwargs["queryset"] = user_permissions_held(request.user)
        return super().formfield_for_manytomany(db_field, request, **kwargs)


def _holds_group(request, group: Group) -> bool:
    if request.user.is_superuser:
        return True
    held = user_permissions_held(request.user)
    return not group.permissions.exclude(pk__in=held).exists()


class LockoutAdmin(GuardedListMixin, AccessAttemptAdmin):
    """django-axes' list of login lockouts. Its clean-up action reads request attributes
    axes sets only while a login is checked, so from the console it answered 500: they
    are set first here."""

    @admin.action(description="Clean up expired attempts")
    def cleanup_expired_attempts(self, request, queryset):
        AxesProxyHandler.update_request(request)
        return super().cleanup_expired_attempts(request, queryset)


def lockout_admin_register() -> None:
    """Put :class:`LockoutAdmin` in place of axes' own (``OperatorsConfig.ready``: axes
    registers its admin after this module is imported)."""
    admin.site.unregister(AccessAttempt)
    admin.site.register(AccessAttempt, LockoutAdmin)


# The second factors' apps and models as an operator reads them on the console's index
# (issue 41: "OTP_STATIC", "OTP_TOTP" and "TOTP devices", beside cameras called devices).
# The apps' names are their AppConfigs' verbose_name; the models' are relabelled in the
# index's app list only, since a model's verbose_name is migration state of django-otp.
SECOND_FACTOR_APPS = {
    "otp_totp": "Second factor: authenticator apps",
    "otp_static": "Second factor: recovery codes",
}
SECOND_FACTOR_MODELS = {
    ("otp_totp", "TOTPDevice"): "Enrolled authenticator apps (one-time codes)",
    ("otp_static", "StaticDevice"): "Recovery code lists",
}


def second_factor_labels(site: admin.AdminSite = admin.site) -> None:
    """Name django-otp's apps and models for people (``OperatorsConfig.ready``)."""
    from django.apps import apps

    for label, name in SECOND_FACTOR_APPS.items():
        apps.get_app_config(label).verbose_name = name
    listed = site.get_app_list

    def get_app_list(request, app_label=None):
        app_list = listed(request, app_label)
        for app in app_list:
            for model in app["models"]:
                name = SECOND_FACTOR_MODELS.get((app["app_label"], model["object_name"]))
                if name:
                    model["name"] = name
        return app_list

    site.get_app_list = get_app_list
