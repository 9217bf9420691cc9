"""The device module as firmware receives it (issue 40 item 4): it verifies, it never
signs. What only the authority writes (tokens, key certificates, list pages, receipts,
statuses) lives in ``svccore.authority``, which firmware never ships."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import devices
from svccore import authority

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
