"""Events and webhook endpoints in the operator console: the event log (read-only), the
endpoints with their recent attempts, registered through ``webhook_create`` (the secret
is shown once, on the page after), and actions to rotate a secret, enable a disabled
endpoint and send an event again."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpResponseRedirect
from django.urls import path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from config.admin.base import NoEditAdmin, ReadOnlyAdmin, may, require, service_form_view
from config.admin.display import TIME_KEYS, admin_url, pretty_json, utc_time
from events import delivery, services
from events.display import test_result
from events.models import DeliveryAttempt, Event, Webhook
from svccore import dates

ATTEMPTS_SHOWN = 20


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "type", "customer_id", "event_id", "summary"]
    list_filter = ["type"]
    search_fields = ["=event_id", "=customer_id"]
    list_per_page = 100
    fields = ["event_id", "type", "customer_id", "created_at", "data_shown", "once_key"]
    readonly_fields = fields

    @admin.display(description="data")
    def summary(self, event: Event) -> str:
        def shown(key: str, value) -> str:
            if key in TIME_KEYS and isinstance(value, int):
                return utc_time(value) or "never"
            return str(value)

        text = ", ".join(f"{k}={shown(k, v)}" for k, v in event.data.items() if k != "customer_id")
        return text if len(text) <= 100 else text[:99] + "\u2026"

    @admin.display(description="data")
    def data_shown(self, event: Event):
        return pretty_json(event.data)


class WebhookCreateForm(forms.Form):
    url = forms.CharField(
        max_length=2000,
        help_text="https:// to a public address. It receives events from now on, in order.",
    )
    events = forms.MultipleChoiceField(
        choices=[("*", "every event type")] + list(Event.Type.choices),
        widget=forms.CheckboxSelectMultiple,
    )
    customer_id = forms.CharField(
        max_length=64, required=False, help_text="Only this customer's events; empty: all."
    )


class RedeliverForm(forms.Form):
    event_id = forms.CharField(max_length=40, help_text="evt_..., from the event log.")


@admin.register(Webhook)
class WebhookAdmin(NoEditAdmin):
    add_capability = "manage_webhooks"
    empty_times = {"failing_since": "not failing"}
    # Few columns: a URL and a list of event types are long already (no filter sidebar;
    # the state column says which endpoints are disabled).
    list_display = ["id", "url", "event_types", "customer_id", "state"]
    search_fields = ["id", "url"]
    fields = [
        "id", "url", "event_types", "customer", "state", "disabled_reason", "failing_since",
        "attempts", "created_at", "operations", "recent_attempts",
    ]  # fmt: skip
    readonly_fields = fields

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if may(request, "manage_webhooks"):
            return fields
        # Their pages answer 403 to a role without manage_webhooks: not linked
        # (the browser walk, issue 41).
        return [name for name in fields if name != "operations"]

    @admin.display(description="events")
    def event_types(self, hook: Webhook) -> str:
        return "every type" if hook.events == ["*"] else ", ".join(hook.events)

    @admin.display(description="state", ordering="enabled")
    def state(self, hook: Webhook) -> str:
        if not hook.enabled:
            return "disabled"
        if hook.failing_since:
            return f"failing ({hook.attempts} attempts)"
        return "delivering"

    @admin.display(description="operations")
    def operations(self, hook: Webhook):
        return format_html(
            '<a class="button" href="{}">Rotate secret</a> '
            '<a class="button" href="{}">Enable</a> '
            '<a class="button" href="{}">Send again from an event</a> '
            '<a class="button" href="{}">Send a test event</a>',
            admin_url("events_webhook_rotate", hook.pk),
            admin_url("events_webhook_enable", hook.pk),
            admin_url("events_webhook_redeliver", hook.pk),
            admin_url("events_webhook_test", hook.pk),
        )

    @admin.display(description=f"last {ATTEMPTS_SHOWN} attempts")
    def recent_attempts(self, hook: Webhook):
        attempts = (
            DeliveryAttempt.objects.filter(webhook_id=hook.pk)
            .select_related("event")
            .order_by("-at", "-id")[:ATTEMPTS_SHOWN]
        )
        rows = format_html_join(
            "",
            '<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="svc-nowrap">{} ms</td>'
            "<td>{}</td></tr>",
            (
                (
                    f"{dates.precise(a.at)}",
                    a.event.event_id,
                    a.attempt,
                    "ok" if a.ok else (a.status_code or "failed"),
                    f"{a.latency_ms:,}",
                    (a.error or a.response_excerpt)[:120],
                )
                for a in attempts
            ),
        )
        return format_html(
            "<table><tr><th>at (UTC)</th><th>event</th><th>attempt</th><th>result</th>"
            "<th>latency</th><th>error or answer</th></tr>{}</table>",
            rows or mark_safe("<tr><td colspan=6>none yet</td></tr>"),  # noqa: S308 - a constant
        )

    def get_urls(self):
        views = (("rotate", self.rotate_view), ("enable", self.enable_view),
                 ("redeliver", self.redeliver_view), ("test", self.test_view))  # fmt: skip
        return [
            path(
                f"<path:object_id>/{name}/",
                self.admin_site.admin_view(view),
                name=f"events_webhook_{name}",
            )
            for name, view in views
        ] + super().get_urls()

    def _back(self, object_id: str) -> HttpResponseRedirect:
        return HttpResponseRedirect(admin_url("events_webhook_change", object_id))

    def rotate_view(self, request, object_id):
        require(request, "manage_webhooks")
        object_id = unquote(object_id)

        def perform(data):
            hook = services.webhook_rotate_secret(webhook_id=object_id)
            self._show_secret(request, hook, "New secret")
            return self._back(object_id)

        return service_form_view(
            self, request, form_class=forms.Form, title=f"Rotate the secret of {object_id}",
            perform=perform, submit_label="Rotate secret",
            intro="A new secret is made and shown once. For "
            f"{settings.SVC_WEBHOOK_SECRET_OVERLAP_HOURS:g} hours deliveries are signed with "
            "the old secret too, while the receiver moves to the new one.",
        )  # fmt: skip

    def enable_view(self, request, object_id):
        require(request, "manage_webhooks")
        object_id = unquote(object_id)

        def perform(data):
            services.webhook_enable(webhook_id=object_id)
            self.message_user(request, f"Webhook {object_id} enabled.", messages.SUCCESS)
            return self._back(object_id)

        return service_form_view(
            self, request, form_class=forms.Form, title=f"Enable {object_id}",
            perform=perform, submit_label="Enable",
            intro="Deliveries resume at the event the endpoint stopped at.",
        )  # fmt: skip

    def redeliver_view(self, request, object_id):
        require(request, "manage_webhooks")
        object_id = unquote(object_id)

        def perform(data):
            event_id = data["event_id"].strip()
            services.webhook_redeliver(webhook_id=object_id, event_id=event_id)
            self.message_user(
                request, f"Webhook {object_id} receives {event_id} and every later event again.",
                messages.SUCCESS,
            )  # fmt: skip
            return self._back(object_id)

        return service_form_view(
            self, request, form_class=RedeliverForm, title=f"Send events to {object_id} again",
            perform=perform, submit_label="Send again",
            intro="The endpoint receives this event, then every later one it takes, in order.",
        )  # fmt: skip

    def test_view(self, request, object_id):
        require(request, "manage_webhooks")
        object_id = unquote(object_id)

        def perform(data):
            hook = services.webhook_get(object_id)
            event, outcome = delivery.webhook_test_send(hook)
            level, text = test_result(hook, event, outcome)
            self.message_user(request, text, level)
            return self._back(object_id)

        return service_form_view(
            self, request, form_class=forms.Form, title=f"Send a test event to {object_id}",
            perform=perform, submit_label="Send a test event",
            intro="A signed event of type webhook.test is sent now, as the worker sends every "
            "event (signature, headers, time limit); the page then says what the endpoint "
            "answered. It is not written to the event log and not retried.",
        )  # fmt: skip

    def _show_secret(self, request, hook: Webhook, what: str) -> None:
        self.message_user(
            request,
            format_html(
                "{} of {}: <code>{}</code> — shown only now; the receiver verifies "
                "webhook-signature with it.",
                what,
                hook.pk,
                hook.secret,
            ),
            messages.WARNING,
        )

    def add_view(self, request, form_url="", extra_context=None):
        def perform(data):
            hook = services.webhook_create(
                url=data["url"],
                events=list(data["events"]),
                customer_id=data["customer_id"].strip() or None,
            )
            self._show_secret(request, hook, "Secret")
            return HttpResponseRedirect(admin_url("events_webhook_change", hook.pk))

        return service_form_view(
            self,
            request,
            form_class=WebhookCreateForm,
            title="Register webhook endpoint",
            perform=perform,
            submit_label="Register endpoint",
        )
