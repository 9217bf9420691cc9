"""Licence claims: the one builder (:func:`build_claims`) behind the server's licences
and ``svcctl mint`` (:func:`mint_claims`, from a catalogue entry), and the bounds of
every number signed into one. Free of Django.
"""

from __future__ import annotations

import time
import unicodedata
from pathlib import Path
from typing import Any

from devices.bounds import LAST_SECOND  # noqa: F401 - re-exported: the licensing bound
from devices.token import DEFAULT_ISSUER  # noqa: F401 - re-exported for svcctl
from svccore import catalogue, ids
from svccore.timeunits import DAY

DEVICE_ID_MAX = 128
# Upper bounds of the numbers an operator may sign into a licence (the API and the admin
# refuse more, naming the bound): far beyond any real order or camera, and inside the
# 32- and 64-bit integers of the database and the firmware.
UNITS_MAX = 10_000_000  # seats of one batch (batch.units)
TERM_DAYS_MAX = 36_600  # about 100 years; 0 is perpetual
MAX_OFFLINE_DAYS_MAX = 3650  # the longest check-in lease (issue 42)
TRIAL_DAYS_MAX = 365  # the longest trial (issue 42); 0 on a batch of a trial SKU: sold
API_QUOTA_MAX = 10**12  # inferences a device may run (lim.api_calls); 0 is unmetered
MAX_STREAMS_MAX = 1024  # concurrent streams of one camera (lim.max_streams)
# Unicode categories a device id may not contain: control (Cc: NUL, ESC, line breaks)
# and format (Cf: the bidi overrides such as U+202E, zero-width characters, U+FEFF).
# A device id is shown to operators, logged and bound into licences; these characters
# would let it disguise itself as another.
DEVICE_ID_REFUSED_CATEGORIES = ("Cc", "Cf")


class ClaimsError(ValueError):
    """A licence that cannot be built as asked (unknown SKU, bad term, no device...)."""


def device_id_problem(device_id: str) -> str:
    """What is wrong with ``device_id`` ("" when nothing is): the one check of a device
    id wherever one enters (activation, licence issue, usage upload, offline mint).

    1 to :data:`DEVICE_ID_MAX` characters, none of them in
    :data:`DEVICE_ID_REFUSED_CATEGORIES`. The refused character is named by its code
    point, never echoed. ``str.isprintable`` (C speed) clears almost every id at once;
    only an id it refuses is looked at character by character."""
    if not 0 < len(device_id) <= DEVICE_ID_MAX:
        return f"must be 1-{DEVICE_ID_MAX} characters, not {len(device_id)}"
    return control_character_problem(device_id)


def control_character_problem(text: str) -> str:
    """ "" unless ``text`` holds a character of :data:`DEVICE_ID_REFUSED_CATEGORIES`
    (control or format: NUL, ESC, U+202E...), which is then named by its code point,
    never echoed: the rule for every text a device reports (device id, fingerprint
    source, SDK version), and for a webhook URL (events.urlcheck)."""
    if not text.isprintable():
        for position, char in enumerate(text):
            if unicodedata.category(char) in DEVICE_ID_REFUSED_CATEGORIES:
                return (
                    f"must not contain control or format characters; it has "
                    f"U+{ord(char):04X} at position {position}"
                )
    return ""


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


def build_claims(
    *,
    license_id: str,
    sku: str,
    customer_id: str,
    issuer: str,
    device_id: str,
    activation: str,
    issued_at: int,
    expires_at: int,
    entitlements: dict[str, bool],
    max_streams: int,
    max_fps: int,
    api_calls: int,
    grace_days: int,
    batch: dict[str, Any] | None = None,
    trial: bool = False,
) -> dict[str, Any]:
    """The claims of a licence (spec §2.1): the one place they are put together, for the
    server's batch keys, direct and unit licences and for ``svcctl mint``. Times are Unix
    seconds; ``expires_at`` 0 is perpetual, and ``nbf`` is the issue time. ``batch``
    (``{"id", "units"}``) marks a batch key; ``trial`` a unit licence of a trial batch
    (``"trial": true``, an additive claim a device needs no rule for: the term is in
    ``exp``). The signer adds ``kid``."""
    claims: dict[str, Any] = {
        "lic": license_id,
        "sku": sku,
        "sub": customer_id,
        "iss": issuer,
        "dev": device_id,
        "ent": entitlements,
        "lim": {"max_streams": max_streams, "max_fps": max_fps, "api_calls": api_calls},
        "iat": issued_at,
        "nbf": issued_at,
        "exp": expires_at,
        "grace_days": grace_days,
        "act": activation,
    }
    if batch is not None:
        claims["batch"] = batch
    if trial:
        claims["trial"] = True
    return claims


# The numbers an operator may choose for a licence, with their bounds: one table for the
# API, manage.py mint and svcctl mint.
BOUNDS = {
    "units": (1, UNITS_MAX),
    "term_days": (0, TERM_DAYS_MAX),
    "api_quota": (0, API_QUOTA_MAX),
    "max_streams": (1, MAX_STREAMS_MAX),
    "max_offline_days": (1, MAX_OFFLINE_DAYS_MAX),
    "trial_days": (0, TRIAL_DAYS_MAX),
}


def bound_problem(rule: str, value: int | None, *, name: str | None = None) -> str:
    """Why ``value`` is outside the bounds of ``rule`` (:data:`BOUNDS`), naming them as
    ``name`` (default: the rule), or "" when it is inside or not given (None)."""
    low, high = BOUNDS[rule]
    if value is None or low <= value <= high:
        return ""
    return f"{name or rule} must be {low}-{high:,}, not {value:,}"


def claims_from_entry(
    *,
    entry: dict[str, Any],
    license_id: str,
    customer_id: str,
    issuer: str,
    device_id: str,
    activation: str,
    issued_at: int,
    expires_at: int,
    max_streams: int | None = None,
    api_quota: int | None = None,
    batch: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The claims of a licence sold from catalogue ``entry`` (contract §5): its
    entitlements, caps and grace, with the operator's ``max_streams`` and ``api_quota``
    when given (checked against :data:`BOUNDS` by the caller). The one translation of a
    catalogue entry into claims: batch keys and direct licences on the server, and
    ``mint`` offline."""
    return build_claims(
        license_id=license_id,
        sku=entry["sku"],
        customer_id=customer_id,
        issuer=issuer,
        device_id=device_id,
        activation=activation,
        issued_at=issued_at,
        expires_at=expires_at,
        entitlements=catalogue.entitlements(entry["modules"]),
        max_streams=entry["max_streams"] if max_streams is None else max_streams,
        max_fps=entry["max_fps"],
        api_calls=entry["api_calls"] if api_quota is None else api_quota,
        grace_days=entry["grace_days"],
        batch=batch,
    )


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

    The signer adds ``kid`` (``svccore.authority.encode_token``)."""
    if not device_id or device_id == "*" or len(device_id) > DEVICE_ID_MAX:
        raise ClaimsError(
            "an air-gapped licence must be bound to one device: give its fingerprint "
            f"(1-{DEVICE_ID_MAX} characters, not '*')"
        )
    problem = device_id_problem(device_id)
    if problem:
        raise ClaimsError(f"the device id {problem}")
    term = entry["term_days"] if days is None else days
    for rule, value, name in (
        ("term_days", term, "days"),
        ("api_quota", api_quota, "quota"),
        ("max_streams", max_streams, "streams"),
    ):
        problem = bound_problem(rule, value, name=name)
        if problem:
            raise ClaimsError(problem)
    issued = int(time.time()) if now is None else now
    return claims_from_entry(
        entry=entry,
        license_id=ids.license_id(),
        customer_id=ids.chosen_customer_id(customer),
        issuer=issuer,
        device_id=device_id,
        activation="optional",
        issued_at=issued,
        expires_at=0 if term == 0 else issued + term * DAY,
        max_streams=max_streams,
        api_quota=api_quota,
    )
