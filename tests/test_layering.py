"""The layers are one contract, in ``pyproject.toml`` (``make lint`` runs ``lint-imports``):
an import in the wrong direction breaks it. Shown on a copy of the tree: the copy as it
is keeps every contract; the same copy with one planted import (an app importing an app
above it, a function-local import of the tests, the operators' cycle back) breaks the
contract that names the rule."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LAYERS = "Server layers: each app on those below it"
OPERATORS = "Inside operators: the identity at the bottom"
NO_TESTS = "The server never imports the CLI, the benches or the tests"


def _python_only(directory: str, names: list[str]) -> set[str]:
    return {
        name
        for name in names
        if name == "__pycache__"
        or (not name.endswith(".py") and not (Path(directory) / name).is_dir())
    }


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The root packages' Python modules and ``pyproject.toml``, copied."""
    copy = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for package in config["tool"]["importlinter"]["root_packages"]:
        shutil.copytree(ROOT / package, copy / package, ignore=_python_only)
    return copy


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree,  # lint-imports puts its working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_as_it_is_keeps_every_contract(tree):
    run = _lint(tree)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "source", "contract", "chain"),
    [
        ("audit/planted.py", "import billing.models\n", LAYERS, "audit.planted -> billing.models"),
        (
            "customers/planted.py",
            "from licensing.selectors import filters_check\n",
            LAYERS,
            "customers.planted -> licensing.selectors",
        ),
        (
            "events/planted.py",
            "def f():\n    from tests import factories\n",
            NO_TESTS,
            "events.planted -> tests.factories",
        ),
        (
            "operators/planted_selectors.py",
            "from operators.authentication import OperatorKeyAuthentication\n",
            OPERATORS,
            "operators.planted_selectors -> operators.authentication",
        ),
    ],
)
def test_a_planted_import_breaks_the_contract(tree, module, source, contract, chain):
    planted = tree / module
    planted.write_text(source, encoding="utf-8")
    if module.startswith("operators/"):
        # Planted in the selectors' room: the selectors import it.
        selectors = tree / "operators" / "selectors.py"
        original = selectors.read_text(encoding="utf-8")
        selectors.write_text(original + "\nfrom operators import planted_selectors\n")
    try:
        run = _lint(tree)
    finally:
        planted.unlink()
        if module.startswith("operators/"):
            selectors.write_text(original, encoding="utf-8")
    assert run.returncode != 0
    words = " ".join(run.stdout.split())  # the report wraps long contract names
    assert "1 broken" in words, run.stdout
    assert contract in words.split("Broken contracts", 1)[1], run.stdout
    assert chain in run.stdout, run.stdout
