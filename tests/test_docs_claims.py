"""Claims of the README and the guides held against what they describe (issue 40 item 5),
as docs/configuration.md is held by tests/test_settings_validation.py: the layout table
against the tree git tracks, and the ``/healthz`` example and API row against the body
the view answers."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Tracked top-level folders that are not rooms of the code: CI's entry point.
NOT_ROOMS = {".ci"}


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def _layout_paths() -> list[str]:
    """The folders the README's layout table names (``| `a/`, `b/` | what |``)."""
    table = _readme().split("| Path | What |", 1)[1].split("\n\n", 1)[0]
    cells = [line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|")]
    return [name for cell in cells for name in re.findall(r"`([^`]+)/`", cell)]


def test_the_readme_layout_table_names_every_tracked_folder_and_no_other():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    folders = {path.split("/", 1)[0] for path in tracked if "/" in path} - NOT_ROOMS
    named = _layout_paths()
    assert len(named) == len(set(named)), f"named twice: {named}"
    assert sorted(folders - set(named)) == [], "tracked folders the README's table omits"
    assert sorted(set(named) - folders) == [], "the README's table names folders not tracked"


def _documented_fields(text: str) -> set[str]:
    """Field names of a ``{a, b (why), c}`` description."""
    inner = re.sub(r"\([^)]*\)", "", text.strip()[1:-1])
    return {part.strip() for part in inner.split(",")}


@pytest.mark.django_db
def test_the_healthz_examples_show_the_fields_the_view_answers(client):
    answered = set(client.get("/healthz").json())
    readme = _readme()
    example = readme.split("curl -s http://127.0.0.1:8000/healthz; echo\n# ", 1)[1]
    assert set(json.loads(example.split("\n", 1)[0])) == answered
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    row = next(line for line in api.splitlines() if line.startswith("| GET | `/healthz` |"))
    assert _documented_fields(row.split("|")[4].strip().strip("`").split("`;")[0]) == answered


# --- what a device-facing request costs the database, as docs/development.md says ------

NUMBER_WORDS = {"none": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def _development_claim(pattern: str) -> int:
    text = " ".join((ROOT / "docs" / "development.md").read_text(encoding="utf-8").split())
    found = re.search(pattern, text)
    assert found, f"docs/development.md no longer says {pattern!r}: update this test with it"
    return NUMBER_WORDS[found.group(1)]


def _statements(captured) -> list[str]:
    """The statements a request ran, without the SAVEPOINT/RELEASE pairs that the test's
    own transaction adds (production has BEGIN and COMMIT there, which are not queries)."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]


@pytest.mark.django_db
def test_the_query_counts_the_development_guide_states_are_what_requests_cost(
    device_api, make_batch, customer, caches_held
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from licensing.services import license_issue, license_revoke
    from signing import keyring

    def activate(device_id: str):
        body = {"batch_token": batch.license.token, "device_id": device_id}
        return device_api.post("/v1/activate", body, format="json")

    batch = make_batch(units=10)
    assert activate("docs-warm-up").status_code == 200
    keyring.registry()
    with CaptureQueriesContext(connection) as reactivation:
        assert activate("docs-warm-up").json()["reactivated"] is True
    assert len(_statements(reactivation)) == _development_claim(r"a re-activation is (\w+) quer")

    with CaptureQueriesContext(connection) as new:
        assert activate("docs-new").status_code == 200
    after_lookup = _statements(new)[1:]
    if connection.vendor == "postgresql":
        claim = r"a new activation is the lookup and then, on PostgreSQL, (\w+) statement"
        assert len(after_lookup) == _development_claim(claim)
    else:  # "on SQLite, the seat's UPDATE and the rows in one transaction"
        verbs = [sql.split()[0].upper() for sql in after_lookup]
        assert verbs[0] == "UPDATE" and set(verbs[1:]) == {"INSERT"}

    issued = license_issue(customer_id=customer.id, sku="DETECT-STD", device_id="docs-cam")
    license_revoke(license_id=issued.id)
    assert device_api.get("/v1/revocations?since=0").status_code == 200
    with CaptureQueriesContext(connection) as listing:
        assert device_api.get("/v1/revocations?since=0").status_code == 200
    claim = r"a revocation-list request (\w+) once built"
    assert len(listing.captured_queries) == _development_claim(claim)
