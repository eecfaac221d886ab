"""Query plans for the tests that hold a list's cost to the rows it shows (docs/design.md
§10.4): PostgreSQL's EXPLAIN of a captured statement, and the check that a list's page and
capped count read a big table by index whatever it holds."""

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext


def plan_of(sql: str, params=None, *, seqscan: bool = True) -> str:
    """EXPLAIN of `sql`; with `seqscan=False`, the plan PostgreSQL would take were the matching
    rows rare (sequential scans priced out)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if not seqscan:
            cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def assert_list_reads_by_index(caller, url: str, table: str) -> None:
    """GET `url` as `caller`; neither its page nor its capped count may scan `table`. A count
    is planned as if few rows matched: here every row may match, and reading 10,001 of them
    in table order would be right; over a long history where few match, an index must serve
    it."""
    with CaptureQueriesContext(connection) as queries:
        assert caller.get(url).status_code == 200, url
    read = [q["sql"] for q in queries if table in q["sql"] and " LIMIT " in q["sql"]]
    assert read, url
    for sql in read:
        plan = plan_of(sql, seqscan=not sql.startswith("SELECT COUNT(*)"))
        assert f"Seq Scan on {table}" not in plan, f"{url}:\n{sql}\n{plan}"
