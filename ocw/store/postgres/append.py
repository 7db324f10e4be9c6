"""A turn's write on PostgreSQL: one transaction, two round trips.

A turn appends its messages under HEAD, moves HEAD and stores the provider's
usage sample in the session row — one transaction. Statement by statement that
is BEGIN, the session row FOR UPDATE, HEAD's node, the inserts, the row update
and COMMIT: 6–8 round trips (issue 28). Here the same statements go in two
round trips, each carrying several statements:

1. `BEGIN; lock; head` — the session row locked FOR UPDATE, then HEAD's node.
   The caller's `change(row, parent)` needs both before anything is written.
   HEAD's statement also tells the kernels watching the session that it changed
   (schema p008's `ocw_tell`: a NOTIFY, sent if and only if this transaction
   commits, to each watcher that has read all it was told before). The locking
   statement sets `ocw.notify_after_commit` for this transaction, and the trigger
   leaves the notification to it (schema p004).
2. `insert; update; COMMIT` — one multi-row INSERT … RETURNING, the row
   UPDATE … RETURNING and the COMMIT.

A turn that tells someone takes PostgreSQL's cluster-wide notify lock at its commit
and holds it through the flush; at a person's pace that is every turn of a shared
session, and no commits wait on each other; while two kernels write one session
flat out it is about one turn in a listener's burst (ocw/store/postgres/listen.py
`SETTLE`). An unwatched session's turn — almost every turn — notifies no one.
(Before p008 every turn of a watched session sent its NOTIFY after the commit, a
transaction of its own. In `ocw.bench.pg`'s 8 writers, two of them on one session,
300 turns each, the pair's listeners now receive 6–8 notifications where they
received about 300, and the run's turns/s rose 2–7 %, its p99 fell 10–15 %.)

Why telling before the commit misses no watcher: a kernel records its watch with
an INSERT whose foreign key to `sessions` takes the session row FOR KEY SHARE,
which waits for this turn's FOR UPDATE lock — its record commits after this
turn has, and its re-read of the session, after that, sees this turn's rows. A
watch recorded before the lock was taken has committed before HEAD's statement
runs (after the lock, with a snapshot of its own): `ocw_tell` finds it. Why a
watcher told already and not told again still sees the turn: see p008
(ocw/store/postgres/watch_schema.py).

How a round trip carries its statements: each is PREPAREd, by a statement of its
own, the first time a connection needs it (a name per statement text, `_call`),
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
in as literals (`_send`).

Why the invariants still hold: the lock is taken by the first statement after
BEGIN, before anything is decided, and every statement of a message runs with a
snapshot of its own (READ COMMITTED), so a second writer to the session waits at
the lock and then reads the row and HEAD this one committed. The server stops a
round trip at its first error (a message, or a pipeline up to its sync): nothing
after it runs — not the COMMIT — and the transaction is rolled back (`_roll_back`),
its notifications with it (a COMMIT that fails, a deferred check, likewise sends none). The inserted rows get their `seq` in
VALUES order (identity values are drawn row by row in that order), and RETURNING
is matched to them by id, not by position. The depth trigger sees the
statement's earlier rows (a BEFORE ROW trigger sees the rows its own statement
inserted before), so a chain of several messages passes it. Row security and the
triggers run as for any statement: nothing here bypasses them. An error at any
point (a lock wait that ran out, a constraint, `change` raising) rolls the whole
transaction back.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import weakref
from typing import Callable

from ocw.context.graph import Node
from ocw.store.chain import chain_rows, content_text
from ocw.store.postgres import message
from ocw.store.postgres.conn import lock_ms
from ocw.store.postgres.watch_schema import NOTIFY_AFTER
from ocw.text.errors import StoreError

NODE_COLUMNS = ("id, session_id, parent_id, role, name, content, tokens, encoding, depth, cum_tokens, epoch,"
                " cover_count, supersedes")
HEAD_COLUMNS = ("h.id, h.seq, h.parent_id, h.role, h.name, coalesce(c.tokens, h.tokens), coalesce(c.depth, h.depth),"
                " coalesce(c.cum_tokens, h.cum_tokens), coalesce(c.epoch, h.epoch), h.cover_count, h.supersedes,"
                " h.created_at")


def lock_sql(columns) -> str:
    """The session row ($1), locked; and this transaction's promise to tell the session's
    watchers itself (schema p004; `TELL_SQL`) — set by the statement that locks, so it costs no statement
    of its own; its value, the last column, is not read."""
    return (f"SELECT {', '.join(columns)}, set_config('{NOTIFY_AFTER}', 'on', true)"
            " FROM sessions WHERE id = $1 FOR UPDATE")


# Tell the kernels watching the session $1 ($2: this kernel's own listener, not told) that
# it changed: a NOTIFY at commit to each that has heard all it was told before (schema p008).
TELL_SQL = "ocw_tell($1::text, $2::integer)"


def head_sql() -> str:
    """The session $1's watchers told (`TELL_SQL`; whether any was, not read), then HEAD's
    node with the counts of the row's epoch (NULLs: no HEAD yet). Sent right after
    the lock, in the same message: it runs once the lock is held, with a snapshot
    of its own (READ COMMITTED), so it reads the HEAD the previous writer committed
    and every watch recorded before the lock (see the module doc).
    (Joined into the locking statement it would not: a row re-read after a lock wait
    is re-checked against the joined rows of the statement's older snapshot.)
    HEAD is joined by its id alone — the primary key — because the schema holds it to
    be a node of that session (p003); a join on (session_id, id) let a plan made while
    `nodes` was small read the whole session to find it."""
    return (f"SELECT {TELL_SQL}, {HEAD_COLUMNS} FROM sessions s LEFT JOIN nodes h ON h.id = s.head_id"
            " LEFT JOIN node_counts c ON c.node_id = h.id AND c.epoch = s.count_epoch WHERE s.id = $1")


def insert_sql(rows: int) -> str:
    """One INSERT of `rows` node rows ($1 … $13·rows), returning each one's (id, seq, created_at)."""
    values = ", ".join("(" + ", ".join(f"${r * 13 + k}" for k in range(1, 14)) + ")" for r in range(rows))
    return f"INSERT INTO nodes ({NODE_COLUMNS}) VALUES {values} RETURNING id, seq, created_at"


def row_sets(fields: dict, writable, mark: Callable[[int], str]) -> tuple[list[str], list]:
    """The session row's SET items for `fields` — rev bumped and updated_at set always,
    metadata as JSON — and their values in order; `mark(k)` is the k-th value's
    placeholder. Every write of the row is made of these (this module's UPDATE and the
    store's `_write_row`). A column not in `writable` is refused before anything is
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
def _read_back(columns: tuple) -> tuple:
    """The session columns an append's UPDATE reads back: all but metadata (see `_append`)."""
    return tuple(c for c in columns if c != "metadata")


_NAMES: dict[str, str] = {}  # statement text -> its name, the same on every connection
_PREPARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # connection -> names prepared on it


def _call(conn, sql: str, args: list, plain: bool) -> tuple[str, list]:
    """`sql` with `args` ($1 … $n) as one statement of a round trip (`_send`).
    Prepared: `(name, args)`, PREPAREd on this connection first if it has not
    been (a statement of its own, once per connection and statement; the name is a digest
    of the text, so two threads naming one statement agree). `plain`: the statement
    itself, its $k as %s, and the values in the order they stand (a transaction pooler
    gives each transaction whichever server connection is free, so a PREPARE made on
    one is not on the next: see `append`)."""
    if plain:
        text, order = _plain(sql)
        return text, [args[k - 1] for k in order]
    name = _NAMES.get(sql)
    if name is None:
        name = _NAMES[sql] = "ocw_" + hashlib.blake2s(sql.encode(), digest_size=10).hexdigest()
    done = _PREPARED.get(conn)
    if done is None:
        done = _PREPARED[conn] = set()
    if name not in done:
        message.send(conn, f"PREPARE {name} AS {sql}")
        done.add(name)
    return name, args


def _send(conn, statements: list[tuple[str, list | None]], plain: bool) -> list:
    """One round trip for `statements` (from `_call`; `(text, None)` for one without
    values) and their results in order: prepared, in one pipeline (message.run);
    plain, as one message of the simple query protocol with the values written in."""
    if not plain:
        return message.run(conn, statements)
    return message.send(conn, message.compose(conn, "; ".join(t for t, _ in statements),
                                              [v for _, values in statements for v in values or ()]))


_PLAIN: dict[str, tuple[str, list[int]]] = {}
_PARAM = re.compile(r"\$(\d+)")


def _plain(sql: str) -> tuple[str, list[int]]:
    """`sql` with each $k as %s (a literal % doubled) and the k of each, in order."""
    got = _PLAIN.get(sql)
    if got is None:
        escaped = sql.replace("%", "%%")
        got = _PLAIN[sql] = (_PARAM.sub("%s", escaped), [int(k) for k in _PARAM.findall(escaped)])
    return got


def append(store, conn, sid: str, nodes: list[dict],
           change: Callable[[dict, Node | None], dict | None] | None, watcher: int) -> tuple[dict, list[Node]]:
    """Append `nodes` as a chain under HEAD (as the locked row has it) and move HEAD to
    the last, with `change(row, parent)`'s columns, on `conn` (an autocommit
    connection from the pool). Two round trips; see the module doc. `store` is the
    PostgresStore: its row and node readers, its writable columns and its pool's `plain`
    flag are used as they are; `watcher` the server process of its own listener (it is
    not told of its own kernel's turn).
    A prepared statement the server does not have (26000), or has already (42P05), fails
    the turn before anything is written (the error stopped the transaction, which was
    rolled back), and the turn runs again: the first time the connection's statements
    are forgotten and prepared again (someone's DISCARD ALL); a second time, or a
    statement there that this connection never prepared, means a transaction pooler
    (PgBouncer) hands each transaction another server connection — the pool goes
    `plain` for good (no server-side prepared statements, psycopg's own included) and
    the turn runs once more that way."""
    for attempt in range(3):
        plain = store._pool.plain
        try:
            return _append(store, conn, sid, nodes, change, watcher, plain)
        except Exception as e:
            state = getattr(e, "sqlstate", None)
            if plain or state not in (LOST_STATEMENT, DUPLICATE_STATEMENT):
                raise
        _PREPARED.pop(conn, None)
        if attempt or state == DUPLICATE_STATEMENT:
            store._pool.go_plain(conn)
    raise AssertionError("unreachable: the third attempt is plain")  # pragma: no cover


LOST_STATEMENT = "26000"  # invalid_sql_statement_name: a name the server does not have
DUPLICATE_STATEMENT = "42P05"  # duplicate_prepared_statement: a PREPARE of a name the server has


def _append(store, conn, sid, nodes, change, watcher, plain) -> tuple[dict, list[Node]]:
    SESSION_COLUMNS, _node, _session = store.SESSION_COLUMNS, store.node_of, store.row_of
    try:
        # Round trip 1: BEGIN, the locked row and HEAD's node (one message, three results).
        # Behind a pooler a connection's own SET may be on another server connection: the
        # lock wait's bound goes with the transaction itself.
        begin = f"BEGIN; SET LOCAL lock_timeout = {lock_ms(store._pool.lock_timeout)}" if plain else "BEGIN"
        *_, locked, at_head = _send(conn, [(begin, None), _call(conn, lock_sql(SESSION_COLUMNS), [sid], plain),
                                           _call(conn, head_sql(), [sid, watcher], plain)], plain)
        r = message.rows(conn, locked)
        if not r:
            raise StoreError(f"session {sid} vanished from {store.describe()}")
        row = _session(r[0][:-1])
        _told, *h = message.rows(conn, at_head)[0]
        parent = _node(h) if h[0] is not None else None
        written, fields = chain_rows(row, parent, nodes, change)
        # The row's metadata is what this UPDATE writes, or what the lock read: not read back
        # (a JSON document parsed again for nothing; the json type keeps the text it is given).
        meta = fields.get("metadata", row["metadata"])
        returned = _read_back(SESSION_COLUMNS) if isinstance(meta, dict) else SESSION_COLUMNS
        upd, values = update_sql(returned, fields, store.WRITABLE)
        calls = [_call(conn, upd, [sid, *values], plain), ("COMMIT", None)]
        if nodes:
            calls.insert(0, _call(conn, insert_sql(len(nodes)), [v for w, n in zip(written, nodes) for v in (
                w.id, sid, w.parent_id, w.role, w.name, content_text(n), w.tokens,
                n.get("encoding"), w.depth, w.cum, w.epoch, None, None)], plain))
        # Round trip 2: the inserts, the update, COMMIT (and with it any notification).
        results = _send(conn, calls, plain)
        got = {nid: (seq, created_at) for nid, seq, created_at in message.rows(conn, results[0])} if nodes else {}
        back = dict(zip(returned, message.rows(conn, results[1 if nodes else 0])[0]))
        back.setdefault("metadata", meta)
        new_row = _session(tuple(back[c] for c in SESSION_COLUMNS))
    except BaseException:
        _roll_back(conn)
        raise
    for node in written:
        node.seq, node.created_at = got[node.id]
    return new_row, written


def _roll_back(conn) -> None:
    """After any failure: end the transaction if it is still open. Should that fail
    too, the pool sees the connection is not idle and drops it (ocw/store/postgres/conn.py)."""
    try:
        if not conn.closed and conn.info.transaction_status != conn.info.transaction_status.IDLE:
            conn.rollback()
    except Exception:
        pass
