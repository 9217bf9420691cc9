"""Writes of the customer portal, each audited: invitations (made, accepted), customer
API keys (created, revoked), renewal requests (made, approved, declined), a trial batch
bought (converted to paid) and a customer's own webhook endpoints."""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
import smtplib

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction

from audit.context import current_actor, invited_actor
from audit.models import AuditEntry
from audit.services import audit_record, audit_refusal, audited
from config import clock
from config.errors import Conflict, InvalidInput, MailUnavailable, NotFound
from customers.models import Customer
from customers.services import customer_get
from events import delivery
from events import services as events_services
from events.delivery import Outcome
from events.models import Event, Webhook
from licensing.models import Batch, License
from licensing.services import renewals, trials
from portal.models import CustomerApiKey, CustomerUser, Invitation, RenewalRequest
from portal.selectors import KEY_SCHEME, customer_key_digest, invitation_digest
from svccore import dates
from svccore.claims import TERM_DAYS_MAX
from svccore.ids import random_id

log = logging.getLogger(__name__)

INVITATION_DAYS = 7
# What a customer's own endpoint may ask for: its licences, batches, usage and
# documents; never the operators' events (signing keys, tokens, webhooks).
CUSTOMER_EVENTS = [
    Event.Type.LICENSE_ACTIVATED,
    Event.Type.LICENSE_REVOKED,
    Event.Type.LICENSE_RENEWED,
    Event.Type.LICENSE_EXPIRING,
    Event.Type.LICENSE_GRACE_STARTED,
    Event.Type.LICENSE_LEASE_EXPIRING,
    Event.Type.LICENSE_LEASE_EXPIRED,
    Event.Type.LICENSE_SUSPENDED,
    Event.Type.LICENSE_REINSTATED,
    Event.Type.LICENSE_ADDON_ADDED,
    Event.Type.LICENSE_ADDON_REMOVED,
    Event.Type.LICENSE_TRIAL_EXPIRING,
    Event.Type.LICENSE_TRIAL_CONVERTED,
    Event.Type.BATCH_THRESHOLD,
    Event.Type.SEAT_RELEASED,
    Event.Type.USAGE_QUOTA_THRESHOLD,
    Event.Type.USAGE_CONFLICT,
    Event.Type.INVOICE_ISSUED,
    Event.Type.CREDIT_NOTE_ISSUED,
    Event.Type.INVOICE_PAID,
    Event.Type.INVOICE_OVERDUE,
]


# What an invitation is sent to: an ASCII address (no quoting, no IDN), as e-mail
# servers take it everywhere.
EMAIL = re.compile(
    r"\A[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+\Z"
)


def _email(value: str) -> str:
    address = (value or "").strip()
    if len(address) > 254 or not EMAIL.match(address):
        raise InvalidInput(f"email: {address[:80]!r} is not an e-mail address")
    local, _, domain = address.rpartition("@")
    return local + "@" + domain.lower()


def inviter(invited_by: str = "") -> str:
    """Who an invitation e-mail says invited the reader: the person acting (a console
    user's full name, else their username), or, when no person is known (an operator
    API key), "An operator (key NAME)" -- never a key's bare name read as a person's
    ("bootstrap invited you", issue 41)."""
    actor = current_actor()
    if actor.kind == "api_key":
        return f"An operator (key {actor.name})"
    if actor.kind in ("staff", "superuser", "customer"):
        user = get_user_model().objects.filter(username=actor.name).first()
        if user is not None:
            return user.get_full_name().strip() or user.get_username()
    return invited_by or "An operator"


@audited(
    "customer_user.invite",
    target=lambda result, arguments: arguments["customer_id"],
    detail=lambda result, arguments: {"email": arguments["email"], "invitation": result[0].pk},
)
def invitation_create(
    *, customer_id: str, email: str, name: str = "", invited_by: str = "", link_base: str
) -> tuple[Invitation, str]:
    """Invite ``email`` to ``customer_id``'s portal: an invitation valid for
    INVITATION_DAYS, and an e-mail (Django's e-mail backend) with its one-time link
    ``link_base`` + the secret. Returns the invitation and the link (shown to the
    operator only where the e-mail cannot go out). Refused: an address that already has
    an account (409)."""
    customer = customer_get(customer_id=customer_id)
    email = _email(email)
    if get_user_model().objects.filter(username__iexact=email).exists():
        raise Conflict(f"{email} already has an account; one address, one account")
    secret = secrets.token_urlsafe(32)
    now = clock.now()
    # The e-mail goes out inside the transaction: an invitation nobody could be told of
    # is rolled back, and the operator is answered 503 to try again.
    with transaction.atomic():
        invitation = Invitation.objects.create(
            customer=customer,
            email=email,
            name=name.strip()[:200],
            digest=invitation_digest(secret),
            created_at=now,
            expires_at=now + dt.timedelta(days=INVITATION_DAYS),
            invited_by=invited_by[:150],
        )
        link = f"{link_base.rstrip('/')}/{secret}/"
        greeting = f"Hello {invitation.name}," if invitation.name else "Hello,"
        try:
            send_mail(
                subject=f"Your access to {customer.name}'s licences",
                message=(
                    f"{greeting}\n\n{inviter(invited_by)} invited you to the "
                    f"licensing portal of {customer.name}: its cameras, seats, usage and "
                    "invoices.\n\nSet your password here (the link works once, until "
                    f"{dates.moment(invitation.expires_at)}):\n{link}\n\n"
                    "If you did not expect this, ignore this message.\n"
                ),
                from_email=settings.DEFAULT_FROM_EMAIL,
                recipient_list=[email],
            )
        except (OSError, smtplib.SMTPException, ValueError) as exc:
            log.error("invitation e-mail to %s not sent: %s", email, type(exc).__name__)
            raise MailUnavailable(
                f"the invitation e-mail to {email} could not be sent ({type(exc).__name__}); "
                "nothing was created: check SVC_EMAIL_URL and try again"
            ) from None
    return invitation, link


# What every link that opens nothing answers: unknown, used, expired and withdrawn alike.
INVITATION_NOT_VALID = (
    "this invitation link is not valid: it was used, it expired, or it was "
    "mistyped; ask your operator for a new one"
)


def invitation_open(secret: str) -> Invitation:
    """The pending invitation ``secret`` belongs to; NotFound for anything else (an
    unknown, used, expired or withdrawn link all read the same to whoever holds it)."""
    invitation = (
        Invitation.objects.select_related("customer")
        .filter(
            digest=invitation_digest(secret or ""),
            accepted_at__isnull=True,
            withdrawn_at__isnull=True,
        )
        .first()
    )
    if invitation is None or invitation.expires_at <= clock.now():
        raise NotFound(INVITATION_NOT_VALID)
    return invitation


@audited(
    "customer_user.accept",
    target=lambda result, arguments: result.user.get_username() if result else "",
    detail=lambda result, arguments: {"customer_id": result.customer_id},
    actor=lambda result, arguments: invited_actor(result),
)
def invitation_accept(*, secret: str, password: str) -> CustomerUser:
    """Accept an invitation: its account, with ``password`` (Django's password
    validators). The link works once: a second use is NotFound."""
    with transaction.atomic():
        invitation = invitation_open(secret)
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.accepted_at is not None or invitation.withdrawn_at is not None:
            raise NotFound(INVITATION_NOT_VALID)
        user_model = get_user_model()
        user = user_model(username=invitation.email, email=invitation.email)
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise InvalidInput("password: " + " ".join(exc.messages)) from None
        user.set_password(password)
        try:
            with transaction.atomic():
                user.save()
        except IntegrityError:
            raise Conflict(f"{invitation.email} already has an account") from None
        account = CustomerUser.objects.create(
            user=user,
            customer_id=invitation.customer_id,
            name=invitation.name,
            invited_by=invitation.invited_by,
        )
        invitation.accepted_at = clock.now()
        invitation.account = account
        invitation.save(update_fields=["accepted_at", "account"])
    return account


@audited(
    "customer_user.withdraw_invitation",
    target=lambda result, arguments: result.customer_id if result else "",
    detail=lambda result, arguments: {"email": result.email, "invitation": result.pk},
)
def invitation_withdraw(*, invitation_id: int | str, withdrawn_by: str = "") -> Invitation:
    """Withdraw a pending (or expired) invitation: its link then answers as an unknown
    one and can never be accepted. Withdrawing one twice changes nothing; an accepted
    one is a Conflict (409): deactivate the portal user instead."""
    invitation_id = str(invitation_id)
    if not (invitation_id.isascii() and invitation_id.isdigit()) or len(invitation_id) > 18:
        raise NotFound(f"no invitation {invitation_id[:64]!r}")
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().filter(pk=int(invitation_id)).first()
        if invitation is None:
            raise NotFound(f"no invitation {invitation_id}")
        if invitation.accepted_at is not None:
            raise Conflict(
                f"invitation {invitation.pk} to {invitation.email} was already accepted "
                f"({dates.moment(invitation.accepted_at)}); it cannot be withdrawn: "
                "deactivate the portal user instead"
            )
        if invitation.withdrawn_at is None:
            invitation.withdrawn_at = clock.now()
            invitation.withdrawn_by = withdrawn_by[:150]
            invitation.save(update_fields=["withdrawn_at", "withdrawn_by"])
    return invitation


# --- deactivating a portal user: its keys die with it ---------------------------------


def owner_keys_revoke(account: CustomerUser, *, why: str) -> list[CustomerApiKey]:
    """Revoke every active key ``account`` owns, each with an audit entry, inside the
    caller's transaction (a deactivation that rolls back revokes nothing)."""
    now = clock.now()
    with transaction.atomic():
        keys = list(
            CustomerApiKey.objects.select_for_update()
            .filter(owner=account, revoked_at__isnull=True)
            .order_by("id")
        )
        for key in keys:
            key.revoked_at = now
            key.save(update_fields=["revoked_at"])
            audit_record(
                action="customer_key.revoke",
                result=AuditEntry.Result.OK,
                target=key.prefix,
                detail=_key_detail(key) | {"why": why},
            )
    return keys


def deactivation_record(account: CustomerUser, *, why: str) -> list[CustomerApiKey]:
    """What deactivating ``account``'s user does besides clearing ``is_active``: its keys
    revoked and the deactivation audited, in the caller's transaction. Called from the
    user's save (portal.signals), so every way of deactivating a user does it."""
    with transaction.atomic():
        keys = owner_keys_revoke(account, why=why)
        audit_record(
            action="customer_user.deactivate",
            result=AuditEntry.Result.OK,
            target=account.user.get_username(),
            detail={"customer_id": account.customer_id, "keys_revoked": [k.prefix for k in keys]},
        )
    return keys


def customer_user_deactivate(*, username: str) -> CustomerUser:
    """Deactivate a portal user: they can no longer log in, and every API key they own
    is revoked at once (same transaction), each audited. Deactivating an inactive user
    changes nothing. An unknown name, or a name that is not a portal user: NotFound."""
    with transaction.atomic():
        account = (
            CustomerUser.objects.select_related("user", "customer")
            .select_for_update(of=("self",))
            .filter(user__username=username)
            .first()
        )
        if account is None:
            raise NotFound(f"no portal user {username[:150]!r}")
        if account.user.is_active:
            account.user.is_active = False
            account.user.save(update_fields=["is_active"])  # portal.signals revokes
    return account


# --- customer API keys ----------------------------------------------------------------


def _key_detail(key: CustomerApiKey) -> dict:
    owner = key.owner.user.get_username() if key.owner_id and key.owner else ""
    return {"name": key.name, "customer_id": key.customer_id, "owner": owner}


@audited(
    "customer_key.create",
    target=lambda result, arguments: arguments["customer_id"],
    detail=lambda result, arguments: {"name": arguments["name"], "prefix": result[0].prefix},
)
def customer_key_create(
    *,
    customer_id: str,
    name: str,
    created_by: str,
    owner: CustomerUser | None = None,
    write: bool = False,
) -> tuple[CustomerApiKey, str]:
    """An API key of ``customer_id`` (read-only; ``write``: it may also upload
    air-gapped cameras' files, issue 44), owned by the portal user ``owner`` (it
    dies with them); returns the row and the key, which is stored nowhere and cannot be
    shown again."""
    if owner is not None and owner.customer_id != customer_id:
        raise InvalidInput("owner: a portal user of another customer")
    name = (name or "").strip()
    if not 1 <= len(name) <= 100:
        raise InvalidInput("name: 1-100 characters")
    prefix = secrets.token_hex(6)
    key = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
    try:
        with transaction.atomic():
            row = CustomerApiKey.objects.create(
                customer_id=customer_id,
                name=name,
                prefix=prefix,
                digest=customer_key_digest(key),
                created_by=created_by[:150],
                owner=owner,
                write=write,
            )
    except IntegrityError:
        raise Conflict(
            f"a key named {name!r} already exists; revoke it or pick another name"
        ) from None
    return row, key


@audited(
    "customer_key.revoke",
    target=lambda result, arguments: arguments["prefix"],
    detail=lambda result, arguments: _key_detail(result),
)
@transaction.atomic
def customer_key_revoke(*, prefix: str, customer_id: str | None = None) -> CustomerApiKey:
    """Revoke a customer key at once: one of ``customer_id``'s (the portal: another
    customer's is NotFound), or any (an operator: ``customer_id`` None). Revoking a
    revoked key changes nothing."""
    rows = CustomerApiKey.objects.select_for_update(of=("self",)).select_related("owner__user")
    if customer_id is not None:
        rows = rows.filter(customer_id=customer_id)
    row = rows.filter(prefix=prefix).first()
    if row is None:
        raise NotFound(f"no API key {prefix[:64]}")
    if row.revoked_at is None:
        row.revoked_at = clock.now()
        row.save(update_fields=["revoked_at"])
    return row


# --- renewal requests -----------------------------------------------------------------


def _owned_target(customer: Customer, target: str) -> tuple[str, str]:
    """(batch_id, license_id) of ``target`` if it is the customer's: a batch, or a
    licence not part of one; anything else (another customer's included) NotFound."""
    target = (target or "").strip()
    batch = Batch.objects.filter(pk=target, customer=customer).only("id", "trial_days").first()
    if batch is not None:
        if batch.is_trial:
            raise InvalidInput(
                f"batch {target} is a trial: it is not renewed but bought (Buy on its page), "
                "which makes its cameras paid licences"
            )
        return target, ""
    lic = License.objects.filter(pk=target, customer=customer).only("id", "batch_id").first()
    if lic is not None:
        if lic.batch_id:  # a unit renews with its batch
            return _owned_target(customer, lic.batch_id)
        return "", lic.id
    raise NotFound(f"you have no batch or licence {target[:64]!r}")


@audited("renewal_request.create", target=lambda result, arguments: result.id if result else "")
@transaction.atomic
def renewal_request_create(
    *, customer_id: str, target: str, term_days: int | None, note: str, requested_by: str
) -> RenewalRequest:
    """Ask the operators to renew a batch or licence of the customer's. Nothing is
    renewed or billed until one approves; a second pending request for the same target
    is refused (409) naming the first."""
    customer = customer_get(customer_id=customer_id)
    batch_id, license_id = _owned_target(customer, target)
    if term_days is not None and not 1 <= term_days <= TERM_DAYS_MAX:
        raise InvalidInput(f"term_days: 1..{TERM_DAYS_MAX}, not {term_days}")
    pending = RenewalRequest.objects.filter(
        customer=customer,
        batch_id=batch_id,
        license_id=license_id,
        state=RenewalRequest.State.PENDING,
    ).first()
    if pending is not None:
        raise Conflict(f"renewal request {pending.id} for this is already waiting for approval")
    return RenewalRequest.objects.create(
        id=f"RR-{random_id()}",
        customer=customer,
        batch_id=batch_id,
        license_id=license_id,
        term_days=term_days,
        note=(note or "").strip()[:500],
        requested_by=requested_by[:150],
    )


def _pending(request_id: str) -> RenewalRequest:
    request = RenewalRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None:
        raise NotFound(f"no renewal request {request_id}")
    if request.state != RenewalRequest.State.PENDING:
        raise Conflict(f"renewal request {request_id} was already {request.state}")
    return request


@audited("renewal_request.approve", target=lambda result, arguments: arguments["request_id"])
def renewal_request_approve(*, request_id: str, decided_by: str) -> RenewalRequest:
    """Approve: the renewal runs (idempotent on the request id, so a retry renews
    once) and is billed as any operator's renewal."""
    with transaction.atomic():
        request = _pending(request_id)
        result = renewals.license_renew(
            idempotency_key=f"portal-{request.id}",
            batch_id=request.batch_id or None,
            license_id=request.license_id or None,
            term_days=request.term_days,
        )
        request.state = RenewalRequest.State.APPROVED
        request.decided_at = clock.now()
        request.decided_by = decided_by[:150]
        request.new_expires_at = result.renewal.expires_at
        request.save()
    return request


@audited("renewal_request.decline", target=lambda result, arguments: arguments["request_id"])
@transaction.atomic
def renewal_request_decline(*, request_id: str, decided_by: str, note: str = "") -> RenewalRequest:
    request = _pending(request_id)
    request.state = RenewalRequest.State.DECLINED
    request.decided_at = clock.now()
    request.decided_by = decided_by[:150]
    request.decision_note = (note or "").strip()[:500]
    request.save()
    return request


# --- buying a trial batch --------------------------------------------------------------


class QuoteChanged(Conflict):
    """The purchase would not be what the customer confirmed (a camera was activated or
    revoked meanwhile): nothing is bought; the page shows the new amount."""


def trial_buy(*, customer_id: str, batch_id: str, units_confirmed: int) -> trials.ConversionResult:
    """The customer buys its trial batch (issue 42): converted to paid at once, as an
    operator's conversion is, and billed once on its next invoice, audited with the portal
    user as the actor (``batch.convert_trial``). ``units_confirmed`` is the number of
    cameras on trial the customer saw priced: checked under the batch's lock, so what is
    billed is what was confirmed (QuoteChanged otherwise). Another customer's batch is
    NotFound, as if it did not exist; a batch bought before answers that purchase."""
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update()
            .filter(pk=batch_id, customer_id=customer_id)
            .only("id", "trial_days")
            .first()
        )
        if batch is None:
            raise NotFound(f"you have no batch {batch_id[:64]}")
        if batch.is_trial:
            units = trials.units_on_trial(batch)
            if units != units_confirmed:
                raise QuoteChanged(
                    f"batch {batch_id} has {units} cameras on trial now, not the "
                    f"{units_confirmed} you confirmed: nothing was bought; check the amount "
                    "again"
                )
        return trials.trial_convert(batch_id=batch.id)


# --- a customer's own webhooks --------------------------------------------------------


def customer_webhook_create(*, customer_id: str, url: str, events: list[str]) -> Webhook:
    """An endpoint for the customer's own events (CUSTOMER_EVENTS only)."""
    allowed = set(CUSTOMER_EVENTS)
    unknown = [e for e in events if e not in allowed]
    if unknown or not events:
        raise InvalidInput(
            f"events: choose among {', '.join(CUSTOMER_EVENTS)}"
            + (f"; not {', '.join(unknown)}" if unknown else "")
        )
    return events_services.webhook_create(url=url, events=events, customer_id=customer_id)


def customer_webhook(*, customer_id: str, webhook_id: str) -> Webhook:
    hook = Webhook.objects.filter(pk=webhook_id, customer_id=customer_id).first()
    if hook is None:
        # Another customer's webhook (or none): a refusal on the record, same answer.
        audit_refusal(
            action="portal.webhook_refused",
            status=404,
            target=f"webhook {webhook_id[:64]}",
            detail={"customer_id": customer_id},
            message="a webhook not of this customer",
        )
        raise NotFound(f"you have no webhook {webhook_id[:64]}")
    return hook


def customer_webhook_delete(*, customer_id: str, webhook_id: str) -> None:
    customer_webhook(customer_id=customer_id, webhook_id=webhook_id)
    events_services.webhook_delete(webhook_id=webhook_id)


def customer_webhook_rotate(*, customer_id: str, webhook_id: str) -> Webhook:
    customer_webhook(customer_id=customer_id, webhook_id=webhook_id)
    return events_services.webhook_rotate_secret(webhook_id=webhook_id)


def customer_webhook_test(*, customer_id: str, webhook_id: str) -> tuple[Webhook, Event, Outcome]:
    """Send one of ``customer_id``'s endpoints a signed test event now, through the
    worker's own sending (:func:`events.delivery.webhook_test_send`)."""
    hook = customer_webhook(customer_id=customer_id, webhook_id=webhook_id)
    event, outcome = delivery.webhook_test_send(hook)
    return hook, event, outcome
