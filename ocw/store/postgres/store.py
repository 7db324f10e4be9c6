"""The PostgreSQL store: the DuckDB store's method set (ocw/store/api.py) over a
server database that many kernels on many machines share.

Invariants, and why they hold:
- Writers to one session are serialised by that session, never globally:
  every write that depends on the session's state opens a transaction and
  first takes the session row with `SELECT … FOR UPDATE`; a second writer to
  the same session waits there, then reads the row (and HEAD) the first one
  committed. Writers to other sessions never wait. `change(row)` runs inside
  that transaction, on the locked row.
- `seq` is an identity column. Appends to a session happen under its row lock,
  so within a session a later append has a larger seq, and a node's ancestors
  smaller ones — the order the tail's range reads (ocw/store/tail.py) rely on.
- Everything else the store promises (append-only nodes, HEAD a message of
  its own session, generation and compaction count never going down) the
  database enforces with constraints and triggers (ocw/store/postgres/migrations.py).
- No password is kept or shown: the URL held here has none (ocw/store/postgres/url.py);
  `describe()` and every error say user, host and database only.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Callable, Iterator

from ocw.store.postgres import schema as pg_schema
from ocw.store.postgres import url as pg_url
from ocw.store.postgres.statements import NODE_COLUMNS, row_sets
from ocw.store.holder import BUSY_HINT
from ocw.text.errors import InvalidArgument, StoreBusy, StoreError
from ocw.context.graph import SUMMARY_NAME, Node
from ocw.store.postgres.guess import Guesses
from ocw.store.postgres.shares import Sharing
from ocw.store.postgres.conn import DEFAULT_LOCK_TIMEOUT, Pool, driver, lock_holders, one_line, store_error

SESSION_COLUMNS = ("id", "name", "provider", "model", "context_window", "system_prompt", "head_id",
                   "occupancy_generation", "metadata", "rev", "count_epoch", "created_at", "updated_at")
_COLS = ", ".join(SESSION_COLUMNS)
WRITABLE = {"name", "provider", "model", "context_window", "system_prompt", "head_id", "occupancy_generation",
            "metadata", "count_epoch"}
NODE_SELECT = ("SELECT n.id, n.seq, n.parent_id, n.role, n.name, coalesce(c.tokens, n.tokens),"
               " coalesce(c.depth, n.depth), coalesce(c.cum_tokens, n.cum_tokens), coalesce(c.epoch, n.epoch),"
               " n.cover_count, n.supersedes, n.created_at"
               " FROM nodes n LEFT JOIN node_counts c ON c.node_id = n.id AND c.epoch = %s")
NODE_INSERT = (f"INSERT INTO nodes ({NODE_COLUMNS}) VALUES ({', '.join(['%s'] * len(NODE_COLUMNS.split(',')))})"
               " RETURNING seq, created_at")


def _node(r) -> Node:
    return Node(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8] if r[8] is not None else -1, r[9], r[10], r[11])


def _session(r) -> dict:
    row = dict(zip(SESSION_COLUMNS, r))
    meta = row["metadata"]
    row["metadata"] = json.loads(meta) if isinstance(meta, str) else (meta or {})
    row["count_epoch"] = row["count_epoch"] or 0
    return row


class PostgresStore(Sharing):
    """Sessions and nodes in a PostgreSQL database, behind the store interface."""

    kind = "postgresql"
    SESSION_COLUMNS, WRITABLE = SESSION_COLUMNS, WRITABLE  # for ocw/store/postgres/append.py, which does not import this module
    row_of, node_of = staticmethod(_session), staticmethod(_node)

    def __init__(self, url: str, **options):
        """Connects, checks the database is ocw's (or empty) and migrates it. A URL
        ocw cannot use is one StoreError line; nothing local is ever created."""
        for key, value in options.items():  # the DuckDB store's timing options; lock_timeout is used here too
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise InvalidArgument(f"Store({key}=...) takes a number of seconds above 0, not {value!r}")
        self.path = pg_url.checked(url)
        self._where = pg_url.display(self.path)
        self._pool = Pool(self.path, self._where, options.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))
        self._listener = None
        self._guesses = Guesses()  # what its next turn on each session expects (ocw/store/postgres/guess.py)
        with self._errors("open"), self._pool.connection() as conn:
            self._where = self._pool.where = self.describe()
            pg_schema.migrate(conn, self._where)
        pg_url.remember(self.path)

    def describe(self) -> str:
        """User, host, port and database — what the server says it is, once connected."""
        info = self._pool.info
        if info is None:
            return self._where
        user, host, port, dbname = info
        return pg_url.display(self.path, user=user, host=host, port=port, dbname=dbname)

    def __repr__(self) -> str:
        return f"PostgresStore({self.describe()!r})"

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self._pool.close()

    def watch(self, callback: Callable[[str, int | None], None]) -> None:
        """Call `callback(session_id, rev)` from a background thread whenever another
        connection commits a change to a session (LISTEN/NOTIFY; ocw/store/postgres/listen.py) —
        never for this store's own commits;
        `(None, None)` after a reconnect, when notifications may have been missed."""
        from ocw.store.postgres.listen import Listener

        def on_notify(sid, rev, pid):
            if pid is not None and pid in self._pool.pids:
                return  # our own commit: the writer has adopted its row already
            self._guesses.drop(sid)  # another kernel wrote (sid None: some session, or anything)
            callback(sid, rev)

        if self._listener is None:
            self._listener = Listener(self.path, self.describe(), on_notify, mine=lambda pid: pid in self._pool.pids)
            self._listener.start()

    def follow(self, sid: str) -> None:
        """Tell other kernels' turns on session `sid` to notify (schema p005): `watch`'s
        listener records that it watches it. No-op before `watch`."""
        if self._listener is not None:
            self._listener.follow(sid)

    def _watcher(self) -> int:
        """Our listener's server process (0: none yet): its own watch calls for no NOTIFY.
        Read before the turn's message is sent, so a turn racing the listener's first
        connect may see its watch as another's and notify once, needlessly: our listener
        drops our own notifications (`watch`)."""
        return getattr(self._listener, "pid", 0) or 0

    # -- plumbing ---------------------------------------------------------------------
    @property
    def lock_timeout(self) -> float:
        """Seconds a write waits for another kernel's lock on a session (then StoreBusy)."""
        return self._pool.lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, seconds: float) -> None:
        self._pool.lock_timeout = seconds

    def _busy(self) -> StoreBusy:
        """The one line for a lock wait that ran out, naming the other writer if it can."""
        try:
            with self._pool.connection() as conn:
                who = lock_holders(conn)
        except Exception:  # naming is a courtesy; the line is said either way
            who = []
        by = f" by {', '.join(who[:2])}" if who else " by another kernel"
        return StoreBusy(f"the session is being written{by} in {self.describe()}; gave up after "
                         f"{self.lock_timeout:g} s, nothing was written", hint=BUSY_HINT)

    @contextmanager
    def _errors(self, doing: str = "use") -> Iterator[None]:
        psycopg = driver()
        try:
            yield
        except psycopg.errors.LockNotAvailable:
            raise self._busy() from None
        except psycopg.errors.IntegrityError as e:
            raise StoreError(f"the ocw database {self.describe()} refused the write: "
                             f"{one_line(e, self._pool.secrets)}", hint="nothing was saved") from None
        except psycopg.Error as e:
            raise store_error(e, self.describe(), self._pool.secrets, doing) from None

    @contextmanager
    def _read(self) -> Iterator:
        with self._errors(), self._pool.connection() as conn, conn.cursor() as cur:
            yield cur

    @contextmanager
    def _tx(self) -> Iterator:
        """One transaction: all or nothing, whatever raises inside (a `change` too). It may
        write a session row otherwise than a turn: the next turn reads it (no guess)."""
        self._guesses.drop()
        with self._errors(), self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    def _row(self, cur, sid: str) -> dict | None:
        cur.execute(f"SELECT {_COLS} FROM sessions WHERE id = %s", [sid])
        r = cur.fetchone()
        return _session(r) if r else None

    def _locked_row(self, cur, sid: str) -> dict:
        """The session row, locked until the transaction ends: the session's writers queue here."""
        cur.execute(f"SELECT {_COLS} FROM sessions WHERE id = %s FOR UPDATE", [sid])
        r = cur.fetchone()
        if r is None:
            raise StoreError(f"session {sid} vanished from {self.describe()}")
        return _session(r)

    def _write_row(self, cur, sid: str, fields: dict) -> dict:
        sets, args = row_sets(fields, WRITABLE, lambda k: "%s")
        cur.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = %s RETURNING {_COLS}", [*args, sid])
        return _session(cur.fetchone())

    @contextmanager
    def _name_taken(self, name: str) -> Iterator[None]:
        """A second session of that name (the unique constraint, which also settles two
        kernels creating it at once) is said as such."""
        try:
            yield
        except driver().errors.UniqueViolation:
            raise StoreError(f"a session named {name!r} already exists", hint="open it, or pick another name") from None

    # -- sessions -------------------------------------------------------------------------
    def insert_session(self, row: dict, archive: tuple[str, str] | None = None) -> dict:
        """A new session row; with `archive=(old_id, new_name)` the session holding the
        name (it must be `old_id`) is renamed in the same transaction."""
        with self._tx() as cur:
            if archive is not None:
                cur.execute("SELECT id FROM sessions WHERE name = %s AND owner = current_user FOR UPDATE",
                            [row["name"]])
                if cur.fetchall() != [(archive[0],)]:
                    raise StoreError(f"the session named {row['name']!r} changed meanwhile; nothing was created",
                                     hint="run the cell again")
                with self._name_taken(archive[1]):
                    cur.execute("UPDATE sessions SET name = %s, rev = rev + 1 WHERE id = %s", [archive[1], archive[0]])
            with self._name_taken(row["name"]):
                cur.execute(
                    "INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, head_id,"
                    " occupancy_generation, metadata, rev, count_epoch)"
                    f" VALUES (%s, %s, %s, %s, %s, %s, NULL, 0, %s::json, 0, 0) RETURNING {_COLS}",
                    [row["id"], row["name"], row["provider"], row["model"], row["context_window"],
                     row.get("system_prompt") or "", json.dumps(row.get("metadata") or {})])
            return _session(cur.fetchone())

    def session_row(self, sid: str) -> dict | None:
        """The row as it is; a row another kernel wrote since this store's last turn (a
        `%%chat` turn's sync reads it first) drops that turn's guess (guess.py)."""
        with self._read() as cur:
            row = self._row(cur, sid)
        self._guesses.check(sid, row)
        return row

    def find_session(self, id_or_name: str) -> str | None:
        with self._read() as cur:
            # by id first, then the role's own of that name, then one shared with it
            cur.execute("SELECT id FROM sessions WHERE id = %s OR name = %s"
                        " ORDER BY (id = %s) DESC, (owner = current_user) DESC, updated_at DESC LIMIT 1",
                        [id_or_name, id_or_name, id_or_name])
            r = cur.fetchone()
        return r[0] if r else None

    def rev(self, sid: str) -> int | None:
        with self._read() as cur:
            cur.execute("SELECT rev FROM sessions WHERE id = %s", [sid])
            r = cur.fetchone()
        return r[0] if r else None

    def list_sessions(self) -> list[dict]:
        with self._read() as cur:
            cur.execute(
                "SELECT s.id, s.name, s.provider, s.model, s.context_window, s.updated_at, s.created_at,"
                " coalesce(h.depth, 0), coalesce(h.cum_tokens, 0),"
                " CASE WHEN s.owner <> current_user THEN s.owner END"  # a session shared with this role
                " FROM sessions s LEFT JOIN nodes h ON h.id = s.head_id"
                " ORDER BY s.updated_at DESC, s.created_at DESC")
            rows = cur.fetchall()
        keys = ("id", "name", "provider", "model", "context_window", "updated_at", "created_at", "messages", "tokens",
                "shared_by")
        return [dict(zip(keys, r)) for r in rows]

    def update_session(self, sid: str, change: Callable[[dict], dict | None]) -> dict:
        """`change(row)` on the locked row returns the columns to set (None: nothing)."""
        with self._tx() as cur:
            row = self._locked_row(cur, sid)
            fields = change(row)
            return self._write_row(cur, sid, fields) if fields else row

    def session_rows(self, ids: list[str]) -> dict[str, dict]:
        """The rows as stored (metadata as its JSON text): what `undo_sessions` puts back."""
        cols = [c if c != "metadata" else "metadata::text" for c in SESSION_COLUMNS]
        with self._read() as cur:
            cur.execute(f"SELECT {', '.join(cols)} FROM sessions WHERE id = ANY(%s)", [list(ids)])
            return {r[0]: dict(zip(SESSION_COLUMNS, r)) for r in cur.fetchall()}

    def undo_sessions(self, *, restore: list[dict], delete: list[str], expect_rev: dict[str, int]) -> bool:
        """Put `restore` rows back and delete `delete` sessions — only if every session in
        `expect_rev` is still at that rev (rows locked in id order: no deadlock)."""
        with self._tx() as cur:
            for sid in sorted(expect_rev):
                cur.execute("SELECT rev FROM sessions WHERE id = %s FOR UPDATE", [sid])
                r = cur.fetchone()
                if r is None or r[0] != expect_rev[sid]:
                    return False
            if delete:
                cur.execute("SELECT 1 FROM nodes WHERE session_id = ANY(%s) LIMIT 1", [list(delete)])
                if cur.fetchone():
                    return False
                cur.execute("DELETE FROM sessions WHERE id = ANY(%s)", [list(delete)])
            for row in restore:
                cols = [c for c in row if c != "id"]
                sets = ", ".join(f"{c} = %s::json" if c == "metadata" else f"{c} = %s" for c in cols)
                vals = [json.dumps(row[c]) if c == "metadata" and not isinstance(row[c], str) else row[c] for c in cols]
                cur.execute(f"UPDATE sessions SET {sets} WHERE id = %s", vals + [row["id"]])
        return True

    def rename_session(self, sid: str, name: str) -> dict:
        with self._tx() as cur:
            self._locked_row(cur, sid)
            with self._name_taken(name):
                return self._write_row(cur, sid, {"name": name})

    def delete_session(self, sid: str) -> int:
        """The session and all its nodes, in one transaction. Returns the nodes removed."""
        with self._tx() as cur:
            cur.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", [sid])
            cur.execute("SELECT count(*) FROM nodes WHERE session_id = %s", [sid])
            (n,) = cur.fetchone()
            cur.execute("DELETE FROM sessions WHERE id = %s", [sid])  # nodes and counts cascade
            if cur.rowcount == 0:  # row security: a session shared with this role is not its to delete
                cur.execute("SELECT owner, name FROM sessions WHERE id = %s", [sid])
                r = cur.fetchone()
                if r is not None:  # seen, yet not deleted (a session that is not there: 0, as DuckDB)
                    raise StoreError(f"session {r[1]!r} is shared with you by {r[0]}; only its owner deletes it, "
                                     "nothing was deleted", hint="ask its owner to delete it, or to unshare it")
        return int(n)

    # -- writing nodes ----------------------------------------------------------------------
    def append_nodes(self, sid: str, nodes: list[dict],
                     change: Callable[[dict, Node | None], dict | None] | None = None) -> tuple[dict, list[Node]]:
        """Append `nodes` as a chain under HEAD as this transaction reads it (after the
        session's lock), move HEAD to the last; `change(row, parent)` adds columns.
        One transaction in one round trip, or two (ocw/store/postgres/append.py)."""
        from ocw.store.postgres import append

        with self._errors(), self._pool.connection() as conn:
            return append.append(self, conn, sid, nodes, change, self._watcher())

    @staticmethod
    def _insert(cur, args: list) -> tuple:
        """Insert one node row (a summary: a turn's chain is append.py's own INSERT); its
        (seq, created_at)."""
        cur.execute(NODE_INSERT, args)
        return tuple(cur.fetchone())

    def insert_summary(self, sid: str, summary: dict, change: Callable[[dict], dict]) -> tuple[dict, Node]:
        """The summary node beside the branch and `change(row)` (generation, count) in one
        transaction; `change` raising saves nothing. HEAD does not move."""
        with self._tx() as cur:
            row = self._locked_row(cur, sid)
            fields = change(row)
            seq, created_at = self._insert(cur, [
                summary["id"], sid, summary["parent_id"], "llm", SUMMARY_NAME,
                json.dumps(summary["content"], ensure_ascii=False), int(summary["tokens"]), summary.get("encoding"),
                None, None, row["count_epoch"], int(summary["cover_count"]), summary.get("supersedes")])
            new_row = self._write_row(cur, sid, fields or {})
            node = Node(summary["id"], seq, summary["parent_id"], "llm", SUMMARY_NAME, int(summary["tokens"]),
                        None, None, row["count_epoch"], int(summary["cover_count"]), summary.get("supersedes"),
                        created_at)
            return new_row, node

    def set_counts(self, sid: str, rows: list[tuple], change: Callable[[dict], dict | None] | None = None) -> dict:
        """Recounted (id, tokens, depth, cum, epoch, encoding) rows into node_counts (node
        rows are never rewritten), with `change(row)` in the same transaction."""
        with self._tx() as cur:
            row = self._locked_row(cur, sid)
            if rows:
                cur.executemany(
                    "INSERT INTO node_counts (node_id, epoch, session_id, tokens, depth, cum_tokens, encoding)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (node_id, epoch) DO UPDATE SET"
                    " tokens = excluded.tokens, depth = excluded.depth, cum_tokens = excluded.cum_tokens,"
                    " encoding = excluded.encoding",
                    [(nid, epoch, sid, tokens, depth, cum, enc) for nid, tokens, depth, cum, epoch, enc in rows])
            fields = change(row) if change else None
            return self._write_row(cur, sid, fields or {})

    # -- reading nodes -----------------------------------------------------------------------
    def _get(self, cur, sid: str, nid: str, epoch: int) -> Node | None:
        cur.execute(f"{NODE_SELECT} WHERE n.id = %s AND n.session_id = %s", [epoch, nid, sid])
        r = cur.fetchone()
        return _node(r) if r else None

    def node(self, sid: str, nid: str, epoch: int = 0) -> Node | None:
        with self._read() as cur:
            return self._get(cur, sid, nid, epoch)

    def nodes_since(self, sid: str, lo: int, hi: int | None = None, epoch: int = 0) -> list[Node]:
        """Rows with lo ≤ seq (≤ hi), in seq order: an index range read on (session_id, seq)."""
        with self._read() as cur:
            if hi is None:
                cur.execute(f"{NODE_SELECT} WHERE n.session_id = %s AND n.seq >= %s ORDER BY n.seq", [epoch, sid, lo])
            else:
                cur.execute(f"{NODE_SELECT} WHERE n.session_id = %s AND n.seq BETWEEN %s AND %s ORDER BY n.seq",
                            [epoch, sid, lo, hi])
            return [_node(r) for r in cur.fetchall()]

    def summaries(self, sid: str, after_seq: int = 0, epoch: int = 0) -> list[Node]:
        with self._read() as cur:
            cur.execute(f"{NODE_SELECT} WHERE n.session_id = %s AND n.seq > %s AND n.role = 'llm' AND n.name = %s"
                        " ORDER BY n.seq", [epoch, sid, after_seq, SUMMARY_NAME])
            return [_node(r) for r in cur.fetchall()]

    def content(self, sid: str, nodes: list[Node]) -> dict[str, list]:
        """Content blocks of these nodes (primary-key lookups)."""
        if not nodes:
            return {}
        with self._read() as cur:
            cur.execute("SELECT id, content FROM nodes WHERE id = ANY(%s) AND session_id = %s",
                        [[n.id for n in nodes], sid])
            return {nid: json.loads(content) for nid, content in cur.fetchall()}

    def leaves(self, sid: str, epoch: int = 0) -> list[Node]:
        """Every leaf of the DAG (summaries aside), oldest first."""
        with self._read() as cur:
            cur.execute(
                f"{NODE_SELECT} WHERE n.session_id = %s AND NOT (n.role = 'llm' AND n.name = %s)"
                " AND NOT EXISTS (SELECT 1 FROM nodes k WHERE k.parent_id = n.id"
                " AND NOT (k.role = 'llm' AND k.name = %s)) ORDER BY n.seq",
                [epoch, sid, SUMMARY_NAME, SUMMARY_NAME])
            return [_node(r) for r in cur.fetchall()]

    def node_count(self, sid: str) -> int:
        with self._read() as cur:
            cur.execute("SELECT count(*) FROM nodes WHERE session_id = %s", [sid])
            return int(cur.fetchone()[0])
