"""The first `%%chat` of a kernel, paid for while the user reads.

A kernel's first turn used to cost 10–50× its second: the tokenizer's rank table
(≈0.2 s parsed, 0.1 s handed to tiktoken), the DuckDB, httpx and provider imports
(≈0.2 s), the TLS context (≈0.03 s) and the store's open all landed on it. `%load_ext ocw` itself must stay light —
it runs in a notebook's first cell, and a kernel that never chats should not pay
for a database driver — so it only starts this daemon thread, which pays the
process-wide, side-effect-free part: the imports and the encoding of the model
the configuration names. It opens no file and no connection (a store opened in
the background could hold a lock the user's next cell needs), prints nothing and
never raises: whatever it does not finish, the first turn does as before, and a
turn that needs an encoding the thread is building waits on the tokenizer's
lock instead of building it twice.

`%config Ocw.warm_up = False` (or OCW_WARM_UP=0) turns it off.
"""
from __future__ import annotations

import importlib
import sys
import threading

from ocw.text.errors import OcwError


def _modules(db: str) -> tuple[str, ...]:
    """The drivers a first turn imports, by where the sessions live."""
    store = "psycopg" if db.startswith(("postgresql:", "postgres:")) else "duckdb"
    return (store, "ocw.conversation.sessions", "ocw.conversation.turn")


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


def start(config) -> threading.Thread | None:
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
    except Exception:
        return None
    t = threading.Thread(target=_work, args=(provider, model, db), name="ocw-warm-up", daemon=True)
    t.start()
    return t
