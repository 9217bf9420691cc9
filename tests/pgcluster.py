"""A PostgreSQL primary and its streaming replica of a test's own (tests/test_replica.py).

Two clusters made from the installed server binaries in a temporary directory, on free
ports on loopback: the primary by ``initdb`` (``wal_level = replica``) holding a copy of
the migrated test database, then the replica by ``pg_basebackup -R`` from it,
streaming. The machine's own server is never touched. PostgreSQL refuses to run as
root: as root (CI) every command runs as the ``postgres`` system user (the server
package creates it), which owns the directory.

bench/bench_status_scale.py starts a pair of its own too (an empty primary it loads,
then the replica), so this module imports nothing of the test suite's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DATABASE = "test_replica"  # test_: the server's clock may be moved (config.clock)
CANDIDATES = sorted(
    Path("/usr/lib/postgresql").glob("*/bin"),
    key=lambda path: [int(part) for part in path.parent.name.split(".") if part.isdigit()],
    reverse=True,
)


class ToolsMissing(RuntimeError):
    """PostgreSQL's server binaries are not installed (a test skips or fails on it:
    tests.conftest.tool_missing)."""


def _bin_dir() -> Path:
    for directory in (*CANDIDATES, Path("/usr/bin")):
        if (directory / "initdb").exists() and (directory / "pg_basebackup").exists():
            return directory
    raise ToolsMissing(
        "PostgreSQL's initdb and pg_basebackup are not installed (.ci/run installs them)"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Cluster:
    data: Path
    port: int
    log: Path
    database: str = DATABASE

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    def connect(self, dbname: str = ""):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname or self.database,
            autocommit=True, prepare_threshold=None, connect_timeout=5,
        )  # fmt: skip

    def value(self, sql: str, params: tuple = ()):
        with self.connect() as conn:
            return conn.execute(sql, params).fetchone()[0]

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])


class Pair:
    """The primary and the replica; :meth:`stop` ends both (``immediate``).

    ``database`` names the primary's database; ``conf`` is appended to the primary's
    postgresql.conf (a bench's memory and pg_stat_statements). ``home``: a directory to
    keep the clusters in (a bench's ``--keep``), else a new temporary one."""

    def __init__(self, *, database: str = DATABASE, conf: str = "", home: Path | None = None):
        self.bin = _bin_dir()
        self.conf = conf
        if home is None:
            home = Path(tempfile.mkdtemp(prefix="svc-replica-"))
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.home.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.home, user="postgres", group="postgres")
        self.primary = Cluster(
            self.home / "primary", _free_port(), self.home / "primary.log", database
        )
        self.replica = Cluster(
            self.home / "replica", _free_port(), self.home / "replica.log", database
        )

    def _run(self, *command: str) -> None:
        done = subprocess.run(
            _as_server_user([str(self.bin / command[0]), *command[1:]]),
            capture_output=True,
            text=True,
            cwd=self.home,
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")

    def _start(self, cluster: Cluster) -> None:
        # The port on the command line: a kept pair (resume) starts on new free ports.
        self._run("pg_ctl", "-D", str(cluster.data), "-l", str(cluster.log), "-w",
                  "-o", f"-p {cluster.port}", "start")  # fmt: skip

    def resume(self) -> bool:
        """Start a pair kept in ``home`` by ``stop(keep=True)``; False when none is there."""
        if not (self.primary.data / "PG_VERSION").exists():
            return False
        self._start(self.primary)
        if (self.replica.data / "PG_VERSION").exists():
            _append(
                self.replica.data / "postgresql.auto.conf",
                f"primary_conninfo = 'host=127.0.0.1 port={self.primary.port} user=postgres'\n",
            )
            self._start(self.replica)
            self.await_streaming()
        return True

    def start(self, source_url: str) -> None:
        """Both clusters, the primary holding a copy of ``source_url``'s database (the
        migrated test database: a copy takes a second where migrating takes twenty)."""
        self.start_primary(source_url)
        self.start_replica()

    def start_primary(self, source_url: str | None = None) -> None:
        """The primary alone, its database a copy of ``source_url``'s or empty."""
        primary = self.primary
        self._run("initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync", "--no-instructions")  # fmt: skip
        settings = (
            f"listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.home}'\nwal_level = replica\n"
            "max_wal_senders = 4\nfsync = off\nfull_page_writes = off\n"
            "shared_buffers = 32MB\nmax_connections = 60\n"
        )
        _append(primary.data / "postgresql.conf", settings + self.conf)
        self._start(primary)
        with primary.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {primary.database}")
        if source_url is not None:
            copy_database(self.bin, source_url, primary.url)

    def start_replica(self) -> None:
        """The replica, by ``pg_basebackup -R`` from the running primary, streaming."""
        primary, replica = self.primary, self.replica
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U",
                  "postgres", "-D", str(replica.data), "-R", "-X", "stream",
                  "--checkpoint=fast", "--no-sync")  # fmt: skip
        _append(replica.data / "postgresql.conf", "hot_standby = on\n")
        self._start(replica)
        self.await_streaming()

    def await_streaming(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.primary.value("SELECT count(*) FROM pg_stat_replication") < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica does not stream:\n{self.replica.log.read_text()}")
            time.sleep(0.05)

    def await_replayed(self, timeout: float = 30, what: str = "replay") -> None:
        """Until the replica has replayed (or, ``what="receive"``, received) everything
        the primary has written so far."""
        target = self.primary.value("SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + timeout
        while not self.replica.value(
            f"SELECT pg_last_wal_{what}_lsn() >= %s::pg_lsn", (target,)
        ):  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not replay the primary's writes")
            time.sleep(0.02)

    def stop(self, *, keep: bool = False) -> None:
        """Both clusters down and their directory removed; ``keep``: shut down cleanly
        (``fast``) and left in ``home`` for :meth:`resume`."""
        mode = "fast" if keep else "immediate"
        for cluster in (self.replica, self.primary):
            if (cluster.data / "postmaster.pid").exists():
                subprocess.run(
                    _as_server_user(
                        [str(self.bin / "pg_ctl"), "-D", str(cluster.data), "-m", mode,
                         "-w", "stop"]
                    ),
                    capture_output=True,
                )  # fmt: skip
        if not keep:
            shutil.rmtree(self.home, ignore_errors=True)


def _append(path: Path, text: str) -> None:
    with open(path, "a") as out:
        out.write(text)


def copy_database(bin_dir: Path, source_url: str, target_url: str) -> None:
    """``source_url``'s database, schema and rows, into ``target_url``'s (pg_dump piped
    into psql as the caller: both connect over TCP)."""
    dump = subprocess.Popen(
        [str(bin_dir / "pg_dump"), "--no-owner", "--no-privileges", "-d", source_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    load = subprocess.run(
        [str(bin_dir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", target_url],
        stdin=dump.stdout,
        capture_output=True,
        text=True,
    )
    dump.stdout.close()
    dumped = dump.wait()
    if dumped or load.returncode:
        raise RuntimeError(
            f"copying the test database failed:\n{dump.stderr.read()}\n{load.stderr}"
        )
