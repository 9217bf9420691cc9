"""Identity components: the several hardware identities a unit licence is bound to as a
set (issue 45), beside the one device id the contract binds the token to.

A camera reads what its platform has (SoC serial, eMMC CID, board serial, primary MAC,
machine-id; firmware adds its own, such as a TPM endorsement key hash) and sends each
one hashed, never the raw value. The service keeps the set and a matching policy per
SKU or batch; the token carries both in the additive claim ``idn`` when the device
reported components, so the device checks offline that the hardware it runs on still
meets the policy: a repaired camera (one part swapped) keeps working, a copy of a
camera's state on other hardware does not.

The policy rule lives here once, imported by the service, so device and service never
disagree about what "meets" means.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .bounds import path_argument
from .errors import InvalidArgument

CLAIM = "idn"  # the token's additive claim: {"pol": policy, "cmp": {name: digest}}
MAX_COMPONENTS = 16
NAME = re.compile(r"\A[a-z][a-z0-9_]{0,31}\Z")
DIGEST = re.compile(r"\A[0-9a-f]{64}\Z")
# Copyable or spoofable: they count toward a match only beside a strong one, never alone.
WEAK = frozenset({"mac", "machine_id", "file"})
WEAK_PREFIX = "weak_"  # firmware marks its own weak component by name
DEFAULT_POLICY = "most:2"
POLICY = re.compile(r"\A(all|most(:[1-9][0-9]?)?|one:[a-z][a-z0-9_]{0,31})\Z")

DEVICETREE_SERIAL = "sys/firmware/devicetree/base/serial-number"
CPUINFO = "proc/cpuinfo"
EMMC_CID = "sys/block/mmcblk0/device/cid"
BOARD_SERIAL = "sys/class/dmi/id/board_serial"
MACHINE_ID = "etc/machine-id"

_CPU_SERIAL = re.compile(r"^Serial\s*:\s*([0-9A-Fa-f]+)\s*$", re.MULTILINE)


def is_weak(name: str) -> bool:
    return name in WEAK or name.startswith(WEAK_PREFIX)


def component_digest(name: str, value: str) -> str:
    """The hash a component travels as: SHA-256 of its name and normalised value, so
    the same serial read as two components never collides and no raw id leaves."""
    return hashlib.sha256(f"{name}\x00{value.strip().lower()}".encode()).hexdigest()


def read_components(
    root: str | os.PathLike = "/", extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``{name: digest}`` of every identity component this platform has, read under
    ``root``, plus firmware's own ``extra`` (raw values, hashed here; a name starting
    with ``weak_`` is weak). Absent or placeholder values are left out."""
    from .hardware import _first_mac, _read_identity  # one normalisation of raw ids

    base = path_argument(root, "root")
    raw: dict[str, str] = {}
    soc = _read_identity(base / DEVICETREE_SERIAL)
    if not soc:
        try:
            match = _CPU_SERIAL.search((base / CPUINFO).read_text(errors="replace"))
        except OSError:
            match = None
        soc = match.group(1).lower().lstrip("0") if match else ""
    for name, value in (
        ("soc_serial", soc),
        ("emmc_cid", _read_identity(base / EMMC_CID)),
        ("board_serial", _read_identity(base / BOARD_SERIAL)),
        ("machine_id", _read_identity(base / MACHINE_ID)),
        ("mac", _first_mac(base)),
    ):
        if value:
            raw[name] = value
    if extra is not None:
        if not isinstance(extra, Mapping):
            raise InvalidArgument(f"extra must be a mapping, not {type(extra).__name__}")
        for name, value in extra.items():
            if not isinstance(name, str) or not NAME.match(name) or not isinstance(value, str):
                raise InvalidArgument(f"extra component {name!r}: a lowercase name and text")
            if value.strip():
                raw[name] = value
    return {name: component_digest(name, value) for name, value in sorted(raw.items())}


def components_problem(components: Any) -> str:
    """What is wrong with a reported ``{name: digest}`` mapping ("" when nothing)."""
    if not isinstance(components, dict):
        return "must be an object of component names to SHA-256 hex digests"
    if len(components) > MAX_COMPONENTS:
        return f"has more than {MAX_COMPONENTS} components"
    for name, digest in components.items():
        if not isinstance(name, str) or not NAME.match(name):
            return f"has a component name that is not lowercase a-z, 0-9, _: {name!r:.40}"
        if not isinstance(digest, str) or not DIGEST.match(digest):
            return f"component {name}: not a lowercase SHA-256 hex digest"
    return ""


def policy_problem(policy: Any) -> str:
    if not isinstance(policy, str) or not POLICY.match(policy):
        return "must be all, most, most:N (N of the strong components) or one:NAME"
    if policy.startswith("one:") and is_weak(policy[4:]):
        return f"one:{policy[4:]} names a weak component, which never counts alone"
    return ""


@dataclass(frozen=True)
class Match:
    """How a presented set compares with the bound one (Sentinel's mismatched items)."""

    meets: bool
    matched: tuple[str, ...]
    changed: tuple[str, ...]  # in both, different digests
    missing: tuple[str, ...]  # bound, not presented
    added: tuple[str, ...]  # presented, not bound

    @property
    def strong(self) -> bool:
        return any(not is_weak(name) for name in self.matched)


def compare(bound: Mapping[str, str], presented: Mapping[str, str], policy: str) -> Match:
    """Whether ``presented`` meets ``policy`` against ``bound``.

    ``all``: every bound component presented unchanged. ``most:N`` (``most``: N = 2):
    at least N strong components match, or every strong bound one when fewer than N
    were bound. ``one:NAME``: that (strong) component matches. Whatever the policy, a
    match needs at least one strong component: weak ones (MAC, files) never count alone,
    so a set of only weak components can never be matched by anything but itself."""
    matched = tuple(sorted(n for n in bound if presented.get(n) == bound[n]))
    changed = tuple(sorted(n for n in bound if n in presented and presented[n] != bound[n]))
    missing = tuple(sorted(n for n in bound if n not in presented))
    added = tuple(sorted(n for n in presented if n not in bound))
    strong_bound = [n for n in bound if not is_weak(n)]
    strong_matched = [n for n in matched if not is_weak(n)]
    if policy == "all":
        meets = not changed and not missing
    elif policy.startswith("one:"):
        meets = policy[4:] in strong_matched
    else:
        wanted = int(policy[5:]) if policy.startswith("most:") else 2
        meets = len(strong_matched) >= min(wanted, len(strong_bound))
    meets = meets and bool(strong_matched)
    return Match(meets, matched, changed, missing, added)


def claim(components: Mapping[str, str], policy: str) -> dict[str, Any]:
    return {"pol": policy, "cmp": dict(sorted(components.items()))}


def claim_problem(value: Any) -> str:
    """What makes a token's ``idn`` claim unusable ("" when nothing): a device refuses
    such a token rather than guess."""
    if not isinstance(value, dict):
        return "not an object"
    return policy_problem(value.get("pol")) or components_problem(value.get("cmp"))


def offline_check(claims: Mapping[str, Any], device_id: str, components: Any) -> str:
    """Why this device may not run ``claims`` ("" when it may). Without the ``idn``
    claim (old licences) or without components of its own (an explicit device id), the
    token's ``dev`` decides, as before. With both: the local set must meet the bound one
    under its policy; a changed device id is then a repair the next sync or activation
    rebinds. A bound set with no strong component adds nothing to the device id."""
    bound = claims.get(CLAIM)
    same = claims["dev"] == device_id
    if bound is None or components is None:
        return "" if same else "bound to another device"
    problem = claim_problem(bound)
    if problem:
        return f"its identity claim is unusable ({problem})"
    if not any(not is_weak(name) for name in bound["cmp"]):
        return "" if same else "bound to another device"
    result = compare(bound["cmp"], components, bound["pol"])
    if result.meets:
        return ""
    return (
        f"bound to other hardware (policy {bound['pol']}; changed: "
        f"{', '.join(result.changed) or 'none'}, missing: {', '.join(result.missing) or 'none'})"
    )
