"""The customer portal's pages (``/portal/``): plain Django views and templates in the
console's look, each reading only the logged-in user's customer.

Every page but the login, the invitation and the second factor goes through
:func:`customer_page`: a user with no customer account (staff included) is sent to the
portal's login; with ``SVC_REQUIRE_2FA`` a session that has passed no second factor is
sent to the portal's second-factor page first. Another customer's ids answer 404, as if
they did not exist."""

from __future__ import annotations

import functools
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth import views as auth_views
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from billing import balances, documents, downloads
from billing import selectors as billing_selectors
from billing.offline import offline_file_answer
from config import clock
from config.admin.display import money, utc_time, utc_time_html
from config.errors import ServiceError
from console import charts
from console.second_factor import Site
from console.second_factor import second_factor as second_factor_flow
from console.views import OfflineFileForm, offline_answer_download
from events.display import test_result
from licensing import exports, leases
from licensing import selectors as licensing_selectors
from licensing.admin.display import progress_bar
from licensing.models import Activation
from licensing.services import trial_conversion_quote
from licensing.unit_states import unit_state_of, unit_states
from portal import selectors, services
from portal.models import CustomerApiKey, RenewalRequest
from portal.services import CUSTOMER_EVENTS
from svccore import dates

SEARCH_MAX = 100
BATCHES_SHOWN = 500
FLEET_PAGE = 100
# The fleet's "not seen for more than" choices (days), as the console's filter offers.
NOT_SEEN_CHOICES = (1, 7, 30, 90)
DAYS = 30


def _context(request: HttpRequest, title: str, **extra) -> dict:
    account = getattr(request, "account", None)
    return {
        "title": title,
        "account": account,
        "customer": account.customer if account else None,
        **extra,
    }


def customer_page(view):
    """Only a customer user (with its second factor when required) reaches ``view``;
    ``request.account`` and ``request.customer`` are set."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        account = selectors.account_of(request.user)
        if account is None:
            query = urlencode({"next": request.get_full_path()})
            return HttpResponseRedirect(f"{reverse('portal-login')}?{query}")
        if settings.SVC_REQUIRE_2FA and not request.user.is_verified():
            query = urlencode({"next": request.get_full_path()})
            return HttpResponseRedirect(f"{reverse('portal-second-factor')}?{query}")
        request.account = account
        request.customer = account.customer
        try:
            return view(request, *args, **kwargs)
        except ServiceError as exc:
            if exc.status_code == 404:
                raise Http404(exc.detail) from None
            raise

    return wrapper


# --- logging in ----------------------------------------------------------------------


class PortalLoginForm(auth_views.AuthenticationForm):
    def confirm_login_allowed(self, user) -> None:
        super().confirm_login_allowed(user)
        if selectors.account_of(user) is None:
            raise forms.ValidationError(
                "This is not a customer account. Operators log in to the console at /admin/.",
                code="not_customer",
            )


class PortalLoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    authentication_form = PortalLoginForm
    redirect_authenticated_user = False
    extra_context = {"title": "Log in"}

    def get_default_redirect_url(self) -> str:
        return reverse("portal-dashboard")


class PortalLogoutView(auth_views.LogoutView):
    next_page = "portal-login"


SITE = Site(
    template="portal/second_factor.html",
    codes_template="portal/second_factor_codes.html",
    home="portal-dashboard",
    login="portal-login",
    logout="portal-logout",
    context=lambda request: {},
)


def second_factor(request: HttpRequest) -> HttpResponse:
    if selectors.account_of(request.user) is None:
        return redirect("portal-login")
    return second_factor_flow(request, SITE)


class PasswordForm(forms.Form):
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    confirm = forms.CharField(
        label="Password again", widget=forms.PasswordInput(attrs={"autocomplete": "new-password"})
    )

    def clean(self):
        data = super().clean()
        if data.get("password") and data.get("password") != data.get("confirm"):
            self.add_error("confirm", "The two passwords differ.")
        return data


def invitation_base(request: HttpRequest) -> HttpResponse:
    return redirect("portal-login")


def invitation(request: HttpRequest, secret: str) -> HttpResponse:
    """The e-mailed link: set a password, then straight into the portal."""
    try:
        invited = services.invitation_open(secret)
    except ServiceError as exc:
        return TemplateResponse(
            request, "portal/invitation.html", _context(request, "Invitation", error=exc.detail),
            status=404,
        )  # fmt: skip
    form = PasswordForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            account = services.invitation_accept(
                secret=secret, password=form.cleaned_data["password"]
            )
        except ServiceError as exc:
            form.add_error("password", exc.detail.removeprefix("password: "))
        else:
            auth_login(request, account.user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(
                request, f"Welcome, your account for {account.customer.name} is ready."
            )
            return redirect("portal-dashboard")
    context = _context(request, f"Join {invited.customer.name}", form=form, invited=invited)
    return TemplateResponse(request, "portal/invitation.html", context)


# --- pages ---------------------------------------------------------------------------


def _batches(customer, limit: int | None = None) -> list[dict]:
    rows = selectors.batches_of(customer)
    rows = list(rows[:limit] if limit else rows)
    addons = selectors.active_addons_of([b.pk for b in rows])
    return [
        {
            "batch": b,
            "bar": progress_bar(activated=b.units_activated, purchased=b.units_purchased),
            "expires": utc_time(b.expires_at) or "perpetual",
            "addons": [grant.code for grant in addons[b.pk]],
        }
        for b in rows
    ]


def _trial(batch) -> dict:
    """What the batch page says of a trial: on trial (and what buying costs now), bought
    after a trial, or nothing for a batch bought outright."""
    if batch.is_trial:
        try:
            quote = trial_conversion_quote(batch_id=batch.pk)
        except ServiceError as exc:  # its key revoked: not for sale
            return {"on": True, "days": batch.trial_days, "refused": exc.detail}
        return {
            "on": True,
            "days": batch.trial_days,
            "units": quote.units,
            "unit_price": money(quote.unit_price, quote.currency),
            "amount": money(quote.amount, quote.currency),
        }
    conversion = getattr(batch, "trial_conversion", None)
    if conversion is None:
        return {}
    return {"bought": utc_time(conversion.converted_at), "units": conversion.units}


@customer_page
def dashboard(request: HttpRequest) -> HttpResponse:
    customer = request.customer
    period = selectors.usage_this_period(customer)
    usage = [
        {
            "sku": sku,
            "used": f"{period.inferences.get(sku, 0):,}",
            "allowance": f"{period.allowance[sku]:,}" if sku in period.allowance else "",
            "bar": progress_bar(
                activated=period.inferences.get(sku, 0), purchased=period.allowance[sku]
            )
            if period.allowance.get(sku)
            else "",
            "cost": money(*period.overage_cost[sku]) if sku in period.overage_cost else "",
        }
        for sku in sorted(set(period.inferences) | set(period.allowance))
    ]
    context = _context(
        request,
        f"{customer.name}",
        batches=_batches(customer, limit=20),
        chart=charts.day_columns(
            selectors.activations_per_day(customer, days=DAYS),
            title=f"New activations, last {DAYS} days",
        ),
        usage=usage,
        usage_since=utc_time(period.since),
        usage_invoice=period.invoice,
        usage_days=period.days,
        expiring=selectors.expiring_of(customer),
        expiring_days=selectors.EXPIRING_DAYS,
        grace=selectors.in_grace_of(customer),
        weak=selectors.weak_binding_of(customer),
    )
    return TemplateResponse(request, "portal/dashboard.html", context)


@customer_page
def batches(request: HttpRequest) -> HttpResponse:
    batches = _batches(request.customer, limit=BATCHES_SHOWN)
    context = _context(request, "Batches", batches=batches, more=len(batches) == BATCHES_SHOWN)
    return TemplateResponse(request, "portal/batches.html", context)


@customer_page
def batch(request: HttpRequest, batch_id: str) -> HttpResponse:
    found = selectors.batch_of(request.customer, batch_id)
    units = licensing_selectors.fleet_page(
        customer_id=request.customer.pk, batch_id=found.pk, limit=FLEET_PAGE
    )
    shown = _units(units.units)
    # Add-ons (issue 42): the batch's, and which units receive a change at their next sync.
    pending = selectors.addons_pending(found, [u["license_id"] for u in shown])
    for unit in shown:
        unit["addons_pending"] = unit["license_id"] in pending
    context = _context(
        request,
        f"Batch {found.pk}",
        batch=found,
        bar=progress_bar(activated=found.units_activated, purchased=found.units_purchased),
        expires=utc_time(found.expires_at) or "perpetual",
        units=shown,
        more=units.next_cursor is not None,
        addons=[
            {"code": g.code, "name": g.name, "since": utc_time(g.added_at), "adds": _adds(g)}
            for g in selectors.active_addons_of([found.pk])[found.pk]
        ],
        addons_pending=len(pending),
        trial=_trial(found),
    )
    return TemplateResponse(request, "portal/batch.html", context)


def _adds(grant) -> str:
    """What an add-on adds, in words: ``anpr``, ``+4 streams``."""
    parts = list(grant.modules)
    for count, what in ((grant.extra_streams, "streams"), (grant.extra_fps, "fps"),
                        (grant.extra_api_calls, "API calls")):  # fmt: skip
        if count:
            parts.append(f"+{count:,} {what}")
    return ", ".join(parts)


@customer_page
def batch_buy(request: HttpRequest, batch_id: str) -> HttpResponse:
    """Buy a trial batch: what it costs now (the cameras on trial x the unit price it was
    offered at, and the paid term), then, posted, bought at once (the customer confirmed
    that very amount; a camera activated meanwhile shows the page again)."""
    found = selectors.batch_of(request.customer, batch_id)
    if not found.is_trial:
        messages.info(request, f"Batch {found.pk} is not a trial: there is nothing to buy.")
        return redirect("portal-batch", batch_id=found.pk)
    changed = ""
    if request.method == "POST":
        try:
            result = services.trial_buy(
                customer_id=request.customer.pk,
                batch_id=found.pk,
                units_confirmed=int(request.POST.get("units", "-1") or -1),
            )
        except services.QuoteChanged as exc:
            changed = exc.detail
        except (ServiceError, ValueError) as exc:
            messages.error(request, getattr(exc, "detail", "not a number of cameras"))
            return redirect("portal-batch", batch_id=found.pk)
        else:
            conversion = result.conversion
            messages.success(
                request,
                f"Bought: batch {found.pk} is paid. Its {conversion.units:,} cameras on trial "
                f"keep running to {utc_time(conversion.expires_at) or 'no end (perpetual)'}, "
                "fetching their paid licences at their next sync; "
                f"{money(conversion.amount, conversion.currency)} is billed on your next "
                "invoice, and each camera activated from now on at "
                f"{money(conversion.unit_price, conversion.currency)}.",
            )
            return redirect("portal-batch", batch_id=found.pk)
    try:
        quote = trial_conversion_quote(batch_id=found.pk)
    except ServiceError as exc:  # its key revoked: not for sale
        messages.error(request, exc.detail)
        return redirect("portal-batch", batch_id=found.pk)
    context = _context(
        request,
        f"Buy batch {found.pk}",
        batch=found,
        quote=quote,
        unit_price=money(quote.unit_price, quote.currency),
        amount=money(quote.amount, quote.currency),
        ends=utc_time(quote.expires_at) or "no end (perpetual)",
        changed=changed,
    )
    return TemplateResponse(request, "portal/trial_buy.html", context)


def _units(units: list[dict]) -> list[dict]:
    """A page of the fleet as shown: activation time for people, each unit's state."""
    found = unit_states(u["license_id"] for u in units)
    return [
        {
            **u,
            "activated": utc_time_html(u["activated_at"]),
            "seen": utc_time_html(u["last_seen_at"]),
            "state": found[u["license_id"]],
        }
        for u in units
    ]


def _not_seen_days(request: HttpRequest) -> int | None:
    """The fleet's "not seen for more than" filter: one of NOT_SEEN_CHOICES, else none."""
    value = request.GET.get("not_seen_days", "")
    return int(value) if value in {str(days) for days in NOT_SEEN_CHOICES} else None


@customer_page
def fleet(request: HttpRequest) -> HttpResponse:
    customer = request.customer
    search = request.GET.get("q", "").strip()[:128]
    cursor = request.GET.get("cursor") or None
    not_seen_days = _not_seen_days(request)
    next_cursor = None
    if search:
        rows = Activation.objects.filter(batch__customer=customer, device_id__icontains=search)
        if not_seen_days is not None:
            rows = rows.filter(licensing_selectors.not_seen_since(not_seen_days))
        rows = list(
            rows.select_related("batch", "license", "license__seat_release").order_by(
                "-activated_at", "-id"
            )[:SEARCH_MAX]
        )
        leases.attach(rows, lambda row: row.license_id)  # each unit's hold and lease
        units = [
            {
                "device_id": r.device_id,
                "license_id": r.license_id,
                "batch_id": r.batch_id,
                "sku": r.batch.sku,
                "weak_binding": int(r.weak_binding),
                "activated": utc_time_html(r.activated_at),
                "seen": utc_time_html(r.last_seen_at),
                "state": unit_state_of(r.license, source=r),
            }
            for r in rows
        ]
    else:
        try:
            page = licensing_selectors.fleet_page(
                customer_id=customer.pk,
                not_seen_days=not_seen_days,
                cursor=cursor,
                limit=FLEET_PAGE,
            )
        except ServiceError:
            return redirect("portal-fleet")
        units = _units(page.units)
        next_cursor = page.next_cursor
    context = _context(
        request,
        "Fleet",
        units=units,
        search=search,
        next_cursor=next_cursor,
        search_max=SEARCH_MAX,
        not_seen_days=not_seen_days,
        not_seen_choices=NOT_SEEN_CHOICES,
        # Older units and the export keep the filter.
        filters=urlencode({"not_seen_days": not_seen_days}) if not_seen_days else "",
    )
    return TemplateResponse(request, "portal/fleet.html", context)


@customer_page
def fleet_csv(request: HttpRequest) -> HttpResponse:
    """Every unit of the customer (or of one of its batches), the admin export's
    columns, cells that a spreadsheet would run as a formula made inert."""
    customer = request.customer
    batch_id = request.GET.get("batch_id") or None
    if batch_id:
        selectors.batch_of(customer, batch_id)
    response = StreamingHttpResponse(
        exports.fleet_csv(
            customer_id=customer.pk, batch_id=batch_id, not_seen_days=_not_seen_days(request)
        ),
        content_type="text/csv; charset=utf-8",
    )
    stamp = clock.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = (
        f'attachment; filename="fleet-{batch_id or customer.pk}-{stamp}.csv"'
    )
    return response


@customer_page
def invoices(request: HttpRequest) -> HttpResponse:
    try:
        page = billing_selectors.invoices_page(
            customer_id=request.customer.pk, cursor=request.GET.get("cursor") or None, limit=50
        )
    except ServiceError:  # a cursor this page did not give: start from the newest
        return redirect("portal-invoices")
    now = clock.now()
    rows = [
        {"document": d, "total": money(d.gross_total, d.currency), "issued": dates.day(d.issued_at),
         "due": dates.day(documents.due_date(d)) if d.kind == "invoice" else "",
         **_standing_row(d, now)}
        for d in page.invoices
    ]  # fmt: skip
    context = _context(
        request, "Invoices and credit notes", rows=rows, next_cursor=page.next_cursor
    )
    return TemplateResponse(request, "portal/invoices.html", context)


def _standing_row(document, now) -> dict:
    """An invoice's state and balance as the portal shows them (issue 43): a credited
    invoice reads void, never payable; a credit note has neither."""
    standing = balances.standing_of(document, now)
    if standing is None:
        return {"state": "", "state_code": "", "balance": "", "payable": False}
    return {
        "state": standing.label,
        "state_code": standing.state,
        "balance": money(standing.balance, document.currency),
        "payable": standing.payable,
        "paid": money(standing.paid, document.currency),
    }


@customer_page
def document(request: HttpRequest, number: str) -> HttpResponse:
    found = selectors.document_of(request.customer, number)
    context = _context(
        request,
        f"{'Credit note' if found.credits_id else 'Invoice'} {number}",
        body=documents.document_html(found),
        document=found,
        standing=_standing_row(found, clock.now()),
        credit_notes=[
            {
                "number": note.number,
                "total": money(note.gross_total, note.currency),
                "partial": note.partial,
            }
            for note in found.credit_notes.order_by("pk")
        ],
    )
    return TemplateResponse(request, "portal/document.html", context)


@customer_page
def document_pdf(request: HttpRequest, number: str) -> HttpResponse:
    found = selectors.document_of(request.customer, number)
    return downloads.pdf_response(found)


@customer_page
def document_xml(request: HttpRequest, number: str) -> HttpResponse:
    """The document's EN 16931 XML (``?syntax=cii``, the default, or ``ubl``), or its
    page saying why not."""
    found = selectors.document_of(request.customer, number)
    try:
        return downloads.xml_response(found, request.GET.get("syntax", "cii"))
    except ServiceError as exc:
        messages.error(request, exc.detail)
        return redirect("portal-document", number=found.number)


# --- renewal requests ----------------------------------------------------------------


class RenewalForm(forms.Form):
    target = forms.CharField(
        max_length=64,
        label="Batch or licence",
        help_text="The id of one of your batches or direct licences (the list offers them).",
        widget=forms.TextInput(attrs={"list": "renewable", "autocomplete": "off"}),
    )
    term_days = forms.IntegerField(
        min_value=1,
        max_value=3650,
        required=False,
        label="Days",
        help_text="Empty: the product's term.",
    )
    note = forms.CharField(max_length=500, required=False, widget=forms.Textarea(attrs={"rows": 2}))


@customer_page
def renewals(request: HttpRequest) -> HttpResponse:
    customer = request.customer
    form = RenewalForm(request.POST or None, initial={"target": request.GET.get("target", "")})
    if request.method == "POST" and form.is_valid():
        try:
            made = services.renewal_request_create(
                customer_id=customer.pk,
                target=form.cleaned_data["target"],
                term_days=form.cleaned_data["term_days"],
                note=form.cleaned_data["note"],
                requested_by=request.user.get_username(),
            )
        except ServiceError as exc:
            if exc.status_code == 404:
                raise Http404(exc.detail) from None
            form.add_error("target", exc.detail)
        else:
            messages.success(
                request,
                f"Renewal request {made.id} for {made.target} sent. Nothing is renewed or "
                "billed until an operator approves it.",
            )
            return redirect("portal-renewals")
    context = _context(
        request,
        "Renewal requests",
        form=form,
        requests=RenewalRequest.objects.filter(customer=customer)[:100],
        renewable=selectors.renewable_of(customer),
    )
    return TemplateResponse(request, "portal/renewals.html", context)


# --- air-gapped cameras (issue 44) ----------------------------------------------------


@customer_page
def offline(request: HttpRequest) -> HttpResponse:
    """Answer a file of one of the customer's air-gapped cameras (a request for another
    customer's batch, or a usage file of another's licence, is refused as unknown), and
    the units that exchanged files with the date of their last exchange."""
    customer = request.customer
    form = OfflineFileForm(
        request.POST if request.method == "POST" else None, request.FILES or None
    )
    if request.method == "POST" and form.is_valid():
        try:
            made = offline_file_answer(
                text=form.cleaned_data["content"],
                channel="portal",
                customer_id=customer.pk,
                actor=request.user.get_username(),
            )
        except ServiceError as exc:
            form.add_error(None, exc.detail)
        else:
            return offline_answer_download(made)
    context = _context(
        request,
        "Air-gapped cameras",
        form=form,
        units=licensing_selectors.offline_units(customer_id=customer.pk),
    )
    return TemplateResponse(request, "portal/offline.html", context)


# --- API keys and webhooks -----------------------------------------------------------


class KeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the key is for (e.g. fleet-sync).")
    write = forms.BooleanField(
        required=False,
        label="May upload air-gapped cameras' files",
        help_text="Activation requests (each takes a seat) and usage files, through "
        "/v1/customer/offline/...; without it the key only reads.",
    )


@customer_page
def api_keys(request: HttpRequest) -> HttpResponse:
    customer = request.customer
    form = KeyForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            _row, created = services.customer_key_create(
                customer_id=customer.pk,
                name=form.cleaned_data["name"],
                created_by=request.user.get_username(),
                owner=request.account,
                write=form.cleaned_data["write"],
            )
        except ServiceError as exc:
            form.add_error("name", exc.detail)
        else:
            form = KeyForm()
    context = _context(
        request,
        "API keys",
        form=form,
        created=created,
        keys=CustomerApiKey.objects.filter(customer=customer)[:100],
        rate=settings.SVC_CUSTOMER_API_RATE,
        api_base=request.build_absolute_uri("/v1/customer/"),
    )
    return TemplateResponse(request, "portal/api_keys.html", context)


@require_POST
@customer_page
def api_key_revoke(request: HttpRequest, prefix: str) -> HttpResponse:
    row = services.customer_key_revoke(customer_id=request.customer.pk, prefix=prefix)
    messages.success(request, f"Key {row.name} revoked: it opens nothing from now on.")
    return redirect("portal-api-keys")


class WebhookForm(forms.Form):
    url = forms.URLField(max_length=2000, label="URL", assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=[(e, e) for e in CUSTOMER_EVENTS], widget=forms.CheckboxSelectMultiple
    )


@customer_page
def webhooks(request: HttpRequest) -> HttpResponse:
    customer = request.customer
    form = WebhookForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            hook = services.customer_webhook_create(
                customer_id=customer.pk,
                url=form.cleaned_data["url"],
                events=form.cleaned_data["events"],
            )
        except ServiceError as exc:
            form.add_error("url", exc.detail)
        else:
            secret = (hook.id, hook.secret)
            form = WebhookForm()
    context = _context(
        request,
        "Webhooks",
        form=form,
        secret=secret,
        hooks=customer.webhooks.order_by("created_at", "id"),
    )
    return TemplateResponse(request, "portal/webhooks.html", context)


@require_POST
@customer_page
def webhook_delete(request: HttpRequest, webhook_id: str) -> HttpResponse:
    services.customer_webhook_delete(customer_id=request.customer.pk, webhook_id=webhook_id)
    messages.success(request, f"Webhook {webhook_id} deleted.")
    return redirect("portal-webhooks")


@require_POST
@customer_page
def webhook_rotate(request: HttpRequest, webhook_id: str) -> HttpResponse:
    hook = services.customer_webhook_rotate(customer_id=request.customer.pk, webhook_id=webhook_id)
    context = _context(
        request, "Webhooks", form=WebhookForm(), secret=(hook.id, hook.secret),
        hooks=request.customer.webhooks.order_by("created_at", "id"), rotated=True,
    )  # fmt: skip
    return TemplateResponse(request, "portal/webhooks.html", context)


@require_POST
@customer_page
def webhook_test(request: HttpRequest, webhook_id: str) -> HttpResponse:
    """Send a signed test event to the endpoint now and say what it answered."""
    hook, event, outcome = services.customer_webhook_test(
        customer_id=request.customer.pk, webhook_id=webhook_id
    )
    messages.add_message(request, *test_result(hook, event, outcome))
    return redirect("portal-webhooks")
