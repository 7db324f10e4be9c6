"""One message of several statements, sent with libpq and read with psycopg's loaders.

A turn's write is two messages of the simple query protocol, each carrying several
statements with their values written into the text (ocw/store/postgres/append.py).
psycopg's ClientCursor can send such a message, but around it builds a cursor, parses
the query for placeholders, looks up an adapter per value and checks each statement
for preparing — at 8 writers on 2 cores that was a third of a writer's CPU for a
turn (`ocw.bench.pg`). Here the text is composed by `compose` and sent with
PQsendQuery; psycopg's own C generator waits for the results (Ctrl-C cancels as
it does for a cursor) and its C loaders turn rows into Python values, so a row
reads as it would through a cursor.

Why the quoting is safe: a string becomes `'…'` with each `'` doubled, which is the
whole of SQL's escaping when `standard_conforming_strings` is on — PostgreSQL's
default since 9.1, read from the connection's parameter status for each message, and
a backslash is then an ordinary character. On a connection where it is off, or for a value of any
type other than str, int, bool and None, psycopg quotes (`Transformer.as_literal`,
libpq's PQescapeStringConn). A NUL is refused, not sent: libpq sends the message as
a C string, which a NUL would cut short. The message stops at its first failing
statement; that statement's error is raised as psycopg raises it (its SQLSTATE class).
"""
from __future__ import annotations

import weakref

from ocw.text.errors import InvalidArgument

_TRANSFORMERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # connection -> its Transformer


def _transformer(conn):
    tx = _TRANSFORMERS.get(conn)
    if tx is None:
        from psycopg.adapt import Transformer

        tx = _TRANSFORMERS[conn] = Transformer(conn)
    return tx


def literal(value, tx, conforming: bool = True) -> str:
    """`value` as an SQL literal (see the module doc); `tx` quotes what this does not."""
    if value is None:
        return "NULL"
    kind = type(value)
    if kind is str and conforming:
        if "\x00" in value:
            raise InvalidArgument("a text with a NUL character cannot be stored; remove that character")
        return "'" + value.replace("'", "''") + "'"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    return tx.as_literal(value).decode()


def compose(conn, text: str, args) -> str:
    """`text` with each %s replaced by the next of `args` as a literal (%% is a %)."""
    if not args:
        return text.replace("%%", "%")
    # Read per message, not per connection: a SET may change it (a pooler's server
    # connection is other clients' too), and the server reports every change.
    conforming = conn.pgconn.parameter_status(b"standard_conforming_strings") == b"on"
    tx = _transformer(conn)
    return text % tuple(literal(a, tx, conforming) for a in args)


def send(conn, text: str) -> list:
    """Send `text` (one message, any number of statements) on `conn`; the results of its
    statements in order. The first error the server reports is raised (psycopg's class
    for its SQLSTATE); nothing after it ran."""
    from psycopg import errors, generators, pq

    pgconn = conn.pgconn
    with conn.lock:
        pgconn.send_query(text.encode(conn.info.encoding))
        results = conn.wait(generators.execute(pgconn))
    for res in results:
        if res.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(res, encoding=conn.info.encoding)
    return results


def rows(conn, result) -> list[tuple]:
    """The rows of one result, as a cursor would give them (psycopg's loaders)."""
    tx = _transformer(conn)
    tx.set_pgresult(result)
    return tx.load_rows(0, result.ntuples, tuple)
