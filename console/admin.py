"""Customers in the operator console. Created through ``customer_create`` and edited
through ``customer_update`` (the services the API uses, audited with each field's value
before and after). A customer's page shows its batches with their seats, its latest
invoices, its usage since its last invoice and its terms ending soon.

It is the console's, not the ``customers`` app's: the page reads licences and invoices,
and ``customers`` sits below ``licensing`` and ``billing`` (the layers contract in
``pyproject.toml``). ``console`` is an installed app for this module alone, so the
admin's autodiscovery registers it as it did when it was ``customers.admin``."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from billing import issuing
from billing import selectors as billing_selectors
from config import clock
from config.admin.base import NoEditAdmin, may, service_form_view
from config.admin.display import admin_url, money, utc_time
from config.errors import ServiceError
from customers.models import Customer
from customers.services import customer_create, customer_update
from licensing import selectors as licensing_selectors
from licensing.admin.display import progress_bar
from licensing.admin.holding import HoldMixin, hold_action
from svccore import dates
from svccore.timeunits import unix


class BillingFields(forms.Form):
    """What invoices print of a customer: the one definition for creating and editing."""

    billing_address = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 50}),
        help_text="Printed on invoices and credit notes, one line per line.",
    )
    tax_id = forms.CharField(
        max_length=64,
        required=False,
        label="Tax id",
        help_text="Another tax or registration number printed on invoices.",
    )
    country = forms.CharField(
        max_length=2,
        required=False,
        help_text="ISO 3166 alpha-2 code (DE, FR, US...); empty: the seller's country. "
        "Decides the VAT category of its invoices.",
    )
    vat_id = forms.CharField(
        max_length=32,
        required=False,
        label="VAT id",
        help_text="An EU VAT id makes a supply to another member state a reverse charge.",
    )
    tax_exemption = forms.CharField(
        max_length=200,
        required=False,
        help_text="Why its invoices are VAT-exempt (printed on them); empty: not exempt.",
    )


class CustomerCreateForm(BillingFields):
    field_order = [
        "name",
        "kind",
        "contact",
        "id",
        "billing_address",
        "country",
        "vat_id",
        "tax_id",
    ]
    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=Customer.Kind.choices)
    contact = forms.CharField(max_length=254, required=False, help_text="Contact address.")
    id = forms.CharField(
        max_length=64,
        required=False,
        label="Customer id",
        help_text="Optional; generated when empty. Stored with the CUST- prefix.",
    )


class CustomerEditForm(BillingFields):
    field_order = ["name", "contact", "billing_address", "country", "vat_id", "tax_id"]
    name = forms.CharField(max_length=200)
    contact = forms.CharField(max_length=254, required=False, help_text="Contact address.")


EXPIRING_DAYS = 30
LATEST_INVOICES = 10


def overview(customer: Customer) -> dict:
    """What the customer's page shows beside its fields."""
    now = clock.now()
    batches = [
        {
            "batch": batch,
            "seats": progress_bar(activated=batch.units_activated, purchased=batch.units_purchased),
            "expires": utc_time(batch.expires_at) or "perpetual",
        }
        for batch in customer.batches.order_by("-issued_at")[:50]
    ]
    open_invoice = issuing.open_invoice(customer_id=customer.pk)
    since = open_invoice.period_end if open_invoice else now - dt.timedelta(days=30)
    usage = billing_selectors.inferences_by_sku(
        customer_id=customer.pk, start=unix(since), end=unix(now)
    )
    invoices = billing_selectors.invoices_page(customer_id=customer.pk, limit=LATEST_INVOICES)
    return {
        "batches": batches,
        "batch_count": customer.batches.count(),
        "invoices": [
            {"document": d, "total": money(d.total, d.currency), "issued": dates.day(d.issued_at)}
            for d in invoices.invoices
        ],
        "usage": sorted((sku, f"{n:,}") for sku, n in usage.items()),
        "usage_since": utc_time(since),
        "usage_since_invoice": open_invoice.number if open_invoice else "",
        "expiring": licensing_selectors.expiring_list(days=EXPIRING_DAYS, customer_id=customer.pk),
        "expiring_days": EXPIRING_DAYS,
    }


@admin.register(Customer)
class CustomerAdmin(HoldMixin, NoEditAdmin):
    add_capability = "manage_customers"
    actions = ["suspend_customers", "reinstate_customers"]
    list_display = ["id", "name", "kind", "contact", "batch_count", "created_at"]
    list_filter = ["kind", "created_at"]
    search_fields = ["id", "name", "contact"]
    date_hierarchy = "created_at"
    fields = ["id", "name", "kind", "contact", "created_at"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_batches=Count("batches"))

    @admin.display(description="batches", ordering="_batches")
    def batch_count(self, customer: Customer) -> int:
        return customer._batches

    @admin.action(
        description="Suspend selected customers (all their licences)…", permissions=["suspend"]
    )
    def suspend_customers(self, request, queryset):
        return hold_action(
            self, request, queryset, scope="customer_id", id_of=lambda customer: customer.pk,
            action_name="suspend_customers", what="customers", suspend=True,
        )  # fmt: skip

    @admin.action(description="Reinstate selected customers…", permissions=["suspend"])
    def reinstate_customers(self, request, queryset):
        return hold_action(
            self, request, queryset, scope="customer_id", id_of=lambda customer: customer.pk,
            action_name="reinstate_customers", what="customers", suspend=False,
        )  # fmt: skip

    def operations(self, request, customer: Customer):
        """The customer's buttons: only those the user's roles allow."""
        button = '<a class="button" href="{}?customer={}">{}</a>'
        buttons = [
            format_html(button, reverse(url), customer.pk, label)
            for url, label, capability in (
                ("admin:licensing_batch_add", "Issue batch", "issue_licences"),
                ("admin:licensing_license_add", "Issue licence", "issue_licences"),
                ("console-invoice-preview", "Invoice preview", "view_service"),
                ("admin:portal_invitation_add", "Invite a portal user", "manage_customers"),
            )
            if may(request, capability)
        ]  # fmt: skip
        lists = format_html(
            '<a href="{}?customer__id__exact={}">Licences</a> · '
            '<a href="{}?batch__customer__id__exact={}">Fleet</a> · '
            '<a href="{}?customer__id__exact={}">Portal users</a> · '
            '<a href="{}?customer__id__exact={}">Renewal requests</a>',
            reverse("admin:licensing_license_changelist"),
            customer.pk,
            reverse("admin:licensing_activation_changelist"),
            customer.pk,
            reverse("admin:portal_customeruser_changelist"),
            customer.pk,
            reverse("admin:portal_renewalrequest_changelist"),
            customer.pk,
        )
        return format_html_join(" ", "{}", ((b,) for b in [*buttons, lists]))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The customer's page: its fields as an edit form (for those who may change
        customers), then its batches, invoices, usage and terms ending soon."""
        customer = self.get_object(request, unquote(object_id))
        if customer is None or not self.has_view_permission(request, customer):
            return super().change_view(request, object_id, form_url, extra_context)
        can_edit = may(request, "manage_customers")
        fields = {name: getattr(customer, name) for name in CustomerEditForm.base_fields}
        form = CustomerEditForm(request.POST if request.method == "POST" else None, initial=fields)
        if request.method == "POST":
            if not can_edit:
                raise PermissionDenied
            if form.is_valid():
                try:
                    updated = customer_update(customer_id=customer.pk, **form.cleaned_data)
                except ServiceError as exc:
                    form.add_error(None, exc.detail)
                else:
                    changed = ", ".join(name.replace("_", " ") for name in updated.changes)
                    self.message_user(
                        request,
                        f"Customer {customer.pk} updated: {changed}."
                        if changed
                        else "Nothing changed.",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(request.path)
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "app_label": opts.app_label,
            "title": str(customer),
            "customer": customer,
            "form": form,
            "can_edit": can_edit,
            "operations": self.operations(request, customer),
            "created": utc_time(customer.created_at),
            **overview(customer),
        }
        return TemplateResponse(request, "admin/customers/customer_page.html", context)

    def add_view(self, request, form_url="", extra_context=None):
        def perform(data):
            customer = customer_create(
                name=data["name"],
                kind=data["kind"],
                contact=data["contact"],
                id=data["id"] or None,
                billing_address=data["billing_address"],
                tax_id=data["tax_id"],
                country=data["country"],
                vat_id=data["vat_id"],
                tax_exemption=data["tax_exemption"],
            )
            self.message_user(request, f"Customer {customer.id} created.", messages.SUCCESS)
            return HttpResponseRedirect(admin_url("customers_customer_change", customer.pk))

        return service_form_view(
            self,
            request,
            form_class=CustomerCreateForm,
            title="Create customer",
            perform=perform,
            submit_label="Create customer",
        )
