"""A turn's write on PostgreSQL: one transaction, two round trips.

A turn appends its messages under HEAD, moves HEAD and stores the provider's
usage sample in the session row — one transaction. Statement by statement that
is BEGIN, the session row FOR UPDATE, HEAD's node, the inserts, the row update
and COMMIT: 6–8 round trips (issue 28). Here the same transaction runs in
psycopg's pipeline mode in exactly two:

1. BEGIN, the session row locked FOR UPDATE, and HEAD's node, sent together.
   The caller's `change(row, parent)` needs both before anything is written.
2. One multi-row INSERT … RETURNING, the row UPDATE … RETURNING and COMMIT,
   sent together; their results arrive with the commit's. Then, in the same
   round trip, the NOTIFY for listeners, as a statement of its own after the
   COMMIT (schema p004: the locking statement sets `ocw.notify_after_commit` for
   this transaction, and the trigger leaves the notification to it). Inside the
   write it would hold PostgreSQL's cluster-wide notify lock through the commit's
   flush, so no two writers' commits could share one; after it, it is a
   transaction that writes nothing and waits for no flush. If anything before it
   fails, the pipeline skips it: no commit, no notification.

Why the invariants still hold: the lock is taken by the first statement, before
anything is decided, exactly as in the statement-by-statement form, so a second
writer to the session waits there and reads the row (and HEAD) this one
committed. The inserted rows get their `seq` in VALUES order (identity values
are drawn row by row in that order), and RETURNING is matched to them by id, not
by position. The depth trigger sees the statement's earlier rows (a BEFORE ROW
trigger sees the rows its own statement inserted before), so a chain of several
messages passes it. Row security and the NOTIFY trigger run as for any
statement: nothing here bypasses them. An error at any point (a lock wait that
ran out, a constraint, `change` raising) rolls the whole transaction back.
"""
from __future__ import annotations

import json
from typing import Callable

from ocw.context.graph import Node
from ocw.store.chain import chain_rows
from ocw.store.postgres.schema import NOTIFY_AFTER, NOTIFY_CHANNEL
from ocw.text.errors import StoreError

NODE_COLUMNS = ("id, session_id, parent_id, role, name, content, tokens, encoding, depth, cum_tokens, epoch,"
                " cover_count, supersedes")
HEAD_COLUMNS = ("h.id, h.seq, h.parent_id, h.role, h.name, coalesce(c.tokens, h.tokens), coalesce(c.depth, h.depth),"
                " coalesce(c.cum_tokens, h.cum_tokens), coalesce(c.epoch, h.epoch), h.cover_count, h.supersedes,"
                " h.created_at")


def lock_sql(columns) -> str:
    """The session row, locked; and this transaction's promise to notify after its
    commit (schema p004) — set by the statement that locks, so it costs no statement
    of its own; its value, the last column, is not read."""
    return (f"SELECT {', '.join(columns)}, set_config('{NOTIFY_AFTER}', 'on', true)"
            " FROM sessions WHERE id = %s FOR UPDATE")


NOTIFY_SQL = f"SELECT pg_notify('{NOTIFY_CHANNEL}', '')"


def head_sql() -> str:
    """HEAD's node of the session, with the counts of the row's epoch. Sent right after
    the lock, in the same round trip: it runs once the lock is held, with a snapshot
    of its own (READ COMMITTED), so it reads the HEAD the previous writer committed.
    (Joined into the locking statement it would not: a row re-read after a lock wait
    is re-checked against the joined rows of the statement's older snapshot.)
    HEAD is joined by its id alone — the primary key — because the schema holds it to
    be a node of that session (p003); a join on (session_id, id) let a plan made while
    `nodes` was small read the whole session to find it."""
    return (f"SELECT {HEAD_COLUMNS} FROM sessions s JOIN nodes h ON h.id = s.head_id"
            " LEFT JOIN node_counts c ON c.node_id = h.id AND c.epoch = s.count_epoch WHERE s.id = %s")


def insert_sql(rows: int) -> str:
    """One INSERT of `rows` node rows, returning each one's (id, seq, created_at)."""
    one = "(" + ", ".join(["%s"] * 13) + ")"
    return f"INSERT INTO nodes ({NODE_COLUMNS}) VALUES {', '.join([one] * rows)} RETURNING id, seq, created_at"


def append(store, conn, sid: str, nodes: list[dict],
           change: Callable[[dict, Node | None], dict | None] | None) -> tuple[dict, list[Node]]:
    """Append `nodes` as a chain under HEAD (as the locked row has it) and move HEAD to
    the last, with `change(row, parent)`'s columns, on `conn` (an autocommit
    connection from the pool). Two round trips; see the module doc. `store` is the
    PostgresStore: its row and node readers and its row update are used as they are."""
    SESSION_COLUMNS, _node, _session = store.SESSION_COLUMNS, store.node_of, store.row_of
    try:
        with conn.pipeline():
            # BEGIN is queued, not sent on its own: psycopg's transaction() would wait
            # for it (one more round trip) and its exit for COMMIT apart from the writes.
            begin, lock, head, ins, upd, commit = (conn.cursor() for _ in range(6))
            begin.execute("BEGIN")
            lock.execute(lock_sql(SESSION_COLUMNS), [sid])
            head.execute(head_sql(), [sid])
            r = lock.fetchone()  # round trip 1: BEGIN, the locked row and HEAD's node
            if r is None:
                raise StoreError(f"session {sid} vanished from {store.describe()}")
            row = _session(r[:-1])
            h = head.fetchone()
            parent = _node(h) if h is not None else None
            written, fields = chain_rows(row, parent, nodes, change)
            args = [v for w, n in zip(written, nodes) for v in (
                w.id, sid, w.parent_id, w.role, w.name, json.dumps(n["content"], ensure_ascii=False), w.tokens,
                n.get("encoding"), w.depth, w.cum, w.epoch, None, None)]
            if nodes:
                ins.execute(insert_sql(len(nodes)), args)
            store._write_row(upd, sid, fields, fetch=False)
            commit.execute("COMMIT")
            commit.execute(NOTIFY_SQL)  # its own transaction, after the commit (see the module doc)
        # Leaving the pipeline syncs it: round trip 2, the inserts, the update and COMMIT together.
        got = {nid: (seq, created_at) for nid, seq, created_at in ins.fetchall()} if nodes else {}
        new_row = _session(upd.fetchone())
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
