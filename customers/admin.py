"""Customers in the operator console. Created through ``customer_create`` (the service the
API uses); read-only afterwards, since no service edits a customer."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from config.adminbase import NoEditAdmin, service_form_view
from customers.models import Customer
from customers.services import customer_create


class CustomerCreateForm(forms.Form):
    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=Customer.Kind.choices)
    contact = forms.CharField(max_length=254, required=False, help_text="Contact address.")
    id = forms.CharField(
        max_length=64,
        required=False,
        label="Customer id",
        help_text="Optional; generated when empty. Stored with the CUST- prefix.",
    )


@admin.register(Customer)
class CustomerAdmin(NoEditAdmin):
    list_display = ["id", "name", "kind", "contact", "batch_count", "created_at"]
    list_filter = ["kind", "created_at"]
    search_fields = ["id", "name", "contact"]
    date_hierarchy = "created_at"
    fields = ["id", "name", "kind", "contact", "created_at", "operations"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_batches=Count("batches"))

    @admin.display(description="batches", ordering="_batches")
    def batch_count(self, customer: Customer) -> int:
        return customer._batches

    @admin.display(description="operations")
    def operations(self, customer: Customer):
        return format_html(
            '<a class="button" href="{}?customer={}">Issue batch</a> '
            '<a class="button" href="{}?customer={}">Issue licence</a> '
            '<a class="button" href="{}?customer={}">Invoice preview</a> '
            '<a href="{}?customer__id__exact={}">Licences</a> · '
            '<a href="{}?batch__customer__id__exact={}">Fleet</a>',
            reverse("admin:licensing_batch_add"),
            customer.pk,
            reverse("admin:licensing_license_add"),
            customer.pk,
            reverse("console-invoice-preview"),
            customer.pk,
            reverse("admin:licensing_license_changelist"),
            customer.pk,
            reverse("admin:licensing_activation_changelist"),
            customer.pk,
        )

    def add_view(self, request, form_url="", extra_context=None):
        def perform(data):
            customer = customer_create(
                name=data["name"],
                kind=data["kind"],
                contact=data["contact"],
                id=data["id"] or None,
            )
            self.message_user(request, f"Customer {customer.id} created.", messages.SUCCESS)
            return HttpResponseRedirect(
                reverse("admin:customers_customer_change", args=[customer.pk])
            )

        return service_form_view(
            self,
            request,
            form_class=CustomerCreateForm,
            title="Create customer",
            perform=perform,
            submit_label="Create customer",
        )
