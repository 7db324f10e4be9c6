"""ocw/store/postgres/message.py: a message of statements with its values written in,
sent with libpq and read with psycopg's loaders — what the server reads back is what
was given, whatever the text holds, and an error is psycopg's own class."""
from __future__ import annotations

import datetime

import psycopg
import pytest

from ocw.store.postgres import message
from ocw.text.errors import InvalidArgument

TEXTS = ["it's", "back\\slash \\n \\' end\\", "'); DROP TABLE sessions; --", "émoji 🎉 中文", "", "%s %% $1",
         "line\nbreak\ttab"]


def test_a_literal_is_the_value_quoted_with_its_quotes_doubled():
    assert [message.literal(v, None) for v in ("a'b", "", "x''y", None, True, False, 0, -7, 2**40)] == [
        "'a''b'", "''", "'x''''y'", "NULL", "true", "false", "0", "-7", "1099511627776"]


def test_a_nul_is_refused_not_sent():
    with pytest.raises(InvalidArgument, match="NUL"):
        message.literal("before\x00after", None)


@pytest.fixture
def conn(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as c:
        yield c


def _read_back(conn, values):
    text = "SELECT " + ", ".join(["%s"] * len(values))
    (res,) = message.send(conn, message.compose(conn, text, values))
    return list(message.rows(conn, res)[0])


def test_every_value_reads_back_as_given(conn):
    values = TEXTS + [None, True, False, 0, -5, 2**40, 1.5]
    assert _read_back(conn, values) == values


def test_with_standard_conforming_strings_off_psycopg_quotes_and_backslashes_survive(conn):
    """A backslash in '…' is an escape when the setting is off: the fast quoting would
    change the text, so psycopg's own (E'…') takes over — read from the connection for
    each message, so a SET after the first message counts too."""
    assert _read_back(conn, TEXTS) == TEXTS
    conn.execute("SET standard_conforming_strings = off")
    assert _read_back(conn, TEXTS) == TEXTS


def test_percent_signs_in_the_text_are_written_doubled(conn):
    assert message.compose(conn, "SELECT '%%', %s", ["a%b"]) == "SELECT '%', 'a%b'"
    assert message.compose(conn, "SELECT '%%'", []) == "SELECT '%'"


def test_a_message_stops_at_its_first_error_which_is_psycopgs_class(conn):
    conn.execute("CREATE TABLE t (x integer)")
    with pytest.raises(psycopg.errors.DivisionByZero) as e:
        message.send(conn, "BEGIN; INSERT INTO t VALUES (1); SELECT 1 / 0; INSERT INTO t VALUES (2)")
    assert e.value.sqlstate == "22012"
    assert conn.info.transaction_status == conn.info.transaction_status.INERROR
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)  # the first insert undone, the last never run


def test_rows_are_loaded_as_a_cursor_loads_them(conn):
    (res,) = message.send(conn, "SELECT localtimestamp, '{\"a\": [1, 2]}'::json, 5::bigint, NULL::text, 'x'"
                                " FROM generate_series(1, 2)")
    got = message.rows(conn, res)
    assert len(got) == 2
    ts, doc, n, none, x = got[0]
    assert isinstance(ts, datetime.datetime) and doc == {"a": [1, 2]} and (n, none, x) == (5, None, "x")
    cursor_row = conn.execute("SELECT '{\"a\": [1, 2]}'::json, 5::bigint, NULL::text, 'x'").fetchone()
    assert got[1][1:] == cursor_row


def _run_back(conn, values, types):
    """The values through a statement PREPAREd with `types`, run in a pipeline."""
    marks = ", ".join(f"${k}::{t}" for k, t in enumerate(types, 1))
    conn.execute(f"PREPARE back({', '.join(types)}) AS SELECT {marks}")
    try:
        _, res = message.run(conn, [("BEGIN", None), ("back", values)])
        message.run(conn, [("COMMIT", None)])
        return list(message.rows(conn, res)[0])
    finally:
        conn.execute("DEALLOCATE back")


def test_a_pipeline_passes_every_value_as_given_apart_from_the_text(conn):
    values = TEXTS + [None, True, False, 0, -5, 2**40, 1.5, datetime.date(2026, 12, 4)]
    types = ["text"] * len(TEXTS) + ["text", "boolean", "boolean", "integer", "integer", "bigint", "float8", "date"]
    assert _run_back(conn, values, types) == values
    conn.execute("SET standard_conforming_strings = off")  # nothing is quoted: the setting cannot matter
    assert _run_back(conn, TEXTS, ["text"] * len(TEXTS)) == TEXTS


def test_a_pipeline_refuses_a_nul_before_sending_anything(conn):
    conn.execute("PREPARE one(text) AS SELECT $1")
    with pytest.raises(InvalidArgument, match="NUL"):
        message.run(conn, [("BEGIN", None), ("one", ["before\x00after"])])
    assert conn.info.transaction_status == conn.info.transaction_status.IDLE  # not even the BEGIN went
    assert conn.pgconn.pipeline_status == 0


def test_a_pipeline_stops_at_its_first_error_which_is_psycopgs_class(conn):
    """As a message does: the statements after the error do not run (the server skips
    the pipeline to its sync), the transaction is left failed for the caller to roll
    back, and the connection is out of pipeline mode, usable at once."""
    conn.execute("CREATE TABLE t (x integer)")
    conn.execute("PREPARE ins(integer) AS INSERT INTO t VALUES ($1)")
    conn.execute("PREPARE div(integer) AS SELECT 1 / $1")
    with pytest.raises(psycopg.errors.DivisionByZero) as e:
        message.run(conn, [("BEGIN", None), ("ins", [1]), ("div", [0]), ("ins", [2]), ("COMMIT", None)])
    assert e.value.sqlstate == "22012"
    assert conn.pgconn.pipeline_status == 0
    assert conn.info.transaction_status == conn.info.transaction_status.INERROR
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    results = message.run(conn, [("BEGIN", None), ("ins", [3]), ("div", [3]), ("COMMIT", None)])
    assert [r.status for r in results] == [psycopg.pq.ExecStatus.COMMAND_OK, psycopg.pq.ExecStatus.COMMAND_OK,
                                           psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK]
    assert conn.execute("SELECT array_agg(x) FROM t").fetchone() == ([3],)


def test_a_statement_the_server_does_not_have_fails_with_its_sqlstate(conn):
    """26000: what the turn's write takes for a DISCARD ALL (ocw/store/postgres/append.py)."""
    with pytest.raises(psycopg.errors.InvalidSqlStatementName) as e:
        message.run(conn, [("BEGIN", None), ("never_prepared", ["x"])])
    assert e.value.sqlstate == "26000" and conn.pgconn.pipeline_status == 0
    conn.rollback()
