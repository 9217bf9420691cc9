"""The customer portal in the operators' console: portal users and their invitations
(invite from a customer's page, withdraw a pending one), portal users deactivated (their
API keys die with them), customers' API keys (listed, revoked), and renewal requests to
approve (with the amount each renewal bills) or decline."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import reverse

from config.admin.base import NoEditAdmin, confirm_page, may, service_form_view
from config.admin.display import counted, customer_link, utc_time
from config.errors import ServiceError
from customers.models import Customer
from licensing.admin.forms import ENDS_SHOWN, renewal_quotes
from portal import services
from portal.api import invitation_link_base
from portal.models import CustomerApiKey, CustomerUser, Invitation, RenewalRequest
from portal.selectors import key_owner
from svccore import dates


class InviteForm(forms.Form):
    customer = forms.ModelChoiceField(queryset=Customer.objects.order_by("name"))
    email = forms.EmailField(max_length=254, help_text="Where the one-time link goes.")
    name = forms.CharField(max_length=200, required=False, help_text="Greets them in the e-mail.")


@admin.register(Invitation)
class InvitationAdmin(NoEditAdmin):
    add_capability = "manage_customers"
    list_display = ["id", "email", "customer_shown", "state", "created_at", "expires_at",
                    "invited_by"]  # fmt: skip
    list_filter = ["created_at"]
    search_fields = ["email", "customer__id", "customer__name"]
    fields = ["email", "name", "customer", "invited_by", "created_at", "expires_at", "accepted_at",
              "withdrawn_at", "withdrawn_by"]  # fmt: skip
    readonly_fields = fields
    actions = ["withdraw"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("customer")

    def has_manage_permission(self, request) -> bool:
        return may(request, "manage_customers")

    @admin.action(description="Withdraw selected invitations…", permissions=["manage"])
    def withdraw(self, request, queryset):
        rows = list(queryset.select_related("customer"))
        if "apply" in request.POST:
            done = 0
            for row in rows:
                try:
                    services.invitation_withdraw(
                        invitation_id=row.pk, withdrawn_by=request.user.get_username()
                    )
                except ServiceError as exc:
                    self.message_user(request, exc.detail, messages.ERROR)
                    continue
                done += 1
            if done:
                self.message_user(
                    request,
                    f"Withdrew {counted(done, 'invitation')}: their links open nothing now.",
                )
            return None
        return confirm_page(
            self, request, rows, template="admin/portal/invitation_withdraw_confirm.html",
            title="Withdraw invitations", form=forms.Form(), action_name="withdraw", rows=rows,
        )  # fmt: skip

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, invitation: Invitation):
        return customer_link(invitation.customer)

    def add_view(self, request, form_url="", extra_context=None):
        def perform(data):
            invitation, _link = services.invitation_create(
                customer_id=data["customer"].pk,
                email=data["email"],
                name=data["name"],
                invited_by=request.user.get_username(),
                link_base=invitation_link_base(request),
            )
            self.message_user(
                request,
                f"Invitation sent to {invitation.email} for {data['customer'].name}; the link "
                f"works once, until {dates.moment(invitation.expires_at)}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(
                reverse("admin:customers_customer_change", args=[data["customer"].pk])
            )

        return service_form_view(
            self,
            request,
            form_class=InviteForm,
            title="Invite a portal user",
            intro="They get an e-mail with a one-time link that sets their password; they "
            "then see this customer's fleet, seats, usage and invoices, and nothing else.",
            perform=perform,
            submit_label="Send invitation",
        )


@admin.register(CustomerUser)
class CustomerUserAdmin(NoEditAdmin):
    list_display = ["username", "customer_shown", "name", "active", "created_at", "invited_by"]
    list_filter = ["created_at"]
    search_fields = ["user__username", "customer__id", "customer__name", "name"]
    # The e-mail as text: the user row's own page (django.contrib.auth's) answers 403 to
    # every role but a superuser, so it is not linked (the browser walk, issue 41).
    fields = ["username", "customer", "name", "invited_by", "created_at"]
    readonly_fields = fields
    actions = ["deactivate"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user", "customer")

    @admin.display(description="e-mail", ordering="user__username")
    def username(self, account: CustomerUser) -> str:
        return account.user.get_username()

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, account: CustomerUser):
        return customer_link(account.customer)

    @admin.display(description="active", boolean=True)
    def active(self, account: CustomerUser) -> bool:
        return account.user.is_active

    def has_manage_permission(self, request) -> bool:
        return may(request, "manage_customers")

    @admin.action(
        description="Deactivate selected portal users (their API keys are revoked)",
        permissions=["manage"],
    )
    def deactivate(self, request, queryset):
        done = 0
        for account in queryset.select_related("user"):
            if account.user.is_active:
                services.customer_user_deactivate(username=account.user.get_username())
                done += 1
        self.message_user(
            request, f"Deactivated {counted(done, 'portal user')}; their API keys are revoked."
        )


class KeyStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "active"), ("revoked", "revoked")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(CustomerApiKey)
class CustomerApiKeyAdmin(NoEditAdmin):
    """Every customer's API keys: an operator revokes any of them (``revoke_keys``, with a
    confirmation page), as the customer can in the portal; each revocation is audited."""

    list_display = ["customer_shown", "owner_shown", "name", "prefix", "created_at",
                    "last_used_at", "revoked_at"]  # fmt: skip
    list_display_links = ["name"]
    list_filter = [KeyStateFilter, "created_at"]
    search_fields = ["name", "prefix", "customer__id", "customer__name", "owner__user__username"]
    fields = [
        "name",
        "prefix",
        "customer",
        "owner_shown",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    readonly_fields = fields
    empty_times = {"last_used_at": "never", "revoked_at": "active"}
    actions = ["revoke_keys"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("customer", "owner__user")

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, key: CustomerApiKey):
        return customer_link(key.customer)

    @admin.display(description="owner", ordering="owner__user__username")
    def owner_shown(self, key: CustomerApiKey) -> str:
        return key_owner(key)

    def has_manage_permission(self, request) -> bool:
        return may(request, "manage_customers")

    @admin.action(description="Revoke selected customer API keys…", permissions=["manage"])
    def revoke_keys(self, request, queryset):
        rows = list(queryset.select_related("customer", "owner__user"))
        if "apply" in request.POST:
            done = 0
            for row in rows:
                if row.revoked_at is not None:
                    continue
                services.customer_key_revoke(prefix=row.prefix)
                done += 1
            self.message_user(
                request, f"Revoked {counted(done, 'customer API key')}: they open nothing now."
            )
            return None
        return confirm_page(
            self, request, rows, template="admin/portal/customer_key_revoke_confirm.html",
            title="Revoke customer API keys", form=forms.Form(), action_name="revoke_keys",
            rows=[{"key": row, "owner": key_owner(row)} for row in rows],
        )  # fmt: skip


class DeclineForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"size": 60, "autofocus": True}),
        help_text="Shown to the customer in the portal.",
    )


@admin.register(RenewalRequest)
class RenewalRequestAdmin(NoEditAdmin):
    list_display = ["id", "customer_shown", "target", "term_days", "requested_at", "requested_by",
                    "state", "decided_by", "new_expires_at"]  # fmt: skip
    list_filter = ["state", "requested_at"]
    search_fields = ["id", "batch_id", "license_id", "customer__id", "customer__name"]
    fields = ["id", "customer", "batch_id", "license_id", "term_days", "note", "requested_by",
              "requested_at", "state", "decided_at", "decided_by", "decision_note",
              "new_expires_at"]  # fmt: skip
    readonly_fields = fields
    actions = ["approve", "decline"]

    @admin.display(description="customer", ordering="customer__name")
    def customer_shown(self, request_row: RenewalRequest):
        return customer_link(request_row.customer)

    def has_renew_permission(self, request) -> bool:
        return may(request, "renew_licences")

    @admin.action(description="Approve selected renewal requests…", permissions=["renew"])
    def approve(self, request, queryset):
        pending = list(queryset.filter(state=RenewalRequest.State.PENDING))
        if "apply" in request.POST:
            ends = []
            for row in pending:
                try:
                    approved = services.renewal_request_approve(
                        request_id=row.pk, decided_by=request.user.get_username()
                    )
                except ServiceError as exc:
                    self.message_user(request, f"{row.pk}: {exc.detail}", messages.ERROR)
                    continue
                ends.append(f"{row.target} now ends {utc_time(approved.new_expires_at)}")
            if ends:
                shown = ", ".join(ends[:ENDS_SHOWN])
                more = f" and {len(ends) - ENDS_SHOWN:,} more" if len(ends) > ENDS_SHOWN else ""
                self.message_user(
                    request,
                    f"Approved {counted(len(ends), 'renewal request')} ({shown}{more}); billed "
                    "once each.",
                )
            return None
        asked = [
            (f"{row.target} ({row.pk})",
             {"batch_id": row.batch_id} if row.batch_id else {"license_id": row.license_id},
             row.term_days)
            for row in pending
        ]  # fmt: skip
        quotes, totals = renewal_quotes(asked)
        return confirm_page(
            self, request, pending, template="admin/portal/approve_confirm.html",
            title="Approve renewal requests", form=forms.Form(), action_name="approve",
            rows=pending, quotes=quotes, totals=totals,
        )  # fmt: skip

    @admin.action(description="Decline selected renewal requests…", permissions=["renew"])
    def decline(self, request, queryset):
        pending = list(queryset.filter(state=RenewalRequest.State.PENDING))
        form = DeclineForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            for row in pending:
                services.renewal_request_decline(
                    request_id=row.pk,
                    decided_by=request.user.get_username(),
                    note=form.cleaned_data["reason"],
                )
            self.message_user(request, f"Declined {counted(len(pending), 'renewal request')}.")
            return None
        return confirm_page(
            self, request, pending, template="admin/portal/decline_confirm.html",
            title="Decline renewal requests", form=form, action_name="decline", rows=pending,
        )  # fmt: skip
