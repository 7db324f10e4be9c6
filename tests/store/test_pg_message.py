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
