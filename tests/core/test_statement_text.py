"""compact_statement: whitespace out of hand-written SQL, quoted text kept as written."""

import pytest

from core.statement_text import among, compact_statement


def test_runs_of_whitespace_become_one_space_and_the_ends_are_stripped():
    sql = "\nSELECT a,\n       b\n  FROM t\tWHERE x = %(x)s\n"

    assert compact_statement(sql) == "SELECT a, b FROM t WHERE x = %(x)s"


def test_quoted_literals_and_identifiers_keep_their_whitespace():
    sql = "SELECT  '[]'::jsonb,  'two  spaces\n and ''a quote''' AS \"odd   name\"  FROM  t"

    assert compact_statement(sql) == (
        "SELECT '[]'::jsonb, 'two  spaces\n and ''a quote''' AS \"odd   name\" FROM t"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 -- a comment\nFROM t",
        "SELECT 1 /* a comment */ FROM t",
        "SELECT $$ a  body $$",
        "SELECT $tag$ a  body $tag$",
        "SELECT E'it\\'s  here'",
    ],
)
def test_a_comment_a_dollar_quote_or_an_escape_string_is_refused_rather_than_changed(sql):
    with pytest.raises(ValueError, match="comments, dollar quotes and escape strings"):
        compact_statement(sql)


def test_a_dash_or_dollar_inside_quotes_is_only_text():
    assert compact_statement("SELECT  '--'  ,  '$$'") == "SELECT '--' , '$$'"


def test_only_ascii_whitespace_is_whitespace():
    # PostgreSQL reads a no-break space as part of a name: x\u00a0y is one column, not x AS y.
    assert compact_statement("SELECT  x\u00a0y\n") == "SELECT x\u00a0y"


def test_a_name_ending_in_e_before_a_literal_is_not_an_escape_string():
    assert compact_statement("SELECT  note  =  'x'") == "SELECT note = 'x'"
    assert compact_statement("SELECT e.id FROM t e\n") == "SELECT e.id FROM t e"


@pytest.mark.django_db
def test_among_finds_the_listed_rows_with_one_text_for_every_length_of_list():
    from django.contrib.auth import get_user_model
    from django.db import connection

    users = [get_user_model().objects.create(username=f"u{n}") for n in range(3)]
    table = connection.ops.quote_name(get_user_model()._meta.db_table)

    def names(ids):
        listed, parameters = among(ids)
        with connection.cursor() as cursor:
            sql = f"SELECT username FROM {table} WHERE id {listed} ORDER BY id"
            cursor.execute(sql, parameters)
            return listed, [name for (name,) in cursor.fetchall()]

    one, found_one = names([users[1].pk])
    two, found_two = names([users[0].pk, users[2].pk])

    assert (found_one, found_two) == (["u1"], ["u0", "u2"])
    if connection.vendor == "postgresql":
        assert one == two == "= ANY(%s)"
