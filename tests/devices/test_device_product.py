"""The device module as firmware receives it (issue 40 item 4): it verifies, it never
signs. What only the authority writes (tokens, key certificates, list pages, receipts,
statuses) lives in ``svccore.authority``, which firmware never ships."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import cryptography

import devices
from svccore import authority

REPO = Path(__file__).resolve().parents[2]
CRYPTOGRAPHY_SITE = str(Path(cryptography.__file__).resolve().parents[1])

SIGNING_NAMES = {"private_bytes", "generate", "load_pem_private_key"}


def _modules() -> list[Path]:
    return sorted(Path(devices.__file__).parent.glob("*.py"))


def test_no_module_of_the_device_signs_or_holds_a_private_key():
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "sign":
                found.append(f"{path.name}:{node.lineno} .sign")
            name = getattr(node, "id", None) or getattr(node, "name", None)
            if name in SIGNING_NAMES or (
                isinstance(node, ast.alias) and node.name in SIGNING_NAMES
            ):
                found.append(f"{path.name}:{node.lineno} {name}")
    assert found == []


def test_what_the_authority_signs_the_device_module_verifies(signing_key):
    from devices.documents import STATUS_PREFIX, parse_status

    public = signing_key.public_key()
    token = authority.encode_token({"lic": "L-1"}, signing_key)
    payload = json.loads(devices.token.b64url_decode(token.split(".")[1]))
    assert payload == {"lic": "L-1", "kid": devices.token.key_id(public)}
    status = authority.sign_document(
        STATUS_PREFIX,
        authority.status_payload(
            issuer="svc",
            license_id="L-1",
            device_id="cam",
            revoked_at=0,
            seq=3,
            issued_at=1_800_000_000,
        ),  # fmt: skip
        signing_key,
    )
    assert parse_status(status, public).seq == 3


def test_the_compatibility_table_and_changelog_match_the_code():
    """docs/devices.md: the changelog's newest entry is this version, and the state
    formats the table lists are the ones the code writes."""
    from devices import persistence, spool, status

    guide = (Path(__file__).resolve().parents[2] / "docs" / "devices.md").read_text()
    changelog = guide.split("### Changelog", 1)[1]
    assert changelog.split("**", 2)[1] == devices.__version__
    table = dict(
        (cells[1].strip(), cells[2].strip())
        for cells in (line.split("|") for line in guide.splitlines())
        if len(cells) == 4 and cells[1].strip().startswith("`")
    )
    assert table["`state.json`"] == str(persistence.STATE_FORMAT)
    assert table["`spool.json`, `spool.rejected.json`"] == str(spool.FORMAT)
    assert table["`status.json`"] == str(status.FORMAT)


def test_every_exported_name_and_every_public_member_of_the_engine_is_documented():
    undocumented = [
        name
        for name in devices.__all__
        if (inspect.isclass(obj := getattr(devices, name)) and not obj.__dict__.get("__doc__"))
        or (inspect.isfunction(obj) and not obj.__doc__)
    ]
    for cls in (devices.Engine, devices.Stream):  # with what Engine takes from its rooms
        members = {n: m for base in reversed(cls.__mro__[:-1]) for n, m in vars(base).items()}
        for name, member in members.items():
            if name.startswith("_"):
                continue
            target = member.fget if isinstance(member, property) else member
            if callable(target) and not target.__doc__:
                undocumented.append(f"{cls.__name__}.{name}")
    assert undocumented == []


def test_python_m_devices_version_prints_the_version():
    done = subprocess.run(
        [sys.executable, "-m", "devices", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{devices.__version__}\n", "")


def _imported_modules(path: Path) -> set[str]:
    """The package's modules ``path`` imports, at the top or inside a function (the
    networking modules are imported on first use)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


# Runs inside `python -I` with only the copy and cryptography importable: the public API
# imported from the copy, then what activate and sync load on first use.
IMPORTED = """
import json, sys
sys.path[:] = [p for p in sys.path if "-packages" not in p] + sys.argv[1:3]
import devices
assert devices.__file__.startswith(sys.argv[1]), devices.__file__
names = {name: getattr(devices, name) for name in devices.__all__}
loaded = sorted(m for m in sys.modules if m.startswith("devices."))
import devices.client
print(json.dumps({"import": loaded, "first_use": sorted(m for m in sys.modules
                                                       if m.startswith("devices."))}))
"""


def test_the_vendored_copy_ships_no_module_the_firmware_never_calls(tmp_path, public_key):
    """Every .py of a vendored copy is reached from ``devices/__init__`` (the API the
    firmware calls) by imports, or is ``__main__`` (``python -m devices``): no dead
    module. The copy imports alone, and what its API loads is what the walk says."""
    (tmp_path / "root.pub").write_text(public_key)
    done = subprocess.run(
        [sys.executable, "-m", "devices", "vendor", "--root", str(tmp_path / "root.pub"),
         "--out", str(tmp_path / "firmware")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "firmware" / "devices"
    shipped = {path.stem for path in copy.glob("*.py")}
    reachable, todo = set(), ["__init__", "__main__"]
    while todo:
        name = todo.pop()
        if name not in reachable:
            reachable.add(name)
            todo.extend(_imported_modules(copy / f"{name}.py") & shipped)
    assert sorted(shipped - reachable) == []

    ran = subprocess.run(
        [sys.executable, "-I", "-c", IMPORTED, str(tmp_path / "firmware"), CRYPTOGRAPHY_SITE],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    loaded = json.loads(ran.stdout)
    # `import devices` loads every module but the command line and the networking ones.
    assert {m.removeprefix("devices.") for m in loaded["first_use"]} == reachable - {
        "__init__",
        "__main__",
    }
    assert "devices.client" not in loaded["import"]
