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
