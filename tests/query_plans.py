"""Query plans for the tests that hold a read's cost to the rows it needs (docs/design.md
§10.4): PostgreSQL's EXPLAIN of a captured statement, the check that a list's page and capped
count read the big tables by index whatever they hold, and the entries of a partial index."""

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


def statements_on(caller, url: str, tables: tuple[str, ...]) -> list[str]:
    """GET `url` as `caller` (a 200) and return the statements it sent that name one of
    `tables` (at least one)."""
    with CaptureQueriesContext(connection) as queries:
        assert caller.get(url).status_code == 200, url
    read = [q["sql"] for q in queries if any(table in q["sql"] for table in tables)]
    assert read, url
    return read


def seqscan_as_asked(sql: str) -> bool:
    """Whether `sql` is planned with sequential scans allowed: all but a capped count, which is
    planned as if few rows matched (here every row may match, and reading 10,001 of them in
    table order would be right; over a long history where few match, an index must serve it)."""
    return not sql.startswith("SELECT COUNT(*)")


def assert_list_reads_by_index(caller, url: str, tables: tuple[str, ...]) -> list[str]:
    """GET `url` as `caller`; neither its page nor its capped count may scan any of `tables`
    (`seqscan_as_asked`). Returns the statements read (those with a LIMIT on one of
    `tables`)."""
    read = [sql for sql in statements_on(caller, url, tables) if " LIMIT " in sql]
    assert read, url
    for sql in read:
        plan = plan_of(sql, seqscan=seqscan_as_asked(sql))
        scanned = [table for table in tables if f"Seq Scan on {table}" in plan]
        assert scanned == [], f"{url} scans {scanned}:\n{sql}\n{plan}"
    return read


def pages_read(sql: str, params=None, *, seqscan: bool = True) -> int:
    """Shared buffers (hit or read) the statement touches when run, from EXPLAIN (ANALYZE,
    BUFFERS) in a transaction rolled back; `seqscan` as in `plan_of`."""
    with transaction.atomic(), connection.cursor() as cursor:
        if not seqscan:
            cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
        top = (plan[0] if isinstance(plan, list) else plan)["Plan"]
        transaction.set_rollback(True)
    return top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)


def assert_no_match_reads_few_pages(caller, url: str, tables: tuple[str, ...], most: int = 20):
    """GET `url` (a filter no row matches) as `caller`: each statement on `tables` it sends
    touches at most `most` pages, run as `seqscan_as_asked` plans it. An index scan in another
    order that filters every row it passes (no Seq Scan, so `assert_list_reads_by_index` lets
    it by) reads the whole history to find that nothing matches; a read of the filter's own
    index finds it at once."""
    for sql in statements_on(caller, url, tables):
        seqscan = seqscan_as_asked(sql)
        pages = pages_read(sql, seqscan=seqscan)
        assert pages <= most, (
            f"{url} reads {pages} pages to match nothing:\n{sql}\n{plan_of(sql, seqscan=seqscan)}"
        )


def partial_index_entries(index: str, table: str, column: str, predicate: str) -> int:
    """The entries of the partial index `index` (on `table`, holding `column`, WHERE
    `predicate`), read from the index alone: an index-only scan of it, checked in the plan."""
    sql = f"SELECT count({column}) FROM {table} WHERE {predicate}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert f"Index Only Scan using {index}" in plan, plan
        cursor.execute(sql)
        return cursor.fetchone()[0]
