"""Add-ons in the console (issue 42 item 4): the catalogue's add-ons on their SKU's page
(finance edits them), and the actions that add one to selected batches or direct
licences, or remove it, on a confirmation page that names the rows, what each carries now
and what a camera receiving the add-on today is billed (capability ``issue_licences``,
the sale's). Every write is ``addon_add`` / ``addon_remove``, as for the API and svcctl."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join

from config import clock
from config.admin.base import confirm_page, may
from config.admin.display import counted, money, utc_time
from config.errors import ServiceError
from licensing.models import AddOn, AddOnGrant, Batch, License
from licensing.services import addon_add, addon_remove
from svccore import addons as rules


class AddOnInline(admin.TabularInline):
    """The add-ons of a SKU, on its catalogue page: priced and edited by finance, like
    the SKU itself. One that was sold is kept (its grants protect it): withdraw it by
    clearing *available*."""

    model = AddOn
    extra = 0
    fields = [
        "code",
        "name",
        "modules",
        "extra_streams",
        "extra_fps",
        "extra_api_calls",
        "unit_price",
        "available",
    ]
    can_delete = False

    def has_view_permission(self, request, obj=None):
        return may(request, "view_service")

    def has_add_permission(self, request, obj=None):
        return may(request, "manage_billing")

    def has_change_permission(self, request, obj=None):
        return may(request, "manage_billing")


class AddOnMixin:
    """The permission of the add-on actions, and the add-ons of a batch or licence page."""

    def has_addon_permission(self, request) -> bool:
        return may(request, "issue_licences")


def _terms(grant: AddOnGrant | AddOn, currency: str, term_days: int) -> str:
    price = money(grant.unit_price, currency)
    if term_days:
        return f"{price} per unit per {term_days}-day term, pro rata"
    return f"{price} per unit, once"


def grants_shown(owner_license_id: str, *, units: tuple[int, int] | None = None):
    """The add-ons sold for a batch key or direct licence, as a batch or licence page
    shows them: active ones with their terms, then removed ones. ``units``: (units whose
    licence carries the batch's add-ons of now, units activated), said after the list."""
    grants = list(
        AddOnGrant.objects.filter(license_id=owner_license_id).order_by("removed_at", "-added_at")
    )
    if not grants:
        return "none"
    rows = format_html_join(
        "",
        '<li class="svc-addon-{}"><strong>{}</strong> ({}): {}; {}</li>',
        (
            (
                "active" if g.active else "removed",
                g.code,
                g.name,
                _terms(g, g.currency, g.term_days),
                f"since {utc_time(g.added_at)}"
                if g.active
                else f"removed {utc_time(g.removed_at)}"
                + (f" ({g.remove_reason})" if g.remove_reason else ""),
            )
            for g in grants
        ),
    )
    after = ""
    if units is not None:
        carrying, activated = units
        after = format_html(
            '<p class="svc-quiet" id="addon-delivery">{} of {} carry them now; the others '
            "receive them at their next sync.</p>",
            f"{carrying:,}",
            counted(activated, "activated unit"),
        )
    return format_html('<ul class="svc-addons">{}</ul>{}', rows, after)


class AddOnForm(forms.Form):
    addon = forms.ChoiceField(label="Add-on", help_text="One of the SKUs' catalogue add-ons.")


class AddOnRemoveForm(forms.Form):
    addon = forms.ChoiceField(label="Add-on")
    reason = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Optional: recorded in the audit log and the event.",
    )


def _owner(row: Batch | License) -> str:
    return row.license_id if isinstance(row, Batch) else row.pk


def _now_carries(rows: list) -> dict[str, list[str]]:
    owners = [_owner(row) for row in rows]
    carried: dict[str, list[str]] = {owner: [] for owner in owners}
    for owner, code in AddOnGrant.objects.filter(
        license_id__in=owners, removed_at__isnull=True
    ).values_list("license_id", "code"):
        carried[owner].append(code)
    return carried


def _charge_today(row: Batch | License, offered: dict[tuple[str, str], AddOn], code: str) -> str:
    """What one camera receiving ``code`` now is billed, in the guide's terms."""
    addon = offered.get((row.sku, code))
    if addon is None:
        return "not offered for its SKU"
    sku = addon.sku
    end = row.expires_at
    if end is None or sku.term_days == 0:
        return f"{money(addon.unit_price, sku.currency)} once per unit"
    now = clock.now()
    if end <= now:
        return "its term has ended: renew it first"
    days = rules.days_between(now, end)
    share = rules.line_quantity(charged=days, term_days=sku.term_days)
    return (
        f"{money(addon.unit_price, sku.currency)} x {days}/{sku.term_days} days = "
        f"{money(addon.unit_price * share, sku.currency)} per unit receiving it today"
    )


def addon_action(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset,
    *,
    target: str,  # "batch_id" or "license_id": the service's argument
    what: str,  # plural: "batches", "licences"
    action_name: str,
    add: bool,
) -> HttpResponse | None:
    """Ask which add-on (and for a removal, why), showing each selected row; then add it
    to (or remove it from) each."""
    rows = list(queryset)
    carried = _now_carries(rows)
    skus = {row.sku for row in rows}
    offered = {
        (a.sku_id, a.code): a
        for a in AddOn.objects.filter(sku_id__in=skus).select_related("sku").order_by("code")
    }
    if add:
        choices = sorted(
            {(a.code, f"{a.code} ({a.name})") for a in offered.values() if a.available}
        )
    else:
        choices = sorted({(code, code) for codes in carried.values() for code in codes})
    form_class = AddOnForm if add else AddOnRemoveForm
    form = form_class(request.POST if "apply" in request.POST else None)
    form.fields["addon"].choices = choices
    if "apply" in request.POST and form.is_valid():
        code = form.cleaned_data["addon"]
        done = unchanged = 0
        for row in rows:
            try:
                if add:
                    change = addon_add(addon=code, **{target: row.pk})
                else:
                    change = addon_remove(
                        addon=code, reason=form.cleaned_data["reason"], **{target: row.pk}
                    )
            except ServiceError as exc:
                model_admin.message_user(request, exc.detail, messages.ERROR)
                continue
            done += change.changed
            unchanged += not change.changed
        singular = "batch" if what == "batches" else "licence"
        if done:
            effect = (
                "each camera receives it at its next sync (a new activation at once) and is "
                "billed from then, pro rata to the end of its term"
                if add
                else "each camera loses it at its next sync; nothing is billed back"
            )
            model_admin.message_user(
                request,
                f"{'Added' if add else 'Removed'} {code} {'to' if add else 'from'} "
                f"{counted(done, singular, what)}; {effect}.",
                messages.SUCCESS,
            )
        if unchanged:
            model_admin.message_user(
                request,
                f"{counted(unchanged, singular, what)} {'was' if unchanged == 1 else 'were'} "
                f"already {'carrying' if add else 'without'} {code}: nothing changed.",
                messages.WARNING,
            )
        return None
    details: list[dict[str, Any]] = [
        {
            "id": row.pk,
            "sku": row.sku,
            "customer": row.customer.name,
            "ends": utc_time(row.expires_at) if row.expires_at else "never (perpetual)",
            "carries": ", ".join(carried[_owner(row)]) or "no add-on",
            "charges": [
                (a.code, _charge_today(row, offered, a.code))
                for (sku, _), a in offered.items()
                if sku == row.sku and a.available
            ]
            if add
            else [],
        }
        for row in rows
    ]
    verb = "Add" if add else "Remove"
    singular = "batch" if what == "batches" else "licence"
    return confirm_page(
        model_admin,
        request,
        queryset,
        template="admin/addon_confirm.html",
        title=f"{verb} an add-on {'to' if add else 'from'} {what}",
        form=form,
        action_name=action_name,
        rows=rows,
        details=details,
        add=add,
        noun="Batch" if what == "batches" else "Licence",
        verb=verb,
        target=counted(len(rows), singular, what),
        nothing_to_choose=not choices,
    )
