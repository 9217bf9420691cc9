"""Claims of an air-gapped licence, built from a catalogue entry: the one builder behind
``svcctl mint`` (and, once the server shares it, ``manage.py mint``). Free of Django.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from svccore import catalogue, ids

DAY = 86400
DEFAULT_ISSUER = "svc-licensing"
DEVICE_ID_MAX = 128


class ClaimsError(ValueError):
    """A licence that cannot be built as asked (unknown SKU, bad term, no device...)."""


def catalogue_entry(sku: str, catalogue_file: Path | str | None = None) -> dict[str, Any]:
    """The entry of ``sku`` in a catalogue file (default: the seeded catalogue)."""
    path = catalogue_file or catalogue.SEED_FILE
    try:
        entries = catalogue.load_entries(path)
    except FileNotFoundError:
        raise ClaimsError(f"catalogue file {path} does not exist") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ClaimsError(f"catalogue file {path} is not a catalogue: {exc}") from None
    for entry in entries:
        if entry["sku"] == sku:
            return entry
    known = ", ".join(e["sku"] for e in entries)
    raise ClaimsError(f"unknown SKU {sku!r}; the catalogue {path} has {known}")


def customer_id(value: str) -> str:
    """A customer id as given on a command line: upper case, ``CUST-`` prefix added."""
    chosen = value.strip().upper()
    return chosen if chosen.startswith("CUST-") else f"CUST-{chosen}"


def mint_claims(
    *,
    entry: dict[str, Any],
    customer: str,
    device_id: str,
    days: int | None = None,
    issuer: str = DEFAULT_ISSUER,
    max_streams: int | None = None,
    api_quota: int | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    """Claims of an air-gapped licence: bound to ``device_id``, ``act`` = ``optional``,
    entitlements and caps from the catalogue ``entry``; ``days`` 0 is perpetual.

    The signer adds ``kid`` (``devices.token.encode_token``)."""
    if not device_id or device_id == "*" or len(device_id) > DEVICE_ID_MAX:
        raise ClaimsError(
            "an air-gapped licence must be bound to one device: give its fingerprint "
            f"(1-{DEVICE_ID_MAX} characters, not '*')"
        )
    term = entry["term_days"] if days is None else days
    for name, value in (("days", term), ("quota", api_quota), ("streams", max_streams)):
        if value is not None and value < (1 if name == "streams" else 0):
            raise ClaimsError(f"{name} must be >= {1 if name == 'streams' else 0}, not {value}")
    issued = int(time.time()) if now is None else now
    return {
        "lic": ids.license_id(),
        "sku": entry["sku"],
        "sub": customer_id(customer),
        "iss": issuer,
        "dev": device_id,
        "ent": catalogue.entitlements(entry["modules"]),
        "lim": {
            "max_streams": entry["max_streams"] if max_streams is None else max_streams,
            "max_fps": entry["max_fps"],
            "api_calls": entry["api_calls"] if api_quota is None else api_quota,
        },
        "iat": issued,
        "nbf": issued,
        "exp": 0 if term == 0 else issued + term * DAY,
        "grace_days": entry["grace_days"],
        "act": "optional",
    }
