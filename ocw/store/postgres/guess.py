"""What a kernel expects its session's row and HEAD to be at its next turn.

A turn's write needs the session row as it is under the session's lock: the
caller's `change(row, parent)` (the usage sample and its calibration) is decided
on it. Reading it first makes a turn two round trips (ocw/store/postgres/append.py).
But the kernel that wrote a session's last turn knows the row already: its
UPDATE returned it. Its next turn computes `change` on that guess before
anything is sent and sends the whole turn in one round trip:
- the chain goes under HEAD as the INSERT reads it after the lock, its depth,
  total and epoch computed there (chain.py's rule, in SQL): a chain, never a fork,
  whoever wrote meanwhile;
- the UPDATE moves HEAD to the chain's end and writes `change`'s columns only if
  the row is still at the state guessed. If another kernel wrote meanwhile, the
  turn lands without them: its usage sample was measured on a context without
  that kernel's turn, so as HEAD's sample it would undercount it — and a sample
  lower than the last stored one reads as a compaction (DESIGN.md §5). The next
  turn's sample is exact.

Why the guard is exact — (rev, updated_at) names one state of the row:
- every write of the row bumps `rev` and sets `updated_at` (statements.py `row_sets`,
  the only way ocw writes it); so does a recount (`set_counts` writes the row in the
  transaction that writes `node_counts`);
- an undo (`undo_sessions`) puts back an earlier state whole, rev and updated_at
  with it: the same pair is the same row, so a guess of it is right;
- two different states with one rev (an undo, then another write from there) differ
  in `updated_at`: the start of a different transaction.

The round trip is BEGIN; the lock (FOR UPDATE, first, as in append.py, so a watch
being recorded waits for this turn); the INSERT; the UPDATE, which tells the
session's watchers in its RETURNING — after the lock, each statement with a
snapshot of its own, so append.py's argument that no watcher is missed holds as it
is; COMMIT. The rows keep their checks: the depth trigger sees the chain's parent,
the guard trigger sees the new HEAD already inserted.

A guess is dropped whenever this store learns the row moved otherwise — its own
other writes (`_tx`: a compaction, a rename), another kernel's write heard
(listen.py), a read of the row at another state (a `%%chat` turn's sync) — so a turn
after those reads the row
first (two round trips) and its `change` is decided on the row as it is.
"""
from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass

from ocw.context.graph import Node
from ocw.store.chain import content_text
from ocw.store.postgres import message
from ocw.store.postgres import statements as st
from ocw.store.postgres.watch_schema import NOTIFY_AFTER
from ocw.text.errors import StoreError


@dataclass(frozen=True)
class Guess:
    row: dict  # the session row as a read would give it (metadata parsed from its JSON)
    parent: Node | None  # HEAD's node as this store wrote it


def as_read(row: dict, meta_text: str | None = None) -> dict:
    """`row` as a read of it would give it: its metadata through JSON, as stored (a
    tuple comes back a list), in an object of its own — parsed from `meta_text`, the
    text the turn wrote, if it wrote one."""
    return {**row, "metadata": json.loads(meta_text if meta_text is not None else json.dumps(row["metadata"]))}


class Guesses:
    """Per session: the row and HEAD this store left it at, until it learns otherwise."""

    def __init__(self) -> None:
        self._by_sid: dict[str, Guess] = {}
        self._lock = threading.Lock()  # the listener's thread drops guesses while a turn records one

    def get(self, sid: str) -> Guess | None:
        return self._by_sid.get(sid)

    def after_turn(self, sid: str, row: dict, parent: Node | None, meta_text: str | None = None) -> None:
        """A turn wrote `row` (its metadata as `meta_text`, if it wrote that), HEAD now `parent`."""
        guess = Guess(as_read(row, meta_text), parent)
        with self._lock:
            self._by_sid[sid] = guess

    def check(self, sid: str, row: dict | None) -> None:
        """`row` was read just now: drop the guess of `sid` unless the row is at its state."""
        g = self._by_sid.get(sid)
        if g is not None and (row is None or (row["rev"], row["updated_at"]) != (g.row["rev"], g.row["updated_at"])):
            self.drop(sid)

    def drop(self, sid: str | None = None) -> None:
        """Forget the guess of `sid` (None: of every session): its row moved otherwise."""
        with self._lock:
            if sid is None:
                self._by_sid.clear()
            else:
                self._by_sid.pop(sid, None)


# -- the turn on a guess: one round trip ------------------------------------------------------
# The session row at the state guessed, (rev, updated_at), as a statement reads it after the lock.
GUESSED = "rev = ${} AND updated_at = ${}"
_CHAIN_TYPES = ("integer", "text", "text", "text", "text", "text", "text", "integer", "bigint")


@functools.lru_cache(maxsize=1)
def guess_lock_sql() -> str:
    """`lock_sql` for a turn on a guess: the lock, the promise, and whether the row is at the
    state guessed ($2, $3) — read after the lock: a row that waited for it is read as
    the writer before left it."""
    return (f"SELECT set_config('{NOTIFY_AFTER}', 'on', true), {GUESSED.format(2, 3)}"
            " FROM sessions WHERE id = $1 FOR UPDATE")


@functools.lru_cache(maxsize=16)
def chain_insert_sql(rows: int) -> str:
    """One INSERT of a chain of `rows` nodes under the session $(9·rows + 1)'s HEAD as this
    statement reads it — after the lock — each row's values (k, id, parent, role, name,
    content, encoding, tokens, the chain's running total) at $9·r + 1 … The numbers are
    chain.py's `chain_rows` rule, in SQL: depth HEAD's + k, total HEAD's + the running
    total, the epoch the row's if HEAD is of it (or there is none) else −1, HEAD's figures
    those of the row's count epoch (node_counts). The first node's parent is HEAD.
    Returns each node's (id, seq, created_at, parent, depth, total, epoch), in chain order."""
    values = ", ".join("(" + ", ".join(f"${r * 9 + k}::{_CHAIN_TYPES[k - 1]}" for k in range(1, 10)) + ")"
                       for r in range(rows))
    n = rows * 9 + 1
    return (f"INSERT INTO nodes ({st.NODE_COLUMNS})"
            " SELECT v.id, s.id, coalesce(v.parent_id, s.head_id), v.role, v.name, v.content, v.tokens, v.encoding,"
            " coalesce(c.depth, h.depth, 0) + v.k, coalesce(c.cum_tokens, h.cum_tokens, 0) + v.cum,"
            " CASE WHEN h.id IS NULL OR coalesce(c.epoch, h.epoch) = coalesce(s.count_epoch, 0)"
            " THEN coalesce(s.count_epoch, 0) ELSE -1 END, NULL, NULL"
            f" FROM (VALUES {values}) v (k, id, parent_id, role, name, content, encoding, tokens, cum)"
            " CROSS JOIN sessions s LEFT JOIN nodes h ON h.id = s.head_id"
            " LEFT JOIN node_counts c ON c.node_id = h.id AND c.epoch = s.count_epoch"
            f" WHERE s.id = ${n} ORDER BY v.k"
            " RETURNING id, seq, created_at, parent_id, depth, cum_tokens, epoch")


def guessed_update_sql(columns, fields: dict, writable, state: list, watcher: int) -> tuple[str, list]:
    """`update_sql` whose `fields` other than HEAD are written only if the row is at
    `state` (rev, updated_at), returning last the `TELL_SQL` for this kernel's listener
    `watcher`; the values of $2 … in order."""
    sets, args = st.row_sets(fields, writable, lambda k: f"${k + 1}")
    text, guarded = _guessed_update_text(tuple(columns), tuple(sets), len(args) + 2, st.TELL_SQL)
    return text, [*args, *state, watcher] if guarded else [*args, watcher]


@functools.lru_cache(maxsize=32)
def _guessed_update_text(columns: tuple, sets: tuple, k: int, tell_sql: str) -> tuple[str, bool]:
    """The statement of `guessed_update_sql` for these SET items, with its state at $k, $k+1
    and its listener after if any column is guarded (else its listener at $k); and whether
    one is."""
    items, guarded = [], False
    for item in sets:
        col, value = item.split(" = ", 1)
        if col in ("rev", "updated_at", "head_id"):
            items.append(item)
        else:
            items.append(f"{col} = CASE WHEN {GUESSED.format(k, k + 1)} THEN {value} ELSE {col} END")
            guarded = True
    tell = k + 2 if guarded else k
    return (f"UPDATE sessions SET {', '.join(items)} WHERE id = $1 RETURNING {', '.join(columns)},"
            f" {tell_sql.replace('$2', f'${tell}')}"), guarded


@functools.lru_cache(maxsize=8)
def _as_text(columns: tuple) -> tuple:
    """The session columns a turn on a guess reads back: metadata as its text, parsed only
    if the guess did not hold (otherwise what the turn wrote, or the guess read, is known)."""
    return tuple("metadata::text" if c == "metadata" else c for c in columns)


def append(store, conn, sid, nodes, change, watcher, plain, guess: Guess) -> tuple[dict, list[Node]]:
    """The turn in one round trip (the module doc): BEGIN, the lock, the
    chain's INSERT under HEAD as read after the lock, the row's UPDATE — `change`, computed
    on `guess`, written only if the row is still at that state — and COMMIT."""
    SESSION_COLUMNS, _session = store.SESSION_COLUMNS, store.row_of
    row = guess.row
    try:
        extra = change(row, guess.parent) if change else None
        fields = {"head_id": nodes[-1]["id"], **(extra or {})}
        state = [row["rev"], row["updated_at"]]
        upd, values = guessed_update_sql(_as_text(SESSION_COLUMNS), fields, store.WRITABLE, state, watcher)
        chain, cum = [], 0
        for k, n in enumerate(nodes, 1):
            cum += int(n["tokens"])
            chain += [k, n["id"], nodes[k - 2]["id"] if k > 1 else None, n["role"], n.get("name"), content_text(n),
                      n.get("encoding"), int(n["tokens"]), cum]
        results = st.send(conn, [(st.begin(store._pool.lock_timeout, plain), None),
                                 st.call(conn, guess_lock_sql(), [sid, *state], plain),
                                 st.call(conn, chain_insert_sql(len(nodes)), [*chain, sid], plain),
                                 st.call(conn, upd, [sid, *values], plain),
                                 ("COMMIT", None)], plain)  # read from the end: a plain BEGIN is two statements
        locked = message.rows(conn, results[-4])
        if not locked:
            raise StoreError(f"session {sid} vanished from {store.describe()}")
        held = locked[0][1]
        back = dict(zip(SESSION_COLUMNS, message.rows(conn, results[-2])[0][:-1]))
        meta = fields.get("metadata", row["metadata"])
        if held and isinstance(meta, dict):
            back["metadata"] = meta  # what this UPDATE wrote, or what the guess read: not parsed again
        new_row = _session(tuple(back[c] for c in SESSION_COLUMNS))
        inserted = message.rows(conn, results[-3])
    except BaseException:
        st.roll_back(conn)
        raise
    written = [Node(nid, seq, pid, n["role"], n.get("name"), int(n["tokens"]), depth, total, epoch, created_at=at)
               for (nid, seq, at, pid, depth, total, epoch), n in zip(inserted, nodes)]
    store._guesses.after_turn(sid, new_row, written[-1], st.meta_text(fields, values) if held else None)
    return new_row, written
