"""README.md and the guides in docs/ work as written (issue 13, issue 24): their shell
blocks, run in order in one shell against `make run` on a fresh copy of the checkout.
The order is README.md's blocks, then each page's in the order of ``nav`` in
``mkdocs.yml`` (the site's reading order); a variable a page sets is there in the next.

The copy holds the working tree's tracked and untracked-but-not-ignored files (``git
ls-files -co --exclude-standard``; no ``var/``, no ``staticfiles/``), with their mtimes,
and a symlink to the real ``.venv`` so that ``make`` does not reinstall it. ``make run``
starts there in the background on a free port, with ``DATABASE_URL``, ``CACHE_URL``,
every ``SVC_*`` and ``DJANGO_*`` variable of the test run and the venv on ``PATH``
removed from its environment: it makes its own SQLite database and development keys, as
on a fresh clone, whichever database the suite runs on. Once ``/healthz`` answers, every fenced
```` ```sh ```` block of README.md runs, in order, in one ``bash`` (``set -euo
pipefail``, ``set -v`` echoing each line as written), so a variable set in one block is
there in the next. That bash runs on a pseudo-terminal: interactive commands
(``createsuperuser``) get their prompts answered as an operator would type.

The one rewrite: ``127.0.0.1:8000`` in a block becomes ``127.0.0.1:<the free port>``.

A block that cannot run here (a production host, the test suites themselves) is
preceded by ``<!-- not run by tests/test_readme.py: <reason> -->``; a skip without a
reason fails the test.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

README = REPO / "README.md"
MKDOCS = REPO / "mkdocs.yml"
VENV = REPO / ".venv"
ADDRESS = "127.0.0.1:8000"
SKIP = re.compile(r"<!--\s*not run by tests/test_readme\.py(?P<rest>.*?)-->", re.S)
STARTUP_SECONDS = 60
BLOCKS_SECONDS = 90
# What createsuperuser asks, at the end of the output while it waits, and the answers.
PASSWORD = secrets.token_urlsafe(18)
PROMPTS = [
    (re.compile(r"Username(?: \(leave blank to use '[^']*'\))?: $"), "readme-admin"),
    (re.compile(r"Email address: $"), "readme-admin@example.com"),
    (re.compile(r"Password: $"), PASSWORD),
    (re.compile(r"Password \(again\): $"), PASSWORD),
]


@dataclass
class Block:
    line: int  # of the opening fence in its page
    text: str
    skip: str | None  # the reason it is not run, or None
    page: str = "README.md"


def pages() -> list[Path]:
    """README.md, then every page of the site in its navigation order."""
    nav = yaml.safe_load(MKDOCS.read_text())["nav"]
    docs = [REPO / "docs" / name for entry in nav for name in entry.values()]
    missing = [str(path) for path in docs if not path.is_file()]
    assert not missing, f"mkdocs.yml names pages that do not exist: {missing}"
    return [README, *docs]


def page_blocks() -> list[Block]:
    """The sh blocks of every page, in reading order, each naming its page."""
    found = []
    for path in pages():
        name = str(path.relative_to(REPO))
        for block in readme_blocks(path.read_text(), name):
            block.page = name
            found.append(block)
    return found


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced ``sh`` block, with the reason of a skip comment right before it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```sh":
            index += 1
            continue
        start = index
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{page} line {start + 1}: the sh block is never closed"
        before = "\n".join(lines[:start]).rstrip()
        skip = None
        comment = before.rsplit("<!--", 1)
        if len(comment) == 2 and before.endswith("-->"):
            match = SKIP.fullmatch("<!--" + comment[1])
            if match:
                skip = match["rest"].strip().removeprefix(":").strip()
                assert match["rest"].strip().startswith(":") and skip, (
                    f"{page} line {start + 1}: a block not run needs its reason, "
                    "<!-- not run by tests/test_readme.py: <reason> -->"
                )
        blocks.append(Block(start + 1, "\n".join(lines[start + 1 : end]), skip))
        index = end + 1
    return blocks


def test_readme_blocks_are_found_and_every_skip_has_a_reason():
    blocks = page_blocks()
    assert [b for b in blocks if b.skip is None], "no runnable sh block in README.md"
    # Every guide the README's walk continues into holds blocks that run.
    assert {b.page for b in blocks if b.skip is None} >= {
        "README.md",
        "docs/api.md",
        "docs/operators.md",
        "docs/finance.md",
    }
    assert all(b.skip for b in blocks if b.skip is not None)
    with pytest.raises(AssertionError, match="needs its reason"):
        readme_blocks("<!-- not run by tests/test_readme.py -->\n```sh\nmake test\n```\n")
    with pytest.raises(AssertionError, match="needs its reason"):
        readme_blocks("<!-- not run by tests/test_readme.py:  -->\n```sh\nmake test\n```\n")
    parsed = readme_blocks("<!-- not run by tests/test_readme.py: root -->\n```sh\nx\n```\n")
    assert parsed == [Block(2, "x", "root")]


def _copy_checkout(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet in git
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination, follow_symlinks=False)
    (target / ".venv").symlink_to(VENV)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fresh_environment() -> dict[str, str]:
    """The caller's environment without the test run's settings and without the venv on
    PATH: README's own blocks must set what they need."""
    venv_bin = str(VENV / "bin")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SVC_", "DJANGO_", "PYTEST_", "VIRTUAL_ENV"))
        and key not in ("DATABASE_URL", "CACHE_URL", "PYTHONPATH")
    }
    env["PATH"] = os.pathsep.join(
        part
        for part in env.get("PATH", "").split(os.pathsep)
        if part and os.path.realpath(part) != os.path.realpath(venv_bin)
    )
    return env


def _wait_for_health(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"make run exited with {server.returncode}:\n{log.read_text()[-6000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"make run did not answer /healthz in {STARTUP_SECONDS} s:\n{log.read_text()}")


def _stop(process: subprocess.Popen) -> None:
    """Stop ``process`` and everything it started (its own process group)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _script(blocks: list[Block], port: int) -> str:
    """One bash script: each block announced by a marker naming its page and line."""
    parts = ["set -euo pipefail"]
    for number, block in enumerate(blocks):
        parts.append(f"set +v; echo '@@@ block {number}: {block.page} line {block.line}'; set -v")
        parts.append(block.text.replace(ADDRESS, f"127.0.0.1:{port}"))
    parts.append("set +v")
    return "\n".join(parts) + "\n"


def _run_on_a_terminal(script: Path, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``bash script`` on a pseudo-terminal, answering known prompts; returns its
    exit status and everything it printed (CR LF as LF)."""
    controller, terminal = os.openpty()
    process = subprocess.Popen(
        ["bash", str(script)],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        cwd=cwd,
        env={**env, "TERM": "dumb"},
        start_new_session=True,
    )
    os.close(terminal)
    output, answered = "", 0
    deadline = time.monotonic() + BLOCKS_SECONDS
    try:
        while True:
            if time.monotonic() > deadline:
                pytest.fail(f"README blocks still running after {BLOCKS_SECONDS} s:\n{output}")
            ready, _, _ = select.select([controller], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every process holding the terminal has exited
                break
            if not chunk:
                break
            output += chunk.decode(errors="replace").replace("\r\n", "\n")
            for prompt, answer in PROMPTS:
                if prompt.search(output, answered):
                    os.write(controller, f"{answer}\n".encode())
                    answered = len(output)
                    break
        return process.wait(timeout=30), output
    finally:
        _stop(process)
        os.close(controller)


def _failure(blocks: list[Block], output: str, status: int) -> str:
    markers = list(re.finditer(r"^@@@ block (\d+): .*$", output, re.M))
    if not markers:
        return f"README blocks failed (exit {status}) before the first block:\n{output}"
    last = markers[-1]
    block = blocks[int(last[1])]
    return (
        f"{block.page}'s sh block at line {block.line} failed (exit {status}):\n"
        f"{block.text}\n\n--- its output ---\n{output[last.end() :].strip()}"
    )


@pytest.mark.live
def test_every_readme_shell_block_runs_as_written_against_make_run(tmp_path):
    blocks = [block for block in page_blocks() if block.skip is None]
    checkout = tmp_path / "checkout"
    _copy_checkout(checkout)
    env = _fresh_environment()
    installed = subprocess.run(
        ["make", "-q", ".venv/bin/.installed"], cwd=checkout, env=env, capture_output=True
    )
    if installed.returncode != 0:
        pytest.fail(
            ".venv is older than pyproject.toml or constraints.txt: run `make install` in "
            "the checkout first (this test never reinstalls the shared venv from its copy)"
        )
    port = _free_port()
    log = tmp_path / "make-run.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=checkout,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_health(f"http://127.0.0.1:{port}", server, log)
        var = checkout / "var"
        for private in ("db.sqlite3", "dev.env", "secret-key", "admin-key", "signing-key.pem"):
            assert stat.S_IMODE((var / private).stat().st_mode) == 0o600, private
        assert (var / "signing-key.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
        script = tmp_path / "readme.sh"
        script.write_text(_script(blocks, port))
        status, output = _run_on_a_terminal(script, checkout, env)
        (tmp_path / "readme.out").write_text(output)
        assert status == 0, _failure(blocks, output, status)
    finally:
        _stop(server)
    assert f"block {len(blocks) - 1}:" in output, "the last README block never ran"
