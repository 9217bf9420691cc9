"""The subcommands of ``svcctl``, one module per noun; ``ORDER`` is how
``svcctl --help`` lists them (online first, then offline)."""

from __future__ import annotations

from svcctl.commands import (
    addons,
    batches,
    billing,
    customers,
    demo,
    fleet,
    keys,
    licenses,
    minting,
    offline,
    payments,
    webhooks,
)
from svcctl.commands.base import Command

ORDER = (
    "customer",
    "invite",
    "portal-users",
    "withdraw-invitation",
    "customer-keys",
    "revoke-customer-key",
    "batch",
    "license",
    "revoke",
    "suspend",
    "reinstate",
    "release",
    "renew",
    "addon-add",
    "addon-remove",
    "addons",
    "convert-trial",
    "expiring",
    "fleet",
    "batch-status",
    "usage",
    "usage-conflicts",
    "offline-activate",
    "offline-usage",
    "invoice",
    "invoices",
    "invoice-show",
    "invoice-download",
    "credit-note",
    "payment-record",
    "payments",
    "payment-import",
    "catalogue",
    "webhooks",
    "events",
    "demo",
    "mint",
    "inspect",
    "keygen",
    "root-keygen",
    "certify",
    "register",
)
MODULES = (
    customers,
    batches,
    licenses,
    addons,
    fleet,
    billing,
    payments,
    offline,
    webhooks,
    demo,
    minting,
    keys,
)


def ordered() -> list[Command]:
    """Every command of every module, in :data:`ORDER`."""
    by_name = {command.name: command for module in MODULES for command in module.COMMANDS}
    assert sorted(by_name) == sorted(ORDER), "a command is missing from ORDER or a module"
    return [by_name[name] for name in ORDER]
