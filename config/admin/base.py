"""Base classes for the operator console's model admins (how values are shown:
:mod:`config.admin.display`).

Rows that carry business rules (batches, licences, activations, invoices, the audit log)
are created by services and never edited or deleted in place from the admin.

An admin "add" page is a plain form whose valid data goes to one service call
(``customer_create``, ``batch_issue``, ``license_issue``) through
:func:`service_form_view`; a :class:`ServiceError` comes back as a form error with the
service's own message, so the admin applies exactly the rules the API applies, and a
failed attempt is still in the audit log. An action that needs input first shows
:func:`confirm_page`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ORDER_VAR, ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import connection, models
from django.db.models import F, Q
from django.db.models.functions import Collate
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import cached_property

from config.admin.display import utc_time_html
from config.errors import ServiceError

# The admin's navigation sidebar takes 300 px from every list, which then no longer fits
# a laptop screen; the index lists every model and every page has breadcrumbs.
admin.site.enable_nav_sidebar = False
# The product, not "Django administration", in every page's header and title.
admin.site.site_header = "Licensing authority · operator console"
admin.site.site_title = "Licensing console"
admin.site.index_title = "Operator console"

# Tables an operator rarely opens: bookkeeping under the ledger and login lockouts. The
# index lists them apart, below the rest ("Internal tables"); their pages stay where
# they are, linked from where they matter.
INTERNAL_TABLES = {
    ("billing", "invoiceline"),
    ("billing", "ledgerentry"),
    ("billing", "prunedusagemonth"),
    ("billing", "usagerecord"),
    ("axes", "accessattempt"),
    ("axes", "accesslog"),
    ("axes", "accessfailurelog"),
}


def split_app_list(app_list: list[dict]) -> tuple[list[dict], list[dict]]:
    """The index's apps without the :data:`INTERNAL_TABLES`, and those tables' apps."""
    main, internal = [], []
    for app in app_list:
        label = app["app_label"]
        kept = [
            m for m in app["models"] if (label, m["object_name"].lower()) not in INTERNAL_TABLES
        ]
        moved = [m for m in app["models"] if (label, m["object_name"].lower()) in INTERNAL_TABLES]
        if kept:
            main.append({**app, "models": kept})
        if moved:
            internal.append({**app, "models": moved})
    return main, internal


_index = admin.site.index


def _index_split(request, extra_context=None):
    app_list = admin.site.get_app_list(request)
    main, internal = split_app_list(app_list)
    return _index(request, {"app_list": main, "internal_list": internal, **(extra_context or {})})


admin.site.index = _index_split


def _time_column(field: models.Field, empty: str | None = None):
    """A display of a date-time (or Unix-seconds) field as :func:`utc_time_html`, sorted
    by the field and named like it (so it keeps the field's CSS class and help text);
    ``empty`` stands for no moment (default: the admin's "-")."""

    def show(obj):
        return utc_time_html(getattr(obj, field.name)) or empty

    show.__name__ = field.name
    return admin.display(description=field.verbose_name, ordering=field.name)(show)


def _grouped_column(field: models.Field):
    """A list column of an integer field with its thousands grouped (140,000, not
    140000: issue 41), sorted by the field and named like it (its CSS class stays)."""

    def show(obj):
        value = getattr(obj, field.name)
        return None if value is None else f"{value:,}"

    show.__name__ = field.name
    return admin.display(description=field.verbose_name, ordering=field.name)(show)


# --- lists at fleet scale (issue 15) ---------------------------------------------------

# Rows a list counts exactly; past this many it shows the planner's estimate ("about").
EXACT_COUNT_MAX = 10_000
# Pages a list offers: deeper pages are OFFSETs over millions of rows. Narrow the list
# (filters, search) to reach further.
PAGES_MAX = 100
# Rows of a small related table (customers, batches) a search may match by name or id.
SEARCH_RELATED_MAX = 1000


class EstimatedCountPaginator(Paginator):
    """Counts a list by ``SELECT count(*) FROM (... LIMIT EXACT_COUNT_MAX + 1)``, which
    the list's index serves in milliseconds; past that, the planner's estimate of the
    rows (PostgreSQL's EXPLAIN), never an exact ``COUNT(*)`` over millions of rows.
    ``estimated`` says which it is; pages stop at ``PAGES_MAX``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.estimated = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list.order_by()
        capped = queryset[: EXACT_COUNT_MAX + 1].count()
        if capped <= EXACT_COUNT_MAX or connection.vendor != "postgresql":
            return capped if capped <= EXACT_COUNT_MAX else queryset.count()
        self.estimated = True
        plan = json.loads(queryset.explain(format="json"))
        return max(capped, int(plan[0]["Plan"]["Plan Rows"]))

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, PAGES_MAX)


class ScaleChangeList(ChangeList):
    """A change list that says when its count is the planner's estimate."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_count_estimated = getattr(self.paginator, "estimated", False)
        self.result_count_shown = f"{self.result_count:,}"


def byte_order(field: str) -> Collate | F:
    """``field`` in the "C" collation (byte order): what the device-id indexes are built
    in (licensing migration 0006), so LIKE 'prefix%' and ORDER BY both use them."""
    collation = {"postgresql": "C", "sqlite": "BINARY"}.get(connection.vendor)
    return Collate(F(field), collation) if collation else F(field)


def _related_keys(model, field_name: str, lookups: tuple[str, ...], term: str) -> list:
    related = model._meta.get_field(field_name).related_model
    matches = Q(pk__in=[])
    for lookup in lookups:
        if lookup.startswith("="):
            matches |= Q(**{lookup[1:]: term})
        else:
            matches |= Q(**{f"{lookup}__icontains": term})
    return list(
        related._default_manager.filter(matches)
        .order_by()
        .values_list("pk", flat=True)[:SEARCH_RELATED_MAX]
    )


class IndexedSearchMixin:
    """Search a big table only by what its indexes find, in two steps.

    First what the term names whole: ``search_exact`` columns of the table (its id, a
    batch id) and, through ``search_related``, the rows of a small related table
    (customers, batches) whose lookups match (``=id`` whole, ``name`` a part of it, any
    case), resolved first to at most SEARCH_RELATED_MAX keys. When any row is named so,
    those are the results, in the list's own order.

    Otherwise the rows whose ``search_prefix`` column (device ids) starts with the term,
    case as typed, listed in that column's byte order: one range of an index in the "C"
    collation, the term's exact match first. (Newest first instead would have the
    database walk the time index past every row that does not match: seconds when the
    matches are old, as the device ids of one production run are.)

    No ``LIKE '%term%'`` and no join over millions of rows; the term is taken whole
    (ids have no spaces)."""

    search_exact: tuple[str, ...] = ()
    search_related: dict[str, tuple[str, ...]] = {}
    search_prefix: str | None = None

    def get_search_fields(self, request):
        # Django shows the search box when there are search fields.
        return [*self.search_exact, *self.search_related, *filter(None, [self.search_prefix])]

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        named = Q(pk__in=[])
        for field in self.search_exact:
            named |= Q(**{field: term})
        for field_name, lookups in self.search_related.items():
            keys = _related_keys(self.model, field_name, lookups, term)
            if keys:
                named |= Q(**{f"{field_name}__in": keys})
        if self.search_prefix is None or queryset.filter(named).exists():
            return queryset.filter(named), False
        key = byte_order(self.search_prefix)
        found = queryset.alias(_search_key=key).filter(_search_key__startswith=term)
        if ORDER_VAR not in request.GET:  # (the change list has ordered the list already)
            found = found.order_by(key.asc(), "-pk")
        return found, False


def choices_filter(parameter: str, title: str, choices: Callable[[], list[tuple[str, str]]]):
    """A list filter on ``parameter`` (a column) whose choices come from ``choices``
    (the catalogue, a fixed list) instead of Django's ``SELECT DISTINCT`` over the whole
    table."""

    class ChoicesFilter(admin.SimpleListFilter):
        parameter_name = parameter

        def lookups(self, request, model_admin):
            return choices()

        def queryset(self, request, queryset):
            if self.value() is None:
                return queryset
            return queryset.filter(**{parameter: self.value()})

    ChoicesFilter.title = title
    ChoicesFilter.__name__ = f"{parameter.title().replace('_', '')}Filter"
    return ChoicesFilter


# --- who may: the roles' capabilities (operators.roles) --------------------------------


def may(request: HttpRequest, capability: str | None) -> bool:
    """Whether the console user holds ``capability`` (``operators.roles.CAPABILITIES``)
    through a role (a Django group); a superuser holds every one."""
    return bool(capability) and request.user.has_perm(f"operators.{capability}")


def require(request: HttpRequest, capability: str) -> None:
    """PermissionDenied (403) naming ``capability`` unless the user holds it."""
    if not may(request, capability):
        raise PermissionDenied(
            f"your roles lack the permission {capability!r}; an administrator can add you "
            "to a role that holds it (Authentication and authorization → Groups)"
        )


class GuardedListMixin:
    """A changelist's query string and an action's selection are what the browser sent:
    a value no list can hold answers as Django answers an unknown filter (the list again,
    flagged ``?e=1``) or as an empty selection (the list, with a message), never a 500.

    Django parses a date-hierarchy year into a ``datetime`` outside its own check
    (``__year=99999999999999999999999`` overflows, ``__year=9999`` has no next year),
    and filters the selection with ids as sent (``zzz``, NUL, 30 digits fail in the
    query). Every admin of the site has this (:func:`guard_every_admin`)."""

    def get_changelist_instance(self, request):
        try:
            return super().get_changelist_instance(request)
        except (ValueError, OverflowError, ValidationError) as exc:
            raise IncorrectLookupParameters(exc) from exc

    def response_action(self, request, queryset):
        key = self.model._meta.pk
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                if "\x00" in value:
                    raise ValidationError("NUL")
                key.run_validators(key.to_python(value))
            except ValidationError:
                self.message_user(
                    request,
                    f"The selection holds {value[:40]!r}, which is not the id of a "
                    f"{self.model._meta.verbose_name}. Nothing was changed.",
                    messages.ERROR,
                )
                return None  # the list again, as for an empty selection
        return super().response_action(request, queryset)


def guard_every_admin(site: admin.AdminSite) -> None:
    """Give every admin registered on ``site`` :class:`GuardedListMixin`, those of
    Django's and the third-party apps (groups, login lockouts, OTP devices) included.
    Called once the admins are registered (``config.urls``)."""
    for model, model_admin in list(site._registry.items()):
        if isinstance(model_admin, GuardedListMixin):
            continue
        cls = type(model_admin)
        site.unregister(model)
        site.register(model, type(cls.__name__, (GuardedListMixin, cls), {}))


class CapabilityAdmin(GuardedListMixin, admin.ModelAdmin):
    """Who may see and write a model in the console, by capability instead of Django's
    per-model permissions: reading takes ``view_capability``, the add form
    ``add_capability``, editing ``change_capability`` (None: nobody). Nothing is deleted
    here. An action names its capability in ``permissions=[...]`` through a
    ``has_<name>_permission`` of its admin, which asks :func:`may`."""

    view_capability: str | None = "view_service"
    add_capability: str | None = None
    change_capability: str | None = None

    def get_list_display(self, request):
        """Counts and amounts held as integers read grouped in every list (Django groups
        them only with USE_THOUSAND_SEPARATOR, which would group ids in forms too)."""
        fields = {
            f.name: f
            for f in self.model._meta.concrete_fields
            if isinstance(f, models.IntegerField)
            and not f.primary_key
            and f.name not in getattr(self, "unix_time_fields", ())  # shown as times
        }
        if not hasattr(self, "_grouped_columns"):
            self._grouped_columns = {name: _grouped_column(f) for name, f in fields.items()}
        return [
            self._grouped_columns.get(n, n) if isinstance(n, str) else n
            for n in super().get_list_display(request)
        ]

    def has_module_permission(self, request):
        return may(request, self.view_capability)

    def has_view_permission(self, request, obj=None):
        return may(request, self.view_capability) or self.has_change_permission(request, obj)

    def has_add_permission(self, request, obj=None):
        return may(request, self.add_capability)

    def has_change_permission(self, request, obj=None):
        return may(request, self.change_capability)

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    """Rows shown on their parent's page, seen by whoever may read it, never edited."""

    extra = 0
    can_delete = False

    def has_view_permission(self, request, obj=None):
        return may(request, "view_service")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class NoEditAdmin(CapabilityAdmin):
    """Rows may be added (through a service-backed form), never changed or deleted.

    Lists stay fast however big the table (issue 15): counted by
    :class:`EstimatedCountPaginator`, no second count of the unfiltered table, no
    facet counts.

    Date-time fields, and the Unix-second fields named in ``unix_time_fields``, show as
    :func:`utc_time` in lists and on the row's page (``empty_times`` names what a missing
    one means). A row's history is its entries in the audit log: services record every
    action there, never in the admin's own LogEntry."""

    unix_time_fields: tuple[str, ...] = ()
    empty_times: dict[str, str] = {}
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_changelist(self, request, **kwargs):
        return ScaleChangeList

    def __init__(self, model, admin_site):
        super().__init__(model, admin_site)
        # One display per field, made once: the admin matches fields to read-only
        # fields by identity.
        self._time_columns = {
            field.name: _time_column(field, self.empty_times.get(field.name))
            for field in model._meta.concrete_fields
            if isinstance(field, models.DateTimeField) or field.name in self.unix_time_fields
        }

    def _dated(self, names):
        return [self._time_columns.get(n, n) if isinstance(n, str) else n for n in names]

    def get_list_display(self, request):
        return self._dated(super().get_list_display(request))

    def get_fields(self, request, obj=None):
        return self._dated(super().get_fields(request, obj))

    def get_readonly_fields(self, request, obj=None):
        return self._dated(super().get_readonly_fields(request, obj))

    def history_view(self, request, object_id, extra_context=None):
        query = urlencode({"q": object_id})
        return HttpResponseRedirect(f"{reverse('admin:audit_auditentry_changelist')}?{query}")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(NoEditAdmin):
    """Viewable by staff with the view permission; never added, changed or deleted here."""

    def has_add_permission(self, request, obj=None):
        return False


# --- pages that write through a service ------------------------------------------------


def _digest(data: dict[str, Any]) -> str:
    """What a confirmation was shown for: the form's cleaned values."""
    text = json.dumps({name: str(value) for name, value in data.items()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def service_form_view(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    form_class: type[forms.Form],
    title: str,
    perform: Callable[[dict[str, Any]], HttpResponse],
    submit_label: str,
    intro: str = "",
    confirm: Callable[[dict[str, Any]], tuple[Any, str]] | None = None,
) -> HttpResponse:
    """A form whose valid data goes to ``perform`` (one service call). With ``confirm``,
    valid data first shows the form again with what will happen above it (the amount,
    the end; ``confirm(data)`` gives that and the button's label; a service refusal
    shows as the form's error); only a post of the same values performs, so what was
    confirmed is what is done."""
    if not model_admin.has_add_permission(request):
        raise PermissionDenied
    confirmation = confirmed = None
    label = submit_label
    if request.method == "POST":
        form = form_class(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                if confirm is None or request.POST.get("_confirmed") == _digest(data):
                    return perform(data)
                (confirmation, label), confirmed = confirm(data), _digest(data)
            except ServiceError as exc:
                form.add_error(None, exc.detail)
    else:
        form = form_class(initial=request.GET.dict())
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        "title": title,
        "intro": intro,
        "form": form,
        "submit_label": label,
        "confirmation": confirmation,
        "confirmed": confirmed,
        "has_view_permission": model_admin.has_view_permission(request),
    }
    return TemplateResponse(request, "admin/service_form.html", context)


def confirm_page(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset,
    *,
    template: str,
    title: str,
    form: forms.Form,
    action_name: str,
    rows: list[Any],
    **extra: Any,
) -> TemplateResponse:
    """The page an admin action shows before it acts: the selected rows, the form that
    asks for its input, and the hidden fields that post the same action back
    (``admin/revoke_confirm.html`` and the pages that extend it)."""
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        "title": title,
        "rows": rows,
        "selected": [row.pk for row in queryset],
        "form": form,
        "action_name": action_name,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        **extra,
    }
    return TemplateResponse(request, template, context)
