"""The DuckDB store: rows in, rows out.

One file, many sessions, an append-only node DAG per session. The store knows
no Session object and no model: it writes and reads rows, and every write that
depends on the current state runs a caller's `change(row)` inside its own
transaction, on the row as the file holds it then — so two kernels writing to
one session never act on a stale HEAD, metadata or generation.

What makes a turn O(new text) and an open O(tail) lives in the rows
(ocw/context/graph.py): a node's depth and running token total are computed here from
its parent, inside the append's transaction; a summary records its covered
range as a boundary. Reads are indexed: by id, or by a session's `seq` range
(rows are appended in `seq` order, so DuckDB's zone maps skip the rest of the
file) — never `id IN (...)` over a list, which scans the whole id column.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Callable

import duckdb

from ocw.store.chain import chain_rows, content_text
from ocw.store.duckdb.db import Db
from ocw.store.duckdb.settings import DUCKDB_CONFIG  # noqa: F401  (re-exported: tests and tools use it)
from ocw.store.duckdb import ownership
from ocw.text.errors import InvalidArgument, StoreError
from ocw.context.graph import SUMMARY_NAME, Node
from ocw.store.ids import new_id  # noqa: F401  (re-exported)
from ocw.store.paths import default_db_path  # noqa: F401  (re-exported)


SESSION_COLUMNS = ("id", "name", "provider", "model", "context_window", "system_prompt", "head_id",
                   "occupancy_generation", "metadata", "rev", "count_epoch", "created_at", "updated_at")
WRITABLE = {"name", "provider", "model", "context_window", "system_prompt", "head_id", "occupancy_generation",
            "metadata", "count_epoch"}
# A node row's own counts belong to the epoch it was written in; a recount for another
# epoch lives in `node_counts` (node rows are never updated: append-only). Reads take the
# session's epoch and see the counts of that epoch where a recount exists.
NODE_SELECT = ("SELECT n.id, n.seq, n.parent_id, n.role, n.name, coalesce(c.tokens, n.tokens),"
               " coalesce(c.depth, n.depth), coalesce(c.cum_tokens, n.cum_tokens), coalesce(c.epoch, n.epoch),"
               " n.cover_count, n.supersedes, n.created_at"
               " FROM nodes n LEFT JOIN node_counts c ON c.node_id = n.id AND c.epoch = ?")
# One node by id: a plain filter on the primary key, which DuckDB answers with an index
# scan. (Through NODE_SELECT's join it would scan the id column, and ids an older ocw
# wrote are random, so zone maps skip nothing: 1M ids is milliseconds a lookup.)
NODE_BY_ID = ("SELECT id, seq, parent_id, role, name, tokens, depth, cum_tokens, epoch, cover_count, supersedes,"
              " created_at FROM nodes WHERE id = ? AND session_id = ?")
SEQ_GAP = 4096  # content reads: seq runs further apart than this are read separately


def _node(r) -> Node:
    return Node(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8] if r[8] is not None else -1, r[9], r[10], r[11])


_COLUMN = {c: i for i, c in enumerate(SESSION_COLUMNS)}
_REV, _UPDATED_AT = _COLUMN["rev"], _COLUMN["updated_at"]


def _copy(n: Node) -> Node:
    return Node(n.id, n.seq, n.parent_id, n.role, n.name, n.tokens, n.depth, n.cum, n.epoch, n.cover_count,
                n.supersedes, n.created_at)


def _session(r) -> dict:
    row = dict(zip(SESSION_COLUMNS, r))
    row["metadata"] = json.loads(row["metadata"] or "{}")
    row["count_epoch"] = row["count_epoch"] or 0
    return row


class DuckDBStore:
    """Sessions and nodes in one DuckDB file (or ":memory:"), behind the store interface."""

    kind = "duckdb"

    def __init__(self, path: str, **db_options):
        """Opening never writes to a file that is not ocw's (see ocw.store.duckdb.ownership): a bad
        path, a foreign database or a newer ocw's file is refused with one line,
        after a read-only look, before anything is written."""
        self.path = ownership.check_path(path)
        for key, value in db_options.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise InvalidArgument(f"Store({key}=...) takes a number of seconds above 0, not {value!r}")
        self.db = Db(self.path, **db_options)
        self._last_written: dict[str, Node] = {}  # per session: the node this store appended last
        self._last_row: dict[str, tuple] = {}  # per session: its row as this store last read or wrote it
        try:
            if ownership.is_existing_database(self.path):
                with self.db.read_only() as con:
                    ownership.classify(con, self.path)
            with self.db.connect() as con:
                ownership.migrate(con, path=self.path)
        except duckdb.Error as e:
            self.db.close()
            raise StoreError(f"cannot open ocw database {self.path}: {e}") from None
        except BaseException:
            self.db.close()
            raise

    @property
    def lock_timeout(self) -> float:
        """Seconds a write waits for another process holding the file (then StoreBusy)."""
        return self.db.lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, seconds: float) -> None:
        self.db.lock_timeout = seconds

    def describe(self) -> str:
        """Where the sessions live, fit to show (a file path has no secrets)."""
        return self.path

    def close(self) -> None:
        self.db.close()

    # -- sessions -------------------------------------------------------------
    def insert_session(self, row: dict, archive: tuple[str, str] | None = None) -> dict:
        """A new session row. With `archive=(old_id, new_name)` the session that holds
        the name now (it must be `old_id`) is renamed in the same transaction, so
        `%new` either files the old one away AND creates the new one, or neither."""
        with self.db.transaction() as con:
            if archive is not None:
                holder = con.execute("SELECT id FROM sessions WHERE name = ?", [row["name"]]).fetchall()
                if holder != [(archive[0],)]:
                    raise StoreError(f"the session named {row['name']!r} changed meanwhile; nothing was created",
                                     hint="run the cell again")
                con.execute("UPDATE sessions SET name = ?, rev = rev + 1 WHERE id = ?", [archive[1], archive[0]])
            if con.execute("SELECT 1 FROM sessions WHERE name = ?", [row["name"]]).fetchone():
                raise StoreError(f"a session named {row['name']!r} already exists", hint="open it, or pick another name")
            con.execute(
                "INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, head_id,"
                " occupancy_generation, metadata, rev, count_epoch) VALUES (?, ?, ?, ?, ?, ?, NULL, 0, ?, 0, 0)",
                [row["id"], row["name"], row["provider"], row["model"], row["context_window"],
                 row.get("system_prompt") or "", json.dumps(row.get("metadata") or {})])
            return self._row(con, row["id"])

    def _row(self, con, sid: str) -> dict | None:
        r = con.execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE id = ?", [sid]).fetchone()
        if r is None:
            return None
        self._last_row[sid] = r
        return _session(r)

    def session_row(self, sid: str) -> dict | None:
        with self.db.connect() as con:
            return self._row(con, sid)

    def find_session(self, id_or_name: str) -> str | None:
        """The id of the session with this id, else with this name."""
        with self.db.connect() as con:
            r = con.execute("SELECT id FROM sessions WHERE id = ? OR name = ? ORDER BY (id = ?) DESC LIMIT 1",
                            [id_or_name, id_or_name, id_or_name]).fetchone()
        return r[0] if r else None

    def rev(self, sid: str) -> int | None:
        """The session's revision: one cheap read tells whether another kernel wrote."""
        with self.db.connect() as con:
            r = con.execute("SELECT rev FROM sessions WHERE id = ?", [sid]).fetchone()
        return r[0] if r else None

    def list_sessions(self) -> list[dict]:
        """Every session, newest use first, with its current branch's size (HEAD's depth
        and running total: two stored numbers, not a scan of its nodes)."""
        with self.db.connect() as con:
            rows = con.execute(
                "SELECT s.id, s.name, s.provider, s.model, s.context_window, s.updated_at, s.created_at,"
                " coalesce(h.depth, 0), coalesce(h.cum_tokens, 0), NULL"  # shared_by: a file has one user
                " FROM sessions s LEFT JOIN nodes h ON h.id = s.head_id"
                " ORDER BY s.updated_at DESC, s.created_at DESC").fetchall()
        keys = ("id", "name", "provider", "model", "context_window", "updated_at", "created_at", "messages", "tokens",
                "shared_by")
        return [dict(zip(keys, r)) for r in rows]

    def update_session(self, sid: str, change: Callable[[dict], dict | None]) -> dict:
        """One transaction: `change(row)` sees the row as the file holds it and returns the
        columns to set (None: write nothing). Every write bumps `rev`. Returns the row."""
        with self.db.transaction() as con:
            row = self._locked_row(con, sid)
            fields = change(row)
            if fields:
                row = self._write_row(con, sid, fields)
            return row

    def _locked_row(self, con, sid: str) -> dict:
        row = self._row(con, sid)
        if row is None:
            raise StoreError(f"session {sid} vanished from {self.path}")
        return row

    def _write_row(self, con, sid: str, fields: dict, expect: tuple | None = None) -> dict | None:
        """Set `fields` over a row version this store holds, bump `rev` and stamp
        `updated_at` with this process's clock; returns the new row, known without
        reading it back (RETURNING cost ~0.35 ms a turn, a third of the update). The
        version: the row `_locked_row` read in this transaction, or `expect` (a row as
        read earlier) — then only if the file still holds it (same `rev` and
        `updated_at`), else nothing is written and None returned."""
        bad = set(fields) - WRITABLE
        if bad:  # pragma: no cover - a programming error
            raise ValueError(f"not a writable session column: {', '.join(sorted(bad))}")
        base = expect if expect is not None else self._last_row[sid]
        now = datetime.now()
        new = list(base)
        new[_REV], new[_UPDATED_AT] = base[_REV] + 1, now
        sets, args = ["rev = rev + 1", "updated_at = ?"], [now]
        for k, v in fields.items():
            value = json.dumps(v) if k == "metadata" else v
            sets.append(f"{k} = ?")
            args.append(value)
            new[_COLUMN[k]] = value
        where, wargs = "id = ?", [sid]
        if expect is not None:
            where += " AND rev = ? AND updated_at IS NOT DISTINCT FROM ?"
            wargs += [expect[_REV], expect[_UPDATED_AT]]
        (count,) = con.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE {where}", [*args, *wargs]).fetchone()
        if count != 1:
            if expect is not None:
                return None
            raise StoreError(f"session {sid} vanished from {self.path}")  # pragma: no cover - read in this transaction
        self._last_row[sid] = raw = tuple(new)
        return _session(raw)

    def session_rows(self, ids: list[str]) -> dict[str, dict]:
        """The sessions' rows as stored (every column, metadata as its JSON text), by id:
        what `undo_sessions` can put back exactly."""
        out = {}
        with self.db.connect() as con:
            for sid in ids:  # a few ids: one indexed lookup each
                cur = con.execute("SELECT * FROM sessions WHERE id = ?", [sid])
                cols = [d[0] for d in cur.description]
                for r in cur.fetchall():
                    out[r[0]] = dict(zip(cols, r))
        return out

    def undo_sessions(self, *, restore: list[dict], delete: list[str], expect_rev: dict[str, int]) -> bool:
        """Take back what a failed cell did to the sessions table, in one transaction:
        put the `restore` rows back exactly as they were and delete the `delete`
        sessions (which the cell created) — but only if every session in
        `expect_rev` is still at that rev, i.e. nothing was written since (no
        message, no compaction, no other kernel). Returns whether it undid."""
        with self.db.transaction() as con:
            for sid, rev in expect_rev.items():
                row = con.execute("SELECT rev FROM sessions WHERE id = ?", [sid]).fetchone()
                if row is None or row[0] != rev:
                    return False  # checked before any write: the commit is of nothing
            for sid in delete:
                if con.execute("SELECT 1 FROM nodes WHERE session_id = ? LIMIT 1", [sid]).fetchone():
                    return False
            for sid in delete:
                con.execute("DELETE FROM sessions WHERE id = ?", [sid])
            for row in restore:
                cols = [c for c in row if c != "id"]
                con.execute(f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                            [row[c] for c in cols] + [row["id"]])
        return True

    def rename_session(self, sid: str, name: str) -> dict:
        with self.db.transaction() as con:
            if con.execute("SELECT 1 FROM sessions WHERE name = ? AND id <> ?", [name, sid]).fetchone():
                raise StoreError(f"a session named {name!r} already exists")
            self._locked_row(con, sid)
            return self._write_row(con, sid, {"name": name})

    def delete_session(self, sid: str) -> int:
        """Remove a session and every node of it, in one transaction. Returns the nodes removed."""
        with self.db.transaction() as con:
            (n,) = con.execute("SELECT count(*) FROM nodes WHERE session_id = ?", [sid]).fetchone()
            con.execute("DELETE FROM node_counts WHERE session_id = ?", [sid])
            con.execute("DELETE FROM nodes WHERE session_id = ?", [sid])
            con.execute("DELETE FROM sessions WHERE id = ?", [sid])
        self._last_written.pop(sid, None)
        self._last_row.pop(sid, None)
        return int(n)

    # -- writing nodes ----------------------------------------------------------
    def append_nodes(self, sid: str, nodes: list[dict],
                     change: Callable[[dict, Node | None], dict | None] | None = None) -> tuple[dict, list[Node]]:
        """Append `nodes` ({id, role, name, content, tokens, encoding}) as a chain under the
        session's current HEAD — as the file holds it in this transaction (known, or
        read), so a second kernel's append lands under the first's — and move HEAD
        to the last. Depth and running
        total come from the parent row; the chain is of the session's count epoch only
        if its parent is (else −1: stale, recounted by the session on use).
        `change(row, parent)` may add session columns to the same write (a usage
        sample, say: one transaction per turn); it may be called twice (first on the
        row version this store last saw, which the write then finds stale), so it
        must only return what to write. Returns (row, new nodes)."""
        with self.db.transaction() as con:
            done = self._append_known(con, sid, nodes, change)
            if done is None:  # the row moved since this store last saw it: read it
                row = self._locked_row(con, sid)
                parent = self._get(con, sid, row["head_id"], row["count_epoch"]) if row["head_id"] else None
                written, fields = chain_rows(row, parent, nodes, change)
                row = self._write_row(con, sid, fields)
                done = row, written
            self._insert_chain(con, sid, done[1], nodes)
        self._last_written[sid] = _copy(done[1][-1])  # committed
        return done

    def _append_known(self, con, sid: str, nodes: list[dict], change) -> tuple[dict, list[Node]] | None:
        """The usual turn: the session's row is still the version this store last read or
        wrote, and its HEAD the node this store appended last. Then both are known
        without reading them: the row update names the version it expects (`rev` and
        `updated_at`, which no two versions share — a cell's undo puts back a version
        exactly, contents included) and writes nothing if the file holds another; the
        caller then reads the row. One statement saved on every turn."""
        raw, last = self._last_row.get(sid), self._last_written.get(sid)
        if raw is None or last is None:
            return None
        row = _session(raw)  # fresh objects: `change` may keep or alter what it is given
        if row["head_id"] != last.id or last.epoch != row["count_epoch"]:
            return None
        written, fields = chain_rows(row, _copy(last), nodes, change)
        new_row = self._write_row(con, sid, fields, expect=raw)
        return None if new_row is None else (new_row, written)

    @staticmethod
    def _insert_chain(con, sid: str, written: list[Node], nodes: list[dict]) -> None:
        """One statement for the whole chain (a turn is a user message and a reply, or
        more); seqs come back in chain order (VALUES rows take the sequence in order),
        with each row's stored time."""
        args = [v for w, n in zip(written, nodes) for v in (
            w.id, sid, w.parent_id, w.role, w.name, content_text(n), w.tokens,
            n.get("encoding"), w.depth, w.cum, w.epoch)]
        seqs = {r[0]: r[1:] for r in con.execute(
            "INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding, depth,"
            " cum_tokens, epoch) VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(written))
            + " RETURNING id, seq, created_at", args).fetchall()}
        for w in written:
            w.seq, w.created_at = seqs[w.id]

    def insert_summary(self, sid: str, summary: dict, change: Callable[[dict], dict]) -> tuple[dict, Node]:
        """Append a summary node beside the branch ({id, parent_id: the boundary,
        cover_count, content, tokens, encoding, supersedes}) and apply `change(row)`
        (generation, count, metadata) — one transaction. `change` raises to refuse
        (the branch moved while the summary was written): nothing is saved. HEAD
        does not move."""
        with self.db.transaction() as con:
            row = self._locked_row(con, sid)
            fields = change(row)
            (seq, created_at) = con.execute(
                "INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding, epoch,"
                " cover_count, supersedes) VALUES (?, ?, ?, 'llm', ?, ?, ?, ?, ?, ?, ?) RETURNING seq, created_at",
                [summary["id"], sid, summary["parent_id"], SUMMARY_NAME,
                 json.dumps(summary["content"], ensure_ascii=False), int(summary["tokens"]), summary.get("encoding"),
                 row["count_epoch"], int(summary["cover_count"]), summary.get("supersedes")]).fetchone()
            row = self._write_row(con, sid, fields or {})
            node = Node(summary["id"], seq, summary["parent_id"], "llm", SUMMARY_NAME, int(summary["tokens"]),
                        None, None, row["count_epoch"], int(summary["cover_count"]), summary.get("supersedes"),
                        created_at)
            return row, node

    def set_counts(self, sid: str, rows: list[tuple], change: Callable[[dict], dict | None] | None = None) -> dict:
        """Store recounted (id, tokens, depth, cum, epoch, encoding) rows — a new
        tokenizer or tool-result cap, or an older file's stale counts — beside the
        node rows (which are never rewritten), with `change(row)` in the same
        transaction."""
        with self.db.transaction() as con:
            row = self._locked_row(con, sid)
            if rows:
                con.executemany(
                    "INSERT OR REPLACE INTO node_counts (node_id, epoch, session_id, tokens, depth, cum_tokens, encoding)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(nid, epoch, sid, tokens, depth, cum, enc) for nid, tokens, depth, cum, epoch, enc in rows])
            fields = change(row) if change else None
            return self._write_row(con, sid, fields or {})

    # -- reading nodes ------------------------------------------------------------
    def _get(self, con, sid: str, nid: str, epoch: int) -> Node | None:
        """One node by id, with its counts of `epoch`: an index scan, plus one more
        indexed lookup of `node_counts` only if the row is of another epoch. (A row of
        `epoch` itself never has a recount for it: recounts are written only for nodes
        whose counts were of another epoch, so this equals NODE_SELECT's coalesce.)"""
        r = con.execute(NODE_BY_ID, [nid, sid]).fetchone()
        if r is None:
            return None
        node = _node(r)
        if node.epoch != epoch:
            c = con.execute("SELECT tokens, depth, cum_tokens, epoch FROM node_counts WHERE node_id = ? AND epoch = ?",
                            [nid, epoch]).fetchone()
            if c is not None:
                node.tokens, node.depth, node.cum, node.epoch = int(c[0] or 0), c[1], c[2], c[3]
        return node

    def node(self, sid: str, nid: str, epoch: int = 0) -> Node | None:
        """One node row by id (an indexed lookup), with its counts of `epoch`."""
        with self.db.connect() as con:
            return self._get(con, sid, nid, epoch)

    def nodes_since(self, sid: str, lo: int, hi: int | None = None, epoch: int = 0) -> list[Node]:
        """The session's node rows with lo ≤ seq (≤ hi), in seq order — a zone-map range
        read: the tail of a session is a recent seq range."""
        with self.db.connect() as con:
            if hi is None:
                rows = con.execute(f"{NODE_SELECT} WHERE n.session_id = ? AND n.seq >= ? ORDER BY n.seq",
                                   [epoch, sid, lo]).fetchall()
            else:
                rows = con.execute(f"{NODE_SELECT} WHERE n.session_id = ? AND n.seq BETWEEN ? AND ? ORDER BY n.seq",
                                   [epoch, sid, lo, hi]).fetchall()
        return [_node(r) for r in rows]

    def summaries(self, sid: str, after_seq: int = 0, epoch: int = 0) -> list[Node]:
        with self.db.connect() as con:
            rows = con.execute(f"{NODE_SELECT} WHERE n.session_id = ? AND n.seq > ? AND n.role = 'llm' AND n.name = ?"
                               " ORDER BY n.seq", [epoch, sid, after_seq, SUMMARY_NAME]).fetchall()
        return [_node(r) for r in rows]

    def content(self, sid: str, nodes: list[Node]) -> dict[str, list]:
        """Content blocks of these nodes, read by seq ranges around them."""
        want = {n.id for n in nodes}
        out: dict[str, list] = {}
        seqs = sorted(n.seq for n in nodes)
        runs, start = [], None
        for i, s in enumerate(seqs):
            if start is None:
                start = s
            if i + 1 == len(seqs) or seqs[i + 1] - s > SEQ_GAP:
                runs.append((start, s))
                start = None
        with self.db.connect() as con:
            for lo, hi in runs:
                for nid, content in con.execute(
                        "SELECT id, content FROM nodes WHERE session_id = ? AND seq BETWEEN ? AND ?",
                        [sid, lo, hi]).fetchall():
                    if nid in want:
                        out[nid] = json.loads(content)
        return out

    def leaves(self, sid: str, epoch: int = 0) -> list[Node]:
        """Every leaf of the session's DAG (summaries aside), oldest first. A node whose
        only child is a summary is a leaf: a summary hangs beside the branch."""
        with self.db.connect() as con:
            rows = con.execute(
                f"{NODE_SELECT} WHERE n.session_id = ? AND NOT (n.role = 'llm' AND n.name = ?)"
                " AND NOT EXISTS (SELECT 1 FROM nodes k WHERE k.session_id = n.session_id AND k.parent_id = n.id"
                " AND NOT (k.role = 'llm' AND k.name = ?)) ORDER BY n.seq",
                [epoch, sid, SUMMARY_NAME, SUMMARY_NAME]).fetchall()
        return [_node(r) for r in rows]

    def node_count(self, sid: str) -> int:
        with self.db.connect() as con:
            return int(con.execute("SELECT count(*) FROM nodes WHERE session_id = ?", [sid]).fetchone()[0])
