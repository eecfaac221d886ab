"""Stop `make test` with a clear message when PostgreSQL cannot be reached."""

import os
import sys

import psycopg

url = os.environ["DATABASE_URL"]
if not url.startswith(("postgres://", "postgresql://")):
    sys.exit(f"make test runs on PostgreSQL; DATABASE_URL is {url!r}.")
try:
    psycopg.connect(url, connect_timeout=5).close()
except psycopg.OperationalError as error:
    if "does not exist" in str(error):
        sys.exit(0)  # pytest-django creates its own test database; the server is up.
    sys.exit(
        f"PostgreSQL is not reachable at {url}: {error}\n"
        "Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n"
        "or point DATABASE_URL at a server you can use."
    )
