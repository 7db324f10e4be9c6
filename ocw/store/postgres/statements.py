"""How a turn's statements go to PostgreSQL: prepared once, a round trip each batch.

A turn's write (ocw/store/postgres/append.py, guess.py) sends several statements in
one round trip. What they share lives here: the node columns and the session row's
SET items every write of the row is made of, the `TELL_SQL` a turn tells watchers
with, and how a batch is sent.

How a round trip carries its statements: each is PREPAREd, by a statement of its
own, the first time a connection needs it (a name per statement text, `call`),
and the round trip is one pipeline of the extended protocol — the prepared
statements with their parameters apart from the text, then a sync — written at
once and read at once (ocw/store/postgres/message.py `run`). Earlier forms, each
measured with 8 writers on 2 cores, where a turn is CPU-bound: psycopg's own
pipeline cost the client a socket write and a wait per statement (about 0.1 ms a
turn more); one message of the simple query protocol with the values written in
as literals (`EXECUTE name('…', …)`) had the server parse every literal — the
pipeline takes about 9 % off the server's CPU for a turn's write (0.39 → 0.36 ms,
1 writer), the client's unchanged. PREPARE is not undone by a
rollback, so what a connection has prepared is known exactly; a connection that
lost them (a `DISCARD ALL` by someone) forgets them on the error that says so, and
the turn runs once more, preparing them again. Behind a transaction pooler (PgBouncer), where each
transaction may run on another server connection, nothing is prepared: the pool
is `plain` (ocw/store/postgres/conn.py) and each round trip is one message of
the simple query protocol, the statements themselves with their values written
in as literals (`send`).
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import weakref
from typing import Callable

from ocw.store.postgres import message
from ocw.store.postgres.conn import lock_ms

NODE_COLUMNS = ("id, session_id, parent_id, role, name, content, tokens, encoding, depth, cum_tokens, epoch,"
                " cover_count, supersedes")

# Tell the kernels watching the session $1 ($2: this kernel's own listener, not told) that
# it changed: a NOTIFY at commit to each that has heard all it was told before (schema p008).
TELL_SQL = "ocw_tell($1::text, $2::integer)"


def row_sets(fields: dict, writable, mark: Callable[[int], str]) -> tuple[list[str], list]:
    """The session row's SET items for `fields` — rev bumped and updated_at set always,
    metadata as JSON — and their values in order; `mark(k)` is the k-th value's
    placeholder. Every write of the row is made of these (a turn's UPDATE, append.py and
    guess.py, and the store's `_write_row`). A column not in `writable` is refused before anything is
    written: a programming error."""
    bad = set(fields) - writable
    if bad:
        raise ValueError(f"not a writable session column: {', '.join(sorted(bad))}")
    sets, args = ["rev = rev + 1", "updated_at = localtimestamp"], []
    for k, v in fields.items():
        args.append(json.dumps(v) if k == "metadata" else v)
        sets.append(f"{k} = {mark(len(args))}" + ("::json" if k == "metadata" else ""))
    return sets, args


def update_sql(columns, fields: dict, writable) -> tuple[str, list]:
    """The session row's UPDATE … RETURNING `columns` for `fields`, $1 the session id
    (added by the caller), and the values of $2 … in order."""
    sets, args = row_sets(fields, writable, lambda k: f"${k + 1}")
    return f"UPDATE sessions SET {', '.join(sets)} WHERE id = $1 RETURNING {', '.join(columns)}", args


@functools.lru_cache(maxsize=8)
def read_back(columns: tuple) -> tuple:
    """The session columns a turn's UPDATE reads back: all but metadata (the turn knows what it
    wrote; append.py `_append`)."""
    return tuple(c for c in columns if c != "metadata")


def meta_text(fields: dict, values: list) -> str | None:
    """The JSON text of the metadata an UPDATE of `fields` writes (`row_sets`' values are in
    `fields`' order), if it writes any."""
    return values[list(fields).index("metadata")] if "metadata" in fields else None


NAMES: dict[str, str] = {}  # statement text -> its name, the same on every connection
PREPARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # connection -> names prepared on it


def call(conn, sql: str, args: list, plain: bool) -> tuple[str, list]:
    """`sql` with `args` ($1 … $n) as one statement of a round trip (`send`).
    Prepared: `(name, args)`, PREPAREd on this connection first if it has not
    been (a statement of its own, once per connection and statement; the name is a digest
    of the text, so two threads naming one statement agree). `plain`: the statement
    itself, its $k as %s, and the values in the order they stand (a transaction pooler
    gives each transaction whichever server connection is free, so a PREPARE made on
    one is not on the next: see append.py `append`)."""
    if plain:
        text, order = plain_text(sql)
        return text, [args[k - 1] for k in order]
    name = NAMES.get(sql)
    if name is None:
        name = NAMES[sql] = "ocw_" + hashlib.blake2s(sql.encode(), digest_size=10).hexdigest()
    done = PREPARED.get(conn)
    if done is None:
        done = PREPARED[conn] = set()
    if name not in done:
        message.send(conn, f"PREPARE {name} AS {sql}")
        done.add(name)
    return name, args


def begin(lock_timeout: float, plain: bool) -> str:
    """A turn's BEGIN. Behind a pooler (`plain`) a connection's own SET may be on another
    server connection: the lock wait's bound goes with the transaction itself."""
    return f"BEGIN; SET LOCAL lock_timeout = {lock_ms(lock_timeout)}" if plain else "BEGIN"


def send(conn, statements: list[tuple[str, list | None]], plain: bool) -> list:
    """One round trip for `statements` (from `call`; `(text, None)` for one without
    values) and their results in order: prepared, in one pipeline (message.run);
    plain, as one message of the simple query protocol with the values written in."""
    if not plain:
        return message.run(conn, statements)
    return message.send(conn, message.compose(conn, "; ".join(t for t, _ in statements),
                                              [v for _, values in statements for v in values or ()]))


_PLAIN: dict[str, tuple[str, list[int]]] = {}
_PARAM = re.compile(r"\$(\d+)")


def plain_text(sql: str) -> tuple[str, list[int]]:
    """`sql` with each $k as %s (a literal % doubled) and the k of each, in order."""
    got = _PLAIN.get(sql)
    if got is None:
        escaped = sql.replace("%", "%%")
        got = _PLAIN[sql] = (_PARAM.sub("%s", escaped), [int(k) for k in _PARAM.findall(escaped)])
    return got


LOST_STATEMENT = "26000"  # invalid_sql_statement_name: a name the server does not have
DUPLICATE_STATEMENT = "42P05"  # duplicate_prepared_statement: a PREPARE of a name the server has


def roll_back(conn) -> None:
    """After any failure: end the transaction if it is still open. Should that fail
    too, the pool sees the connection is not idle and drops it (ocw/store/postgres/conn.py)."""
    try:
        if not conn.closed and conn.info.transaction_status != conn.info.transaction_status.IDLE:
            conn.rollback()
    except Exception:
        pass
