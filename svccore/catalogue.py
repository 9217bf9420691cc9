"""The catalogue as plain data: the seeded entries, tier arithmetic and the public shape
of an entry (contract §5). Free of Django so the offline tools (``svcctl mint``) share it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

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


def load_entries(path: Path | str = SEED_FILE) -> list[dict[str, Any]]:
    """Entries of a catalogue file (``{"skus": [...]}``), prices as Decimal."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle, parse_float=Decimal)
    entries = data["skus"] if isinstance(data, dict) else data
    return [normalise_entry(entry) for entry in entries]


def normalise_entry(entry: dict[str, Any]) -> dict[str, Any]:
    missing = [name for name in ENTRY_FIELDS if name not in entry]
    if missing:
        raise ValueError(f"catalogue entry {entry.get('sku')!r} lacks {', '.join(missing)}")
    out = {name: entry[name] for name in ENTRY_FIELDS}
    out["maintenance_rate"] = Decimal(str(entry["maintenance_rate"]))
    out["unit_price_tiers"] = sorted(
        (
            {"from_units": int(t["from_units"]), "unit_price": Decimal(str(t["unit_price"]))}
            for t in entry["unit_price_tiers"]
        ),
        key=lambda t: t["from_units"],
    )
    out["overage_tiers"] = sorted(
        (
            {
                "from_inferences": int(t["from_inferences"]),
                "price_per_1000": Decimal(str(t["price_per_1000"])),
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
