"""Start and stop POP's own processes (gunicorn, qcluster, `pop worker`) for a bench or a demo.

Each process gets its own session (process group), so stopping it stops its children too,
and nothing else is ever signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.common import PYTHON, ROOT, pop_env

GUNICORN_THREADS = 8  # long-polling pulls hold a thread, not a worker


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path
    argv: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the process group at once: a crash, not a shutdown."""
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL the group after `timeout`."""
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        else:
            try:  # children left behind in the group (gunicorn workers, cluster workers)
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def log_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pop-bench-"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spawn(name: str, argv: list[str], env: dict[str, str], logs: Path) -> Process:
    log = logs / f"{name}.log"
    handle = open(log, "w")
    popen = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    handle.close()
    return Process(name=name, popen=popen, log=log, argv=argv)


def manage(dbname: str, *args: str, **env: str) -> None:
    subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=pop_env(dbname, **env),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def gunicorn(
    dbname: str, port: int, logs: Path, *, workers: int = 2, name: str = "gunicorn", **env: str
) -> Process:
    argv = [
        PYTHON,
        "-m",
        "gunicorn",
        "popsite.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(GUNICORN_THREADS),
        "--timeout",
        "60",
        "--graceful-timeout",
        "5",
        "--log-level",
        "warning",
    ]
    return spawn(name, argv, pop_env(dbname, **env), logs)


def qcluster(dbname: str, logs: Path, *, name: str = "qcluster", **env: str) -> Process:
    return spawn(name, [PYTHON, "manage.py", "qcluster"], pop_env(dbname, **env), logs)


def pop_worker(
    url: str,
    token: str,
    insight: str,
    logs: Path,
    *,
    name: str,
    concurrency: int = 10,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Process:
    argv = [
        PYTHON,
        "-m",
        "popclient",
        "--url",
        url,
        "worker",
        "--insight",
        insight,
        "--concurrency",
        str(concurrency),
        "--name",
        name,
        *(extra or []),
    ]
    # The token goes in the environment: argv is visible to every user (ps).
    worker_env = {**os.environ, "PYTHONPATH": str(ROOT), "POP_TOKEN": token, **(env or {})}
    return spawn(name, argv, worker_env, logs)


def wait_http(url: str, process: Process, timeout: float = 60.0) -> None:
    """Wait until `url` answers 200 (or the process died: raise with its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"{process.name} exited:\n{process.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{process.name} did not answer {url} in {timeout:.0f} s:\n{process.tail()}")
