"""A PostgreSQL primary and its streaming replica of a test's own (tests/test_replica.py).

Two clusters made from the installed server binaries in a temporary directory, on free
ports on loopback: the primary by ``initdb`` (``wal_level = replica``) holding a copy of
the migrated test database, then the replica by ``pg_basebackup -R`` from it,
streaming. The machine's own server is never touched. PostgreSQL refuses to run as
root: as root (CI) every command runs as the ``postgres`` system user (the server
package creates it), which owns the directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import _free_port, tool_missing

DATABASE = "test_replica"  # test_: the server's clock may be moved (config.clock)
CANDIDATES = sorted(
    Path("/usr/lib/postgresql").glob("*/bin"),
    key=lambda path: [int(part) for part in path.parent.name.split(".") if part.isdigit()],
    reverse=True,
)


def _bin_dir() -> Path:
    for directory in (*CANDIDATES, Path("/usr/bin")):
        if (directory / "initdb").exists() and (directory / "pg_basebackup").exists():
            return directory
    tool_missing("PostgreSQL's initdb and pg_basebackup are not installed (.ci/run installs them)")
    raise AssertionError  # unreachable: tool_missing skips or fails


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Cluster:
    data: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def connect(self, dbname: str = DATABASE):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname,
            autocommit=True, prepare_threshold=None, connect_timeout=5,
        )  # fmt: skip

    def value(self, sql: str, params: tuple = ()):
        with self.connect() as conn:
            return conn.execute(sql, params).fetchone()[0]

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])


class Pair:
    """The primary and the replica; :meth:`stop` ends both (``immediate``)."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.home = Path(tempfile.mkdtemp(prefix="svc-replica-"))
        self.home.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.home, user="postgres", group="postgres")
        self.primary = Cluster(self.home / "primary", _free_port(), self.home / "primary.log")
        self.replica = Cluster(self.home / "replica", _free_port(), self.home / "replica.log")

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
        self._run("pg_ctl", "-D", str(cluster.data), "-l", str(cluster.log), "-w", "start")

    def start(self, source_url: str) -> None:
        """Both clusters, the primary holding a copy of ``source_url``'s database (the
        migrated test database: a copy takes a second where migrating takes twenty)."""
        primary, replica = self.primary, self.replica
        self._run("initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync", "--no-instructions")  # fmt: skip
        settings = (
            f"port = {primary.port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.home}'\nwal_level = replica\n"
            "max_wal_senders = 4\nfsync = off\nfull_page_writes = off\n"
            "shared_buffers = 32MB\nmax_connections = 60\n"
        )
        _append(primary.data / "postgresql.conf", settings)
        self._start(primary)
        with primary.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        copy_database(self.bin, source_url, primary.url)
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U",
                  "postgres", "-D", str(replica.data), "-R", "-X", "stream",
                  "--checkpoint=fast", "--no-sync")  # fmt: skip
        _append(replica.data / "postgresql.conf", f"port = {replica.port}\nhot_standby = on\n")
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

    def stop(self) -> None:
        for cluster in (self.replica, self.primary):
            if (cluster.data / "postmaster.pid").exists():
                subprocess.run(
                    _as_server_user(
                        [str(self.bin / "pg_ctl"), "-D", str(cluster.data), "-m", "immediate",
                         "-w", "stop"]
                    ),
                    capture_output=True,
                )  # fmt: skip
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
