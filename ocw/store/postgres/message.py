"""Several statements in one round trip, sent with libpq and read with psycopg's loaders.

A turn's write is one round trip, or two, each carrying several statements
(ocw/store/postgres/append.py). `run` sends prepared statements with their
parameters in one pipeline of the extended protocol; `send` sends one message of
the simple query protocol whose text `compose` wrote the values into (for a
connection behind a transaction pooler, where nothing can be prepared, and for
PREPARE itself). psycopg's ClientCursor can send such a message, and its
pipeline such statements, but around each it builds a cursor, parses the query for
placeholders, looks up an adapter per value and checks each statement for
preparing — at 8 writers on 2 cores that was a third of a writer's CPU for a turn
(`ocw.bench.pg`). Here libpq is called directly; psycopg's own C generators wait
for the results (Ctrl-C cancels as it does for a cursor) and its C loaders turn
rows into Python values, so a row reads as it would through a cursor.

Why the quoting is safe: a string becomes `'…'` with each `'` doubled, which is the
whole of SQL's escaping when `standard_conforming_strings` is on — PostgreSQL's
default since 9.1, read from the connection's parameter status for each message, and
a backslash is then an ordinary character. On a connection where it is off, or for a value of any
type other than str, int, bool and None, psycopg quotes (`Transformer.as_literal`,
libpq's PQescapeStringConn). A NUL is refused, not sent: libpq sends the message as
a C string, which a NUL would cut short. A round trip stops at its first failing
statement; that statement's error is raised as psycopg raises it (its SQLSTATE class).
`run`'s parameters are not quoted at all: they travel apart from the text, in text
format, read by the prepared statement's types; a NUL is refused there too.
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
    from psycopg import generators

    pgconn = conn.pgconn
    with conn.lock:
        pgconn.send_query(text.encode(conn.info.encoding))
        results = conn.wait(generators.execute(pgconn))
    return _checked(results, conn.info.encoding)


def _checked(results: list, encoding: str) -> list:
    """`results`, unless one is an error: the first is raised as psycopg's class for its SQLSTATE."""
    from psycopg import errors, pq

    for res in results:
        if res.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(res, encoding=encoding)
    return results


def param(value, tx, encoding: str) -> bytes | None:
    """`value` as a parameter in text format (a prepared statement's types read it)."""
    if value is None:
        return None
    kind = type(value)
    if kind is str:
        if "\x00" in value:
            raise InvalidArgument("a text with a NUL character cannot be stored; remove that character")
        return value.encode(encoding)
    if kind is bool:
        return b"t" if value else b"f"
    if kind is int:
        return str(value).encode()
    from psycopg.adapt import PyFormat

    return bytes(tx.get_dumper(value, PyFormat.TEXT).dump(value))


def run(conn, statements: list[tuple[str, list | None]]) -> list:
    """Run `statements` in one round trip of the extended protocol (libpq's pipeline
    mode): each `(name, values)` a prepared statement with its parameters, or
    `(text, None)` a statement without any (BEGIN, COMMIT). The results in order. As
    with `send`, the first error is raised and nothing after it ran (the server
    skips the rest of a pipeline up to its sync). Parameters go apart from the text, so
    the server parses no literal (measured: less CPU on both sides than `send`)."""
    pgconn, encoding = conn.pgconn, conn.info.encoding
    tx = _transformer(conn)
    params = [None if values is None else [param(v, tx, encoding) for v in values] for _, values in statements]
    with conn.lock:
        pgconn.enter_pipeline_mode()
        try:
            for (what, values), ps in zip(statements, params):
                if values is None:
                    pgconn.send_query_params(what.encode(), None)
                else:
                    pgconn.send_query_prepared(what.encode(), ps)
            pgconn.pipeline_sync()
            results = conn.wait(_pipeline(pgconn, len(statements)))
        except BaseException:
            _leave_pipeline(conn)
            raise
        pgconn.exit_pipeline_mode()
    return _checked(results, encoding)


def _pipeline(pgconn, count: int):
    """Flush the pipeline, then read its `count` results and its sync (psycopg's C generators)."""
    from psycopg import generators

    yield from generators.send(pgconn)
    results = []
    for _ in range(count):
        got = yield from generators.fetch_many(pgconn)
        results.append(got[0])
    yield from generators.fetch_many(pgconn)  # the sync
    return results


def _leave_pipeline(conn) -> None:
    """After a failure inside `run`: out of pipeline mode, or closed if that cannot be
    done (results still pending: the connection's state is unknown; the pool drops it)."""
    try:
        if conn.pgconn.pipeline_status:
            conn.pgconn.exit_pipeline_mode()
    except Exception:
        conn.close()


def rows(conn, result) -> list[tuple]:
    """The rows of one result, as a cursor would give them (psycopg's loaders)."""
    tx = _transformer(conn)
    tx.set_pgresult(result)
    return tx.load_rows(0, result.ntuples, tuple)
