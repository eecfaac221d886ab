"""Environment header: the machine, PostgreSQL and its durability settings, package versions."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

from bench.common import PYTHON, admin_connect

PACKAGES = (
    "Django",
    "djangorestframework",
    "django-q2",
    "psycopg",
    "gunicorn",
    "httpx",
    "celery",
    "redis",
    "procrastinate",
    "pgqueuer",
)
SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "autovacuum",
    "shared_buffers",
    "max_connections",
)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def redis_version() -> str:
    try:
        out = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "INFO", "server"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "not reachable"
    for line in out.splitlines():
        if line.startswith("redis_version:"):
            return line.split(":", 1)[1].strip()
    return "not reachable"


def collect() -> dict[str, str]:
    info: dict[str, str] = {
        "cores": str(os.cpu_count()),
        "cpu": cpu_model(),
        "load average (1/5/15 min)": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "python": f"{platform.python_version()} ({PYTHON})",
        "kernel": platform.release(),
    }
    with admin_connect() as conn:
        for name in SETTINGS:
            info[f"postgresql {name}"] = conn.execute(f"SHOW {name}").fetchone()[0]
        info["postgresql other sessions"] = str(
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            ).fetchone()[0]
        )
    info["redis"] = redis_version()
    for package in PACKAGES:
        try:
            info[f"package {package}"] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[f"package {package}"] = "not installed"
    return info


def main() -> None:
    for key, value in collect().items():
        print(f"{key:32} {value}")


if __name__ == "__main__":
    main()
