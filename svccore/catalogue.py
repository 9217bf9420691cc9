"""The catalogue as plain data: the seeded entries, tier arithmetic and the public shape
of an entry (contract §5). Free of Django so the offline tools (``svcctl mint``) share it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from devices import identity
from svccore import money

SEED_FILE = Path(__file__).with_name("catalogue.json")
KNOWN_MODULES = ("detect", "defect", "ppe", "anpr")
ENTRY_FIELDS = (
    "sku",
    "name",
    "modules",
    "max_streams",
    "max_fps",
    "api_calls",
    "term_days",
    "grace_days",
    "allowance_per_unit",
    "currency",
    "unit_price_tiers",
    "overage_tiers",
    "maintenance_rate",
)
# Fields added after contract §5, each with the value an entry without it means (a
# catalogue file or an API client written before them still loads as it did).
OPTIONAL_FIELDS: dict[str, Any] = {
    "max_offline_days": None,  # check-in lease in days (issue 42); None: no lease
    "trial_days": None,  # a trial SKU's days per camera (issue 42); None: not a trial SKU
    # How a unit's identity components must match (issue 45, devices.identity); "": most:2.
    "identity_policy": "",
}


def load_entries(path: Path | str = SEED_FILE) -> list[dict[str, Any]]:
    """Entries of a catalogue file (``{"skus": [...]}``), prices as Decimal."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle, parse_float=Decimal)
    entries = data["skus"] if isinstance(data, dict) else data
    return [normalise_entry(entry) for entry in entries]


ADDON_FIELDS = (
    "sku",
    "code",
    "name",
    "modules",
    "extra_streams",
    "extra_fps",
    "extra_api_calls",
    "unit_price",
)


def load_addons(path: Path | str = SEED_FILE) -> list[dict[str, Any]]:
    """The add-ons of a catalogue file (its ``addons``, issue 42: none in an older file),
    each naming its SKU, its price as Decimal."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle, parse_float=Decimal)
    addons = data.get("addons", []) if isinstance(data, dict) else []
    out = []
    for addon in addons:
        missing = [name for name in ADDON_FIELDS if name not in addon]
        if missing:
            raise ValueError(f"catalogue add-on {addon.get('code')!r} lacks {', '.join(missing)}")
        entry = {name: addon[name] for name in ADDON_FIELDS}
        entry["unit_price"] = _price(addon["unit_price"], addon["sku"], "add-on price")
        out.append(entry)
    return out


def _price(value: Any, sku: Any, what: str) -> Decimal:
    """A catalogue price as Decimal, refused when it has more decimals than prices are
    recorded with (``money.PRICE_PLACES``): a price is billed exactly as quoted."""
    price = Decimal(str(value))
    if not price.is_finite() or price < 0:
        raise ValueError(f"catalogue entry {sku!r}: {what} {value} is not a price")
    if -price.normalize().as_tuple().exponent > money.PRICE_PLACES:
        raise ValueError(
            f"catalogue entry {sku!r}: {what} {value} has more than {money.PRICE_PLACES} "
            "decimals; prices are recorded and billed exactly as quoted"
        )
    return price


def normalise_entry(entry: dict[str, Any]) -> dict[str, Any]:
    missing = [name for name in ENTRY_FIELDS if name not in entry]
    if missing:
        raise ValueError(f"catalogue entry {entry.get('sku')!r} lacks {', '.join(missing)}")
    out = {name: entry[name] for name in ENTRY_FIELDS}
    out |= {name: entry.get(name, default) for name, default in OPTIONAL_FIELDS.items()}
    lease = out["max_offline_days"]
    if lease is not None and (not isinstance(lease, int) or isinstance(lease, bool) or lease < 1):
        raise ValueError(
            f"catalogue entry {entry['sku']!r}: max_offline_days {lease!r} is not a whole "
            "number of days (1 or more), nor null"
        )
    trial_days = out["trial_days"]
    if trial_days is not None and (type(trial_days) is not int or trial_days < 1):
        raise ValueError(
            f"catalogue entry {entry['sku']!r}: trial_days {trial_days!r} is not a number of "
            "days (1 or more; null: not a trial SKU)"
        )
    policy = out["identity_policy"]
    if policy != "" and identity.policy_problem(policy):
        raise ValueError(
            f"catalogue entry {entry['sku']!r}: identity_policy {policy!r} "
            f"{identity.policy_problem(policy)} (or empty: most:2)"
        )
    currency = entry["currency"]
    if not (isinstance(currency, str) and len(currency) == 3 and currency.isalpha()):
        raise ValueError(f"catalogue entry {entry['sku']!r}: currency {currency!r} is no ISO code")
    if money.minor_units(currency) > money.AMOUNT_PLACES_MAX:
        raise ValueError(
            f"catalogue entry {entry['sku']!r}: {currency} has "
            f"{money.minor_units(currency)} decimals; amounts are kept to "
            f"{money.AMOUNT_PLACES_MAX}"
        )
    out["maintenance_rate"] = Decimal(str(entry["maintenance_rate"]))
    out["unit_price_tiers"] = sorted(
        (
            {
                "from_units": int(t["from_units"]),
                "unit_price": _price(t["unit_price"], entry["sku"], "unit price"),
            }
            for t in entry["unit_price_tiers"]
        ),
        key=lambda t: t["from_units"],
    )
    out["overage_tiers"] = sorted(
        (
            {
                "from_inferences": int(t["from_inferences"]),
                "price_per_1000": _price(t["price_per_1000"], entry["sku"], "price per 1000"),
            }
            for t in entry["overage_tiers"]
        ),
        key=lambda t: t["from_inferences"],
    )
    return out


def unit_price(tiers: list[dict[str, Any]], units: int) -> Decimal:
    """Volume pricing: every unit costs the price of the highest tier whose
    ``from_units`` <= units ordered."""
    eligible = [t for t in tiers if int(t["from_units"]) <= units]
    if not eligible:
        raise ValueError(f"no unit price tier covers {units} units")
    return Decimal(str(max(eligible, key=lambda t: int(t["from_units"]))["unit_price"]))


def entitlements(modules: list[str]) -> dict[str, bool]:
    """``ent`` claim: every known module, true for those the SKU switches on."""
    names = sorted(set(KNOWN_MODULES) | set(modules))
    return {name: name in modules for name in names}


def to_json(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry with Decimal prices as JSON-ready strings (for files, not the API)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(entry)
