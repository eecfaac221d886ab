"""Hand-written SQL as the driver caches it: one space for each run of whitespace.

psycopg converts a statement's `%(name)s` placeholders into PostgreSQL's `$n` on every
execution, and keeps the conversion of a text up to `STATEMENT_CACHE_LENGTH` characters (and
`STATEMENT_CACHE_PARAMETERS` parameters) in a per-process cache. A longer text is converted
again on every run: for the pull's claim (4,239 characters as written, 3,950 compacted) that
was 44 µs of regular-expression work per pull, paid again by every empty check of a long
poll. `compact_statement` takes the indentation out of a statement built once per process;
tests/api/test_hot_path_statements.py runs the hot paths and checks that every statement they
send stays within both limits. `among` writes a test of membership in a list of values as
one array parameter, so one text serves every length of list.
"""

import re
from collections.abc import Sequence

from django.db import connection

#: psycopg's limits for its cache of converted statements (`psycopg._queries`).
STATEMENT_CACHE_LENGTH = 4096
STATEMENT_CACHE_PARAMETERS = 50

# Quoted text (a literal or an identifier, with its doubled quotes) is kept as written.
_QUOTED = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*")""")
# ASCII whitespace only: PostgreSQL reads other spaces (a no-break space) as part of a name.
_WHITESPACE = re.compile(r"[ \t\n\r\f\v]+")
_ENDS = " \t\n\r\f\v"
_DOLLAR_QUOTE = re.compile(r"\$\w*\$")
_ESCAPE = re.compile(r"(?<!\w)[eE]\Z")  # code that ends where an E'…' string starts


def compact_statement(sql: str) -> str:
    """`sql` with every run of whitespace outside quotes made one space, ends stripped.

    Refuses (ValueError) a text with a comment, a dollar quote or an escape string (`E'…'`)
    outside quotes: a `--` comment runs to the end of its line, which compaction would move,
    a dollar-quoted body would be compacted as if it were code, and an escape string's `\'`
    does not end it, which the quote matching here does not know (it reads literals as
    PostgreSQL does with `standard_conforming_strings` on, its default)."""
    parts = _QUOTED.split(sql)
    for number, code in enumerate(parts[::2]):
        escape = number < len(parts) // 2 and _ESCAPE.search(code)  # a quote follows
        if "--" in code or "/*" in code or _DOLLAR_QUOTE.search(code) or escape:
            raise ValueError(
                "compact_statement: comments, dollar quotes and escape strings are not handled"
            )
    parts[::2] = [_WHITESPACE.sub(" ", code) for code in parts[::2]]
    return "".join(parts).strip(_ENDS)


def among(values: Sequence[object]) -> tuple[str, list]:
    """The SQL that follows a column to test it against `values`, and its parameters: on
    PostgreSQL `= ANY(%s)` with the list as one array parameter — one text for every length,
    so it is prepared once and its conversion cached, where `IN (%s, …)` was a text per length
    and over the parameter limit past 50 values; elsewhere (SQLite) `IN (%s, …)`."""
    if connection.vendor == "postgresql":
        return "= ANY(%s)", [list(values)]
    return f"IN ({', '.join(['%s'] * len(values))})", list(values)
