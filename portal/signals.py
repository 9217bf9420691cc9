"""Keys die with their owner, however the owner is deactivated: the console's action,
the admin API, ``portal.services.customer_user_deactivate``, Django's user form (the
*Active* box) or a user's deletion. Each saves (or deletes) the user, so the user's
own signals are where it is done, in the same transaction as the save.

A ``QuerySet.update`` sends no signal: for such a write (and for rows already in that
state) ``portal.selectors.customer_key_match`` refuses a key whose owner is inactive."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models.signals import post_save, pre_delete, pre_save

from portal.models import CustomerUser
from portal.services import deactivation_record, owner_keys_revoke


def _was_active(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    """Remember whether the user was active before this save (one read, only when
    is_active may change)."""
    if raw or instance.pk is None:
        return
    if update_fields is not None and "is_active" not in update_fields:
        return
    instance._svc_was_active = (
        sender.objects.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    )


def _deactivated(sender, instance, created=False, raw=False, **kwargs) -> None:
    was_active = instance.__dict__.pop("_svc_was_active", None)
    if raw or created or instance.is_active or not was_active:
        return
    account = CustomerUser.objects.select_related("user").filter(user=instance).first()
    if account is not None:
        deactivation_record(account, why="owner deactivated")


def _deleted(sender, instance, **kwargs) -> None:
    owner_keys_revoke(instance, why="owner deleted")


def connect() -> None:
    user_model = get_user_model()
    pre_save.connect(_was_active, sender=user_model, dispatch_uid="portal-was-active")
    post_save.connect(_deactivated, sender=user_model, dispatch_uid="portal-deactivated")
    pre_delete.connect(_deleted, sender=CustomerUser, dispatch_uid="portal-owner-deleted")
