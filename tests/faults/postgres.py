"""A private PostgreSQL server for the fault-injection suite, from the machine's binaries.

`initdb` into a temporary directory, served on its own port (55440–55479; ten per pytest-xdist
process) and its own socket directory, so the suite can stop, restart and squeeze it without
touching the server the rest of the suite uses. Run as the `postgres` user when the tests run
as root (initdb refuses root). POP connects as `pop`, an ordinary role:
`superuser_reserved_connections` then keep a slot for the suite's own checks when the server
is full.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

PORTS_PER_PROCESS = 10


def _ports() -> range:
    """This process's ten ports: 55440–55449 alone or for xdist's gw0, 55450–55459 for gw1…,
    so two test processes starting a private PostgreSQL at once never pick the same one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 55440 + (int(worker) % 4 if worker.isdigit() else 0) * PORTS_PER_PROCESS
    return range(first, first + PORTS_PER_PROCESS)


ROLE = "pop"


def binaries() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    ports = _ports()
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} for a private PostgreSQL")


class PrivatePostgres:
    """One throwaway PostgreSQL cluster: `start`, `stop`, `restart`, `remove`."""

    def __init__(self, *, max_connections: int = 100) -> None:
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
        self.bin = bin_dir
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="pop-faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--no-sync",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": str(max_connections),
            "superuser_reserved_connections": "3",
            # A test server: nothing here must survive the machine, only a server restart.
            "fsync": "off",
            "full_page_writes": "off",
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
            "logging_collector": "off",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = {value}\n")

    # -- control ------------------------------------------------------------------------

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bin / program), *args]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, check=check, capture_output=True, text=True, cwd=self.root)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", mode, "-w", "restart")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def set_max_connections(self, value: int) -> None:
        """ALTER SYSTEM, then a restart (the setting is read at server start only)."""
        with self.connect("postgres") as conn:
            conn.execute(f"ALTER SYSTEM SET max_connections = {int(value)}")
        self.restart()

    def remove(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ----------------------------------------------------------------------

    def dsn(self, dbname: str, user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    def url(self, dbname: str) -> str:
        return f"postgres://{ROLE}@127.0.0.1:{self.port}/{dbname}"

    def connect(self, dbname: str, *, attempts: int = 50) -> psycopg.Connection:
        """An autocommit superuser connection, retried while the server (re)starts."""
        for attempt in range(attempts):
            try:
                return psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=5)
            except psycopg.OperationalError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def create_role(self) -> None:
        with self.connect("postgres") as conn:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN")

    def create_database(self, name: str, *, template: str | None = None) -> None:
        with self.connect("postgres") as conn:
            if template:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    [template],
                )
            source = f' TEMPLATE "{template}"' if template else ""
            conn.execute(f'CREATE DATABASE "{name}" OWNER {ROLE}{source}')

    def drop_database(self, name: str) -> None:
        with self.connect("postgres") as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
