"""The first `%%chat` of a kernel, paid for while the user reads.

A kernel's first turn used to cost 10–50× its second: the tokenizer's rank table
(≈0.2 s parsed, 0.1 s handed to tiktoken), the DuckDB, httpx and provider imports
(≈0.2 s), the TLS context (≈0.03 s) and the store's open all landed on it. `%load_ext ocw` itself must stay light —
it runs in a notebook's first cell, and a kernel that never chats should not pay
for a database driver — so it only starts this daemon thread, which pays the
process-wide, side-effect-free part: the imports and the encoding of the model
the configuration names. Then, if the configured database is an EXISTING DuckDB
file, it opens it as the first turn would (the read-only ownership look, the
migration check, the connection): that was most of what was left of the first
turn (≈0.4 s of 0.48 s at load 7, `python -m ocw.bench.first`). It creates no
file (a path that may change before the first cell must not appear on disk),
connects to no server, prints nothing and never raises: a refused or busy file
is left for the first turn to open again and report. The open store is only
offered (`take`): the runtime uses it if `Ocw.db` still names that path when it
first needs a store, and closes it otherwise. Holding the file meanwhile is
harmless — another kernel that wants it signals, and the connection is handed
over as for any idle store (ocw/store/duckdb/db.py). Whatever the thread does not
finish, the first turn does as before, and a turn that needs an encoding the
thread is building waits on the tokenizer's lock instead of building it twice.

`%config Ocw.warm_up = False` (or OCW_WARM_UP=0) turns it off.
"""
from __future__ import annotations

import importlib
import sys
import threading

from ocw.text.errors import OcwError


def _modules(db: str) -> tuple[str, ...]:
    """The modules a first turn imports: the driver, by where the sessions live, and
    ocw's own that a `%%chat` cell loads when it first runs (tests/test_imports.py
    checks that a warmed kernel's first turn imports no module of ocw's)."""
    store = "psycopg" if db.startswith(("postgresql:", "postgres:")) else "duckdb"
    return (store, "ocw.conversation.sessions", "ocw.conversation.turn", "ocw.notebook.summarizer",
            "ocw.notebook.progress")


def _work(provider: str, model: str, db: str) -> None:
    from ocw import providers
    from ocw.text.tokens import encoding_for_model, get_encoding

    try:
        get_encoding(encoding_for_model(model).name)
    except Exception:  # a broken OCW_ENCODING_FILE is reported by the turn that needs it
        pass
    try:
        providers.warm_up(provider)
    except Exception:  # an unknown provider is reported by the turn that needs it
        pass
    for name in _modules(db):
        try:
            importlib.import_module(name)
        except Exception:  # a missing driver is reported by the turn that needs it
            pass


def _open_existing(db: str, lock_timeout: float):
    """The store an existing DuckDB file opens as, or None: not a file yet (nothing is
    created ahead of the user), a PostgreSQL URL (no connection ahead), or a file the
    store refuses or cannot get now (the first turn opens it again and says why)."""
    from ocw.store.duckdb import ownership

    try:
        if not db or db.startswith(("postgresql:", "postgres:")) or not ownership.is_existing_database(db):
            return None
        from ocw.conversation.sessions import Store

        return Store(db, lock_timeout=lock_timeout)
    except BaseException:  # refused, busy, unreadable: said by the first turn, not here
        return None


class WarmUp(threading.Thread):
    """The warm-up thread, and the store it opened ahead (see the module's docstring)."""

    def __init__(self, provider: str, model: str, db: str, lock_timeout: float):
        super().__init__(name="ocw-warm-up", daemon=True)
        self._args = (provider, model, db, lock_timeout)
        self.db = db
        self._store = None
        self._done = False  # taken or closed: a store opened after that is closed at once
        self._guard = threading.Lock()

    def run(self) -> None:
        provider, model, db, lock_timeout = self._args
        _work(provider, model, db)
        store = _open_existing(db, lock_timeout)
        with self._guard:
            if not self._done:
                self._store, store = store, None
        if store is not None:  # %unload_ext came first
            store.close()

    def take(self, db: str):
        """The store opened ahead if it is `db`'s, else None (one opened ahead of a changed
        `Ocw.db` is closed). Waits for the thread: it is doing what the caller would do
        next. Only the first call can get a store."""
        self.join()
        with self._guard:
            store, self._store, self._done = self._store, None, True
        if store is not None and db != self.db:
            store.close()
            return None
        return store

    def close(self) -> None:
        """%unload_ext (or the kernel's exit) before the first turn: the store opened
        ahead is closed, not left holding the file."""
        with self._guard:
            store, self._store, self._done = self._store, None, True
        if store is not None:
            store.close()


def start(config) -> WarmUp | None:
    """Start warming up for `config` (an `Ocw`); None when it is turned off or the
    configuration cannot be read yet (the first turn will say why; a bad
    OCW_WARM_UP, which nothing else reads, is said here in one line)."""
    try:
        if not config.warm_up:
            return None
    except OcwError as e:
        print(f"ocw: {e.user_message()}", file=sys.stderr)
        return None
    try:
        from ocw.providers.registry import info

        provider = config.peek("provider")
        model = config.peek("model") or info(provider).default_model
        db = config.peek("db") or ""
        lock_timeout = config.peek("lock_timeout")
    except Exception:
        return None
    t = WarmUp(provider, model, db, lock_timeout)
    t.start()
    return t
