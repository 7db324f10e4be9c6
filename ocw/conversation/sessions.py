"""`ocw.Store`: sessions in a store, as Session objects.

The store beneath (ocw/store/duckdb/store.py, DuckDB) is rows in, rows out and knows no
Session; this is where Session objects are built — one per session id per
Store, so every view of a session shares its cache and its events.
"""
from __future__ import annotations

import os
import threading

from ocw.text import checks
from ocw.text.errors import OcwError, SessionNotFound
from ocw.providers.registry import NAMES as PROVIDER_NAMES
from ocw.conversation.pinning import carried_pins
from ocw.conversation.session import Session, check_metadata
from ocw.store.ids import new_id
from ocw.store.paths import default_db_path
from ocw.store.duckdb.store import DuckDBStore


def open_backend(path: str, **options):
    """The store behind a path: a PostgreSQL database for a postgresql:// (or
    postgres://) URL — routed before any file check, so a URL never becomes a
    local folder — else a DuckDB file (or ":memory:")."""
    from ocw.store.postgres import url as pg_url

    if pg_url.is_postgres_url(path):
        from ocw.store.postgres.store import PostgresStore

        return PostgresStore(path, **options)
    return DuckDBStore(path, **options)


class Store:
    """Sessions in one store: `Store(path)`, default OCW_DB or ~/.local/share/ocw/ocw.duckdb."""

    def __init__(self, path: str | os.PathLike | None = None, **options):
        self.backend = open_backend(default_db_path() if path is None else path, **options)
        self.path = self.backend.path
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        watch = getattr(self.backend, "watch", None)  # PostgreSQL: LISTEN/NOTIFY; DuckDB: the rev read per command
        if watch is not None:
            watch(self._on_remote_change)

    @property
    def db(self):
        """The DuckDB connection manager (tests and tools read the file through it)."""
        return self.backend.db

    def __repr__(self) -> str:
        return f"Store({self.backend.describe()!r})"

    def create_session(self, *, model: str = "ocw-offline", context_window: int = 8192, system_prompt: str = "",
                       name: str | None = None, provider: str = "offline", metadata: dict | None = None,
                       archive: tuple[str, str] | None = None, pins: list[str] = ()) -> Session:
        """A new session. With `archive=(old_id, new_name)` the session that holds
        `name` now (it must be `old_id`) is renamed in the same transaction, so
        `%new` either files the old one away AND creates the new one, or neither.
        `pins` (texts, as another session's pins hold them: `%new --from-summary`)
        start the new session's append-only pin records, numbered from 1, in the
        same row — so they are pins there too, read verbatim after every compaction."""
        checks.model(model)
        checks.window(context_window)
        checks.text(system_prompt, "system_prompt")
        if name is not None:
            checks.name(name, "name")
        checks.choice(provider, "provider", PROVIDER_NAMES)
        if metadata is not None:
            check_metadata(metadata)
        if archive is not None:
            checks.name(archive[1], "archive name")
        sid = new_id("s_")
        meta = {"context_compaction_count": 0, **(metadata or {})}
        if pins:
            meta.update(carried_pins(pins))
        row = {"id": sid, "name": name or sid, "provider": provider, "model": model, "context_window": context_window,
               "system_prompt": system_prompt, "metadata": meta}
        return self._session(sid, created=self.backend.insert_session(row, archive=archive))

    def session_rows(self, ids: list[str]) -> dict[str, dict]:
        return self.backend.session_rows(ids)

    def undo_sessions(self, *, restore: list[dict], delete: list[str], expect_rev: dict[str, int]) -> bool:
        """Take back what a failed cell did to the sessions table (see the store's
        `undo_sessions`); sessions it deletes are forgotten here too."""
        done = self.backend.undo_sessions(restore=restore, delete=delete, expect_rev=expect_rev)
        if done:
            with self._lock:
                for sid in delete:
                    self._sessions.pop(sid, None)
        return done

    def open_session(self, id_or_name: str) -> Session:
        checks.text(id_or_name, "id_or_name", allow_empty=False)
        sid = self.backend.find_session(id_or_name)
        if sid is None:
            raise SessionNotFound(f"no session {id_or_name!r} in {self.backend.describe()}")
        return self._session(sid)

    def get_or_create_session(self, name: str, **kwargs) -> Session:
        try:
            return self.open_session(name)
        except SessionNotFound:
            return self.create_session(name=name, **kwargs)

    def _session(self, sid: str, created: dict | None = None) -> Session:
        """The session object of `sid` (one per store), brought up to date; `created`:
        the row `insert_session` just returned — a new session, taken as it is."""
        with self._lock:
            s = self._sessions.get(sid)
            if s is None:
                s = self._sessions[sid] = Session(self, self.backend, sid)
                follow = getattr(self.backend, "follow", None)  # PostgreSQL: other kernels' turns notify us
                if follow is not None:
                    follow(sid)
        if created is not None:
            s.adopt_created(created)
        else:
            s.sync()
        return s

    def _on_remote_change(self, sid: str | None, rev: int | None) -> None:
        """A commit to session `sid` (None: maybe to any), from the backend's listener
        thread: an open session whose rev moved is synced and publishes its occupancy,
        so its widgets refresh without a command."""
        with self._lock:
            targets = list(self._sessions.values()) if sid is None else \
                [s for s in (self._sessions.get(sid),) if s is not None]
        for s in targets:
            with s._lock:  # after any write of ours in flight has adopted its row
                if rev is not None and rev == s._rev:
                    continue  # our own write (or one already seen)
                before = s._rev
                try:
                    s.sync()  # reads and adopts under the lock: never an older row over a newer
                except OcwError:  # deleted meanwhile: the next command says so
                    continue
                if s._rev == before:
                    continue  # not this one ("some session changed"), or a catch-up read that found nothing new
            s._publish()

    def share_session(self, id_or_name: str, role: str, share: bool = True) -> tuple[str, bool]:
        """Share a session with a database role, or take it back (the team database on
        PostgreSQL only: its row-level security is what sharing opens). Returns the
        session's name and whether anything changed."""
        from ocw.text.errors import StoreError

        checks.text(role, "role", allow_empty=False)
        if not hasattr(self.backend, "share_session"):
            raise StoreError(f"sessions are shared on the team database only; {self.backend.describe()} is a file "
                             "of yours, which no one else reads", hint="point OCW_DB at a postgresql:// URL (see README)")
        s = self.open_session(id_or_name)
        return s.name, self.backend.share_session(s.id, role, share)

    def delete_session(self, id_or_name: str) -> dict:
        """Delete a session and everything of it — its nodes, summaries, recounts and
        metadata (the compaction count with it) — in one transaction; its name is free
        again. Returns what was deleted: {id, name, nodes, summaries, compactions}."""
        s = self.open_session(id_or_name)
        what = self.describe_deletion(s)
        self.backend.delete_session(s.id)
        with self._lock:
            self._sessions.pop(s.id, None)
        return what

    def describe_deletion(self, s: Session) -> dict:
        """What deleting session `s` would remove (for the confirmation line)."""
        s.sync()
        summaries = len(s.summaries())
        return {"id": s.id, "name": s.name, "nodes": self.backend.node_count(s.id) - summaries,
                "summaries": summaries, "compactions": s.compaction_count}

    def sessions(self) -> list[dict]:
        """Every session, newest use first: id, name, model, messages and tokens on its
        current branch, last use."""
        return self.backend.list_sessions()

    def close(self) -> None:
        self.backend.close()
