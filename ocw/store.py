"""The DuckDB store: one file, many sessions, an append-only node DAG per session.

DuckDB locks a file to one process. Two kernels on one file must both work, and
a turn must stay cheap, so `_Db` holds a connection through a burst of work and
lets go once idle (or after `max_hold` seconds of continuous use, so a busy
kernel cannot starve another); opening waits, with a bounded retry, while the
other process holds the lock. Every write bumps the session's `rev`, which lets
a process notice another's writes with one cheap read (see Session.sync).

The store's interface (`Store` + `Session`) is all the context engine sees, so
a server database could stand behind it later without touching the engine.
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from .errors import SessionNotFound, StoreBusy, StoreError
from .migrations import migrate

# No code path may download anything at run time (DuckDB would fetch extensions).
DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def default_db_path() -> str:
    env = os.environ.get("OCW_DB")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "ocw", "ocw.duckdb")


def new_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex[:12]


class _Db:
    """A connection held through a burst of work, released once idle."""

    def __init__(self, path: str, *, idle_close: float = 0.1, max_hold: float = 0.5, lock_timeout: float = 60.0):
        self.path = path
        self.memory = path == ":memory:"
        self.idle_close = idle_close
        self.max_hold = max_hold
        self.lock_timeout = lock_timeout
        self._lock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._opened_at = 0.0
        self._depth = 0
        self._timer: threading.Timer | None = None
        self.opens = 0  # how many times the file was opened (for tests and the benchmark)

    def _open(self) -> None:
        if not self.memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.005
        while True:
            try:
                self._con = duckdb.connect(self.path, config=DUCKDB_CONFIG)
                break
            except duckdb.IOException as e:
                if "lock" not in str(e).lower() or time.monotonic() >= deadline:
                    if "lock" in str(e).lower():
                        raise StoreBusy(f"database {self.path} is locked by another process") from None
                    raise StoreError(f"cannot open {self.path}: {e}") from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.05)
        self._opened_at = time.monotonic()
        self.opens += 1

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._con is None:
                self._open()
            self._depth += 1
            try:
                yield self._con  # type: ignore[misc]
            finally:
                self._depth -= 1
                if self._depth == 0 and not self.memory:
                    self._schedule_release()

    def _schedule_release(self) -> None:
        if time.monotonic() - self._opened_at >= self.max_hold:
            self._close()
            return
        self._timer = threading.Timer(self.idle_close, self._release_if_idle)
        self._timer.daemon = True
        self._timer.start()

    def _release_if_idle(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._close()

    def _close(self) -> None:
        if self._con is not None:
            try:
                self._con.close()
            finally:
                self._con = None

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All or nothing: on any exception the file is exactly as before."""
        with self.connect() as con:
            con.begin()
            try:
                yield con
            except BaseException:
                con.rollback()
                raise
            con.commit()


class Store:
    """Sessions in one DuckDB file (or `":memory:"`)."""

    def __init__(self, path: str | os.PathLike | None = None, **db_options):
        self.path = str(path) if path is not None else default_db_path()
        self.db = _Db(self.path, **db_options)
        self._sessions: dict = {}
        self._sessions_lock = threading.Lock()
        try:
            with self.db.connect() as con:
                migrate(con)
        except duckdb.Error as e:
            raise StoreError(f"cannot open ocw database {self.path}: {e}") from None

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # -- sessions -------------------------------------------------------------
    def create_session(
        self,
        *,
        model: str = "ocw-offline",
        context_window: int = 8192,
        system_prompt: str = "",
        name: str | None = None,
        provider: str = "offline",
        metadata: dict | None = None,
    ):
        from .session import Session

        if not isinstance(context_window, int) or context_window <= 0:
            raise StoreError(f"context_window must be a positive integer, got {context_window!r}")
        sid = new_id("s_")
        name = name or sid
        meta = {"context_compaction_count": 0, **(metadata or {})}
        with self.db.transaction() as con:
            if con.execute("SELECT 1 FROM sessions WHERE name = ?", [name]).fetchone():
                raise StoreError(f"a session named {name!r} already exists", hint="open it, or pick another name")
            con.execute(
                "INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, head_id,"
                " occupancy_generation, metadata, rev) VALUES (?, ?, ?, ?, ?, ?, NULL, 0, ?, 0)",
                [sid, name, provider, model, context_window, system_prompt, json.dumps(meta)],
            )
        return self._session_object(sid)

    def open_session(self, id_or_name: str):
        with self.db.connect() as con:
            row = con.execute(
                "SELECT id FROM sessions WHERE id = ? OR name = ? ORDER BY (id = ?) DESC LIMIT 1",
                [id_or_name, id_or_name, id_or_name],
            ).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {id_or_name!r} in {self.path}")
        return self._session_object(row[0])

    def get_or_create_session(self, name: str, **kwargs):
        try:
            return self.open_session(name)
        except SessionNotFound:
            return self.create_session(name=name, **kwargs)

    def _session_object(self, sid: str):
        """One Session object per id per Store, so every view shares its caches and events."""
        from .session import Session

        with self._sessions_lock:
            s = self._sessions.get(sid)
            if s is None:
                s = self._sessions[sid] = Session(self, sid)
        s.sync()
        return s

    def sessions(self) -> list[dict]:
        """Every session, newest use first: id, name, model, messages, tokens, last use."""
        with self.db.connect() as con:
            rows = con.execute(
                """
                SELECT s.id, s.name, s.provider, s.model, s.context_window, s.updated_at, s.created_at,
                       count(n.id) FILTER (WHERE n.role <> 'llm') AS messages,
                       coalesce(sum(n.tokens) FILTER (WHERE n.role <> 'llm'), 0) AS tokens
                FROM sessions s LEFT JOIN nodes n ON n.session_id = s.id
                GROUP BY ALL ORDER BY s.updated_at DESC, s.created_at DESC
                """
            ).fetchall()
        keys = ["id", "name", "provider", "model", "context_window", "updated_at", "created_at", "messages", "tokens"]
        return [dict(zip(keys, r)) for r in rows]

    def close(self) -> None:
        self.db.close()
