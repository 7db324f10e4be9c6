"""A turn's write on PostgreSQL: one transaction, one round trip — two when the row is read first.

A turn appends its messages under HEAD, moves HEAD and stores the provider's
usage sample in the session row — one transaction. Statement by statement that
is BEGIN, the session row FOR UPDATE, HEAD's node, the inserts, the row update
and COMMIT: 6–8 round trips (issue 28). Here the same statements go in at most
two round trips, each carrying several statements (statements.py says how):

1. `BEGIN; lock; head` — the session row locked FOR UPDATE, then HEAD's node.
   The caller's `change(row, parent)` needs both before anything is written.
   HEAD's statement also tells the kernels watching the session that it changed
   (schema p008's `ocw_tell`: a NOTIFY, sent if and only if this transaction
   commits, to each watcher that has read all it was told before). The locking
   statement sets `ocw.notify_after_commit` for this transaction, and the trigger
   leaves the notification to it (schema p004).
2. `insert; update; COMMIT` — one multi-row INSERT … RETURNING, the row
   UPDATE … RETURNING and the COMMIT.

A store that wrote the session's last turn itself, and has heard of no other
write since, knows the row and HEAD already: its next turn is computed on them
and sent as one round trip (ocw/store/postgres/guess.py), the lock, INSERT and
UPDATE as above and the NOTIFY in the UPDATE. That is almost every turn: one
kernel on its session. (`ocw.bench.pg`, 8 writers, 300 turns each, three runs
alternately with the two-round-trip code: each on a session of its own
0.55–0.67× → 0.66–0.71× the raw transaction floor; two of them on one session
0.50–0.55× → 0.63–0.78× — the pair's turns no longer hold the lock through a
client's wake-up; a writer's CPU a turn 0.60–0.64 → 0.49–0.51 ms. 1 writer,
1,000 turns: CPU 0.38–0.45 → 0.29–0.32 ms, wall 0.92–1.00 → 0.77–0.85 ms.)

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

Why the invariants still hold: the lock is taken by the first statement after
BEGIN, before anything is decided, and every statement of a message runs with a
snapshot of its own (READ COMMITTED), so a second writer to the session waits at
the lock and then reads the row and HEAD this one committed. The server stops a
round trip at its first error (a message, or a pipeline up to its sync): nothing
after it runs — not the COMMIT — and the transaction is rolled back (`roll_back`),
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

from typing import Callable

from ocw.context.graph import Node
from ocw.store.chain import chain_rows, content_text
from ocw.store.postgres import guess as on_guess
from ocw.store.postgres import message
from ocw.store.postgres import statements as st
from ocw.store.postgres.watch_schema import NOTIFY_AFTER
from ocw.text.errors import StoreError

HEAD_COLUMNS = ("h.id, h.seq, h.parent_id, h.role, h.name, coalesce(c.tokens, h.tokens), coalesce(c.depth, h.depth),"
                " coalesce(c.cum_tokens, h.cum_tokens), coalesce(c.epoch, h.epoch), h.cover_count, h.supersedes,"
                " h.created_at")


def lock_sql(columns) -> str:
    """The session row ($1), locked; and this transaction's promise to tell the session's
    watchers itself (schema p004; statements.py `TELL_SQL`) — set by the statement that
    locks, so it costs no statement of its own; its value, the last column, is not read."""
    return (f"SELECT {', '.join(columns)}, set_config('{NOTIFY_AFTER}', 'on', true)"
            " FROM sessions WHERE id = $1 FOR UPDATE")


def head_sql() -> str:
    """The session $1's watchers told (statements.py `TELL_SQL`; whether any was, not read), then HEAD's
    node with the counts of the row's epoch (NULLs: no HEAD yet). Sent right after
    the lock, in the same message: it runs once the lock is held, with a snapshot
    of its own (READ COMMITTED), so it reads the HEAD the previous writer committed
    and every watch recorded before the lock (see the module doc).
    (Joined into the locking statement it would not: a row re-read after a lock wait
    is re-checked against the joined rows of the statement's older snapshot.)
    HEAD is joined by its id alone — the primary key — because the schema holds it to
    be a node of that session (p003); a join on (session_id, id) let a plan made while
    `nodes` was small read the whole session to find it."""
    return (f"SELECT {st.TELL_SQL}, {HEAD_COLUMNS} FROM sessions s LEFT JOIN nodes h ON h.id = s.head_id"
            " LEFT JOIN node_counts c ON c.node_id = h.id AND c.epoch = s.count_epoch WHERE s.id = $1")


def insert_sql(rows: int) -> str:
    """One INSERT of `rows` node rows ($1 … $13·rows), returning each one's (id, seq, created_at)."""
    values = ", ".join("(" + ", ".join(f"${r * 13 + k}" for k in range(1, 14)) + ")" for r in range(rows))
    return f"INSERT INTO nodes ({st.NODE_COLUMNS}) VALUES {values} RETURNING id, seq, created_at"


def append(store, conn, sid: str, nodes: list[dict],
           change: Callable[[dict, Node | None], dict | None] | None, watcher: int) -> tuple[dict, list[Node]]:
    """Append `nodes` as a chain under HEAD (as the locked row has it) and move HEAD to
    the last, with `change(row, parent)`'s columns, on `conn` (an autocommit
    connection from the pool). One round trip on the row this store wrote last
    (guess.py), else two; see the module doc. `store` is the
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
            guess = store._guesses.get(sid) if nodes else None
            if guess is not None:
                return on_guess.append(store, conn, sid, nodes, change, watcher, plain, guess)
            return _append(store, conn, sid, nodes, change, watcher, plain)
        except Exception as e:
            state = getattr(e, "sqlstate", None)
            if plain or state not in (st.LOST_STATEMENT, st.DUPLICATE_STATEMENT):
                raise
        st.PREPARED.pop(conn, None)
        if attempt or state == st.DUPLICATE_STATEMENT:
            store._pool.go_plain(conn)
    raise AssertionError("unreachable: the third attempt is plain")  # pragma: no cover


def _append(store, conn, sid, nodes, change, watcher, plain) -> tuple[dict, list[Node]]:
    SESSION_COLUMNS, _node, _session = store.SESSION_COLUMNS, store.node_of, store.row_of
    try:
        # Round trip 1: BEGIN, the locked row and HEAD's node (one message, three results).
        *_, locked, at_head = st.send(conn, [(st.begin(store._pool.lock_timeout, plain), None),
                                             st.call(conn, lock_sql(SESSION_COLUMNS), [sid], plain),
                                             st.call(conn, head_sql(), [sid, watcher], plain)], plain)
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
        returned = st.read_back(SESSION_COLUMNS) if isinstance(meta, dict) else SESSION_COLUMNS
        upd, values = st.update_sql(returned, fields, store.WRITABLE)
        calls = [st.call(conn, upd, [sid, *values], plain), ("COMMIT", None)]
        if nodes:
            calls.insert(0, st.call(conn, insert_sql(len(nodes)), [v for w, n in zip(written, nodes) for v in (
                w.id, sid, w.parent_id, w.role, w.name, content_text(n), w.tokens,
                n.get("encoding"), w.depth, w.cum, w.epoch, None, None)], plain))
        # Round trip 2: the inserts, the update, COMMIT (and with it any notification).
        results = st.send(conn, calls, plain)
        got = {nid: (seq, created_at) for nid, seq, created_at in message.rows(conn, results[0])} if nodes else {}
        back = dict(zip(returned, message.rows(conn, results[1 if nodes else 0])[0]))
        back.setdefault("metadata", meta)
        new_row = _session(tuple(back[c] for c in SESSION_COLUMNS))
    except BaseException:
        st.roll_back(conn)
        raise
    for node in written:
        node.seq, node.created_at = got[node.id]
    store._guesses.after_turn(sid, new_row, written[-1] if written else parent, st.meta_text(fields, values))
    return new_row, written
