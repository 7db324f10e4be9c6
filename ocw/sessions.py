"""`ocw.Store`: sessions in a store, as Session objects.

The store beneath (ocw/store.py, DuckDB) is rows in, rows out and knows no
Session; this is where Session objects are built — one per session id per
Store, so every view of a session shares its cache and its events.
"""
from __future__ import annotations

import os
import threading

from .errors import SessionNotFound, StoreError
from .session import Session
from .ids import new_id
from .store import DuckDBStore, default_db_path


def open_backend(path: str, **options):
    """The store behind a path: a DuckDB file (or ":memory:")."""
    return DuckDBStore(path, **options)


class Store:
    """Sessions in one store: `Store(path)`, default OCW_DB or ~/.local/share/ocw/ocw.duckdb."""

    def __init__(self, path: str | os.PathLike | None = None, **options):
        self.path = str(path) if path is not None else default_db_path()
        self.backend = open_backend(self.path, **options)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    @property
    def db(self):
        """The DuckDB connection manager (tests and tools read the file through it)."""
        return self.backend.db

    def __repr__(self) -> str:
        return f"Store({self.backend.describe()!r})"

    def create_session(self, *, model: str = "ocw-offline", context_window: int = 8192, system_prompt: str = "",
                       name: str | None = None, provider: str = "offline", metadata: dict | None = None) -> Session:
        if not isinstance(context_window, int) or isinstance(context_window, bool) or context_window <= 0:
            raise StoreError(f"context_window must be a positive integer, got {context_window!r}")
        sid = new_id("s_")
        row = {"id": sid, "name": name or sid, "provider": provider, "model": model, "context_window": context_window,
               "system_prompt": system_prompt, "metadata": {"context_compaction_count": 0, **(metadata or {})}}
        self.backend.insert_session(row)
        return self._session(sid)

    def open_session(self, id_or_name: str) -> Session:
        sid = self.backend.find_session(id_or_name)
        if sid is None:
            raise SessionNotFound(f"no session {id_or_name!r} in {self.backend.describe()}")
        return self._session(sid)

    def get_or_create_session(self, name: str, **kwargs) -> Session:
        try:
            return self.open_session(name)
        except SessionNotFound:
            return self.create_session(name=name, **kwargs)

    def _session(self, sid: str) -> Session:
        with self._lock:
            s = self._sessions.get(sid)
            if s is None:
                s = self._sessions[sid] = Session(self, self.backend, sid)
        s.sync()
        return s

    def sessions(self) -> list[dict]:
        """Every session, newest use first: id, name, model, messages and tokens on its
        current branch, last use."""
        return self.backend.list_sessions()

    def close(self) -> None:
        self.backend.close()
