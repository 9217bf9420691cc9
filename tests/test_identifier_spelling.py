"""One spelling in identifiers (style.md): Python names say "license", as the API's field
names do (``license_id``); prose, messages and comments keep British "licence". Checked
on the tokens, so strings and comments are free to say "licence"."""

from __future__ import annotations

import io
import subprocess
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_no_python_name_takes_the_british_spelling():
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found = []
    for name in files:
        path = REPO / name
        if not path.exists():
            continue
        source = path.read_text()
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and "licence" in token.string.lower():
                found.append(f"{name}:{token.start[0]}: {token.string}")
    assert not found, "identifiers spelled 'licence' (use 'license'):\n" + "\n".join(found)
    assert len(files) > 100  # the check saw the project
