"""The device fingerprint: which hardware identity a unit licence is bound to.

Sources are tried in the order of the spec (§1, device fingerprint); the first that
yields a usable value wins. Paths are read under ``root`` so tests (and diagnostics of a
mounted image) can point it at a fake tree. Only the MAC address is spoofable enough to
be flagged weak.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .bounds import path_argument
from .errors import Code, InvalidArgument, LicenseError

ENV_VARIABLE = "SVC_DEVICE_ID"
DEVICETREE_SERIAL = "sys/firmware/devicetree/base/serial-number"
DMI_PRODUCT_UUID = "sys/class/dmi/id/product_uuid"
MACHINE_ID = "etc/machine-id"
NET_CLASS = "sys/class/net"
MAX_DEVICE_ID = 128  # the service refuses longer ids (spec §8)
IOREG_TIMEOUT_SECONDS = 5

SOURCES = ("env", "devicetree", "dmi", "machine-id", "macos", "mac")
# What activate() reports for a device id its caller gave: no fingerprint read.
EXPLICIT = "explicit"
# Every source an activation can report (the console filters on these).
REPORTED_SOURCES = (*SOURCES, EXPLICIT)

# Values firmware vendors leave in place of a real identity.
_PLACEHOLDER = re.compile(r"\A[0\-:]*\Z|\A[fF\-:]*\Z")
_MAC = re.compile(r"\A[0-9a-f]{2}(:[0-9a-f]{2}){5}\Z")
_IOREG_UUID = re.compile(r'"IOPlatformUUID"\s*=\s*"([0-9A-Fa-f-]+)"')


@dataclass(frozen=True)
class Fingerprint:
    value: str
    source: str
    weak: bool = False


def fingerprint(
    environ: Mapping[str, str] | None = None, root: str | os.PathLike = "/"
) -> Fingerprint:
    """The device fingerprint from the first available source, in spec order:
    ``SVC_DEVICE_ID``, devicetree serial, DMI product UUID, machine-id, macOS platform
    UUID, first non-loopback MAC (weak). InvalidArgument for an ``environ`` that is not
    a mapping of text or a ``root`` that is not a path."""
    if environ is not None and not isinstance(environ, Mapping):
        raise InvalidArgument(f"environ must be a mapping or None, not {type(environ).__name__}")
    env = os.environ if environ is None else environ
    base = path_argument(root, "root")
    override = env.get(ENV_VARIABLE, "")
    if not isinstance(override, str):
        raise InvalidArgument(f"{ENV_VARIABLE} must be text, not {type(override).__name__}")
    override = override.strip()
    if override:
        return Fingerprint(override, "env")
    for source, relative in (
        ("devicetree", DEVICETREE_SERIAL),
        ("dmi", DMI_PRODUCT_UUID),
        ("machine-id", MACHINE_ID),
    ):
        value = _read_identity(base / relative)
        if value:
            return Fingerprint(value, source)
    if sys.platform == "darwin":
        value = _macos_platform_uuid()
        if value:
            return Fingerprint(value, "macos")
    mac = _first_mac(base)
    if mac:
        return Fingerprint(mac, "mac", weak=True)
    raise LicenseError(
        "no device fingerprint source is available; set SVC_DEVICE_ID", code=Code.NO_FINGERPRINT
    )


def _normalise(raw: str) -> str:
    value = raw.replace("\x00", "").strip().lower()
    if not value or value == "uninitialized" or _PLACEHOLDER.match(value):
        return ""
    if len(value) > MAX_DEVICE_ID:
        value = hashlib.sha256(value.encode("utf-8")).hexdigest()
    return value


def _read_identity(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError:  # absent, or readable by root only (product_uuid)
        return ""
    return _normalise(raw.decode("utf-8", errors="replace"))


def _macos_platform_uuid() -> str:
    import subprocess  # only on a macOS workstation: `import devices` stays light

    try:
        out = subprocess.run(
            ["ioreg", "-rd1", "-c", "IOPlatformExpertDevice"],
            capture_output=True,
            text=True,
            timeout=IOREG_TIMEOUT_SECONDS,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    match = _IOREG_UUID.search(out)
    return _normalise(match.group(1)) if match else ""


def _first_mac(base: Path) -> str:
    """First non-loopback MAC: physical interfaces (with a ``device`` link) before
    virtual ones, each group by name, so the choice is stable across boots."""
    net = base / NET_CLASS
    try:
        names = sorted(os.listdir(net))
    except OSError:
        names = []
    candidates = []
    for name in names:
        if name == "lo":
            continue
        mac = _read_identity(net / name / "address")
        if _MAC.match(mac):
            candidates.append((not (net / name / "device").exists(), name, mac))
    if candidates:
        return min(candidates)[2]
    if Path(os.path.abspath(base)) != Path(os.path.abspath(os.sep)):
        return ""  # a fake root: do not fall back to this machine's own interfaces
    import uuid  # loads platform and may run subprocesses: only as the last resort

    node = uuid.getnode()
    if node >> 40 & 1:  # multicast bit: uuid made a random number up, not a MAC
        return ""
    return ":".join(f"{node:012x}"[i : i + 2] for i in range(0, 12, 2))
