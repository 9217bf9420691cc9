"""Imports run downward (house style): every import of every project module, at module
level and inside functions, read with ``ast`` and checked against the layers.

    devices                      the device module: nothing of the project
    svccore                      Django-free helpers shared with svcctl: devices only
    config                       settings, errors, shared admin and API helpers
    customers licensing billing  the Django apps
    audit operators ratelimits signing
    console svcctl bench         on top (svcctl talks HTTP: no Django app, no config)

``config/urls.py`` and ``config/device_urls.py`` (the composition roots of the full and
the device application, which mount the console's ``/metrics`` view too) and
``config/wsgi.py`` may import the apps.
A function-local import is held to the same rule: it does not make a cycle go away.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "devices",
    "svccore",
    "config",
    "customers",
    "licensing",
    "billing",
    "audit",
    "operators",
    "ratelimits",
    "signing",
    "console",
    "svcctl",
    "bench",
    "tests",
)
APPS = ("customers", "licensing", "billing", "audit", "operators", "ratelimits", "signing")
TOP = ("console", "svcctl", "bench", "tests")
# What each package may import of the project besides itself.
ALLOWED = {
    "devices": (),
    "svccore": ("devices",),
    "config": ("devices", "svccore"),
    **{app: ("devices", "svccore", "config", *APPS) for app in APPS},
    "console": ("devices", "svccore", "config", *APPS),
    "svcctl": ("devices", "svccore"),
    "bench": PACKAGES,
    "tests": PACKAGES,
}
COMPOSITION_ROOTS = {
    "config/urls.py": ("devices", "svccore", *APPS, "console"),
    "config/wsgi.py": ("devices", "svccore", *APPS),
    # The device application mounts the one /metrics view (console.metrics) too.
    "config/device_urls.py": ("devices", "svccore", *APPS, "console"),
}
WHY = {
    "devices": "the device module is vendored into firmware: standard library + cryptography",
    "svccore": "svccore is shared with svcctl and stays Django-free: it may import devices",
    "config": "config is the bottom of the server: it may import devices and svccore, "
    "and only config/urls.py, config/device_urls.py and config/wsgi.py compose the apps",
    "svcctl": "svcctl talks HTTP to the service: it may import devices and svccore",
    **{
        app: "an app may import config, svccore, devices and other apps, never " + ", ".join(TOP)
        for app in APPS
    },
    "console": "console may import the apps and below, never svcctl, bench or tests",
}


def _modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def _imported(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``path``, relative ones resolved."""
    package = list(path.relative_to(root).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if node.module is None:
                # `from . import x` / `from .. import x`: x may be a module.
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, module))
    return found


def _violations() -> list[str]:
    problems = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        own = name.split("/")[0]
        allowed = COMPOSITION_ROOTS.get(name, ALLOWED[own])
        for line, module in _imported(path):
            top = module.split(".")[0]
            if top in PACKAGES and top != own and top not in allowed:
                problems.append(f"{name}:{line} imports {module} ({WHY[own]})")
    return problems


def test_imports_run_downward():
    problems = _violations()
    if problems:
        pytest.fail("imports that run upward:\n  " + "\n  ".join(problems), pytrace=False)


def test_svcctl_does_not_import_django():
    """svcctl runs where Django is not installed (the offline workstation)."""
    problems = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _modules()
        if path.relative_to(ROOT).parts[0] in ("svcctl", "svccore", "devices")
        for line, module in _imported(path)
        if module.split(".")[0] in ("django", "rest_framework")
    ]
    if problems:
        pytest.fail("Django in a Django-free package:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.mark.parametrize(
    ("source", "where", "expected"),
    [
        ("from . import client\n", "devices/engine.py", [(1, "devices.client")]),
        ("from .token import x\n", "devices/engine.py", [(1, "devices.token")]),
        (
            "from .. import x\n",
            "licensing/management/commands/mint.py",
            [(1, "licensing.management.x")],
        ),
        (
            "def f():\n    from audit.services import g\n",
            "config/middleware.py",
            [(2, "audit.services")],
        ),
        ("import signing.keyring as s\n", "config/views.py", [(1, "signing.keyring")]),
    ],
)
def test_the_reader_sees_every_kind_of_import(tmp_path, source, where, expected):
    """The check itself: relative and function-local imports are found and resolved."""
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert _imported(path, tmp_path) == expected
