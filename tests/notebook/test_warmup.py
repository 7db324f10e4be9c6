"""The warm-up `%load_ext` starts (ocw/notebook/warmup.py): what it loads, that it
can be turned off, and that a bad OCW_WARM_UP is one line, not a failed %load_ext.
What it does to a fresh kernel's imports is tests/test_imports.py."""
from __future__ import annotations

from ocw.notebook import warmup
from ocw.notebook.config import Ocw
from ocw.text import tokens


def _join(t):
    t.join(timeout=60)  # a bound, not a sleep: join returns as soon as the thread ends
    assert not t.is_alive()


def test_it_builds_the_configured_models_encoding(ocw_env, monkeypatch):
    monkeypatch.setenv("OCW_PROVIDER", "openai")
    monkeypatch.setenv("OCW_MODEL", "gpt-3.5-turbo")
    t = warmup.start(Ocw())
    assert t is not None and t.daemon  # never keeps a finished kernel alive
    _join(t)
    assert "cl100k_base" in tokens.loaded_encodings()


def test_off_starts_nothing(ocw_env, monkeypatch):
    monkeypatch.setenv("OCW_WARM_UP", "0")
    assert warmup.start(Ocw()) is None
    c = Ocw()
    c.warm_up = False  # %config Ocw.warm_up = False
    assert warmup.start(c) is None


def test_a_bad_variable_is_one_line_and_no_thread(ocw_env, monkeypatch, capsys):
    monkeypatch.setenv("OCW_WARM_UP", "maybe")
    assert warmup.start(Ocw()) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OCW_WARM_UP='maybe'" in err[0] and "OCW_WARM_UP=0" in err[0]


def test_a_bad_model_or_driver_never_raises_in_the_thread(ocw_env, monkeypatch):
    monkeypatch.setenv("OCW_ENCODING_FILE", "/nonexistent/ranks.tiktoken")
    warmup._work("offline", "x", "")  # a missing encoding file: the first turn says so, not the thread
    warmup._work("no-such-provider", "x", "postgresql://u@h/db")


def test_the_drivers_follow_the_database():
    assert warmup._modules("")[0] == "duckdb"
    assert warmup._modules("/tmp/x.duckdb")[0] == "duckdb"
    assert warmup._modules("postgresql://u@h/db")[0] == "psycopg"
    assert warmup._modules("postgres://u@h/db")[0] == "psycopg"


def test_it_fixes_no_default_a_later_variable_would_change(ocw_env, monkeypatch):
    c = Ocw()
    _join(warmup.start(c))  # %load_ext, then the user sets the variables before the first cell
    monkeypatch.setenv("OCW_PROVIDER", "openai")
    monkeypatch.setenv("OCW_MODEL", "gpt-4o")
    assert (c.provider, c.model) == ("openai", "gpt-4o")  # read afresh, as without a warm-up
    c.model = "gpt-4.1"  # configured: peek reads it and keeps it
    assert c.peek("model") == "gpt-4.1" and c.model == "gpt-4.1"


# -- the store opened ahead ------------------------------------------------------------------
def _existing(path):
    from ocw.conversation.sessions import Store

    Store(str(path)).close()  # a returning user's database
    return str(path)


def test_an_existing_database_is_opened_ahead_and_taken_once(ocw_env):
    db = _existing(ocw_env)
    t = warmup.start(Ocw())
    _join(t)
    store = t.take(db)
    assert store is not None and store.path == db
    assert store.backend.db.opens == 1  # opened by the thread; the first turn opens nothing
    assert t.take(db) is None  # only once: a second caller opens its own
    store.close()


def test_a_changed_database_path_gets_no_store_and_the_one_opened_ahead_is_closed(ocw_env, tmp_path):
    db = _existing(ocw_env)
    t = warmup.start(Ocw())
    _join(t)
    ahead = t._store
    assert ahead is not None and ahead.path == db
    assert t.take(str(tmp_path / "other.duckdb")) is None  # %config Ocw.db = … before the first cell
    assert ahead.backend.db._con is None  # closed, not leaked holding the file


def test_a_missing_file_is_not_created_ahead(ocw_env):
    t = warmup.start(Ocw())
    _join(t)
    assert not ocw_env.exists()
    assert t.take(str(ocw_env)) is None


def test_a_foreign_file_is_left_for_the_first_turn_to_refuse_and_its_bytes_stay(ocw_env):
    import duckdb

    con = duckdb.connect(str(ocw_env))
    con.execute("CREATE TABLE sales (id INTEGER)")
    con.close()
    before = ocw_env.read_bytes()
    t = warmup.start(Ocw())
    _join(t)
    assert t.take(str(ocw_env)) is None
    assert ocw_env.read_bytes() == before


def test_unload_before_the_first_turn_closes_the_store_opened_ahead(ocw_env):
    db = _existing(ocw_env)
    t = warmup.start(Ocw())
    _join(t)
    store = t._store
    assert store is not None
    t.close()
    assert t.take(db) is None
    assert store.backend.db._con is None  # the connection is closed: the file is not held


def test_the_first_chat_uses_the_store_opened_ahead(ocw_env, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from ocw.notebook import magics

    _existing(ocw_env)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ocw")
    try:
        rt = magics.get_runtime()
        _join(rt.warm_up)
        ahead = rt.warm_up._store
        assert ahead is not None
        shell.run_cell_magic("chat", "", "hello")
        assert rt.store is ahead  # the turn opened no store of its own
        assert rt.store.backend.db.opens == 1
    finally:
        shell.run_line_magic("unload_ext", "ocw")


def _warm(monkeypatch) -> dict:
    """Start the warm-up for the environment as set and wait for it; what it asked for: the
    model whose encoding it built, the modules it imported (both called through), and
    whether the process's TLS context exists after it."""
    import importlib

    from ocw.providers import http
    from ocw.text import tokens as tok

    asked = {"models": [], "modules": []}
    real_enc, real_import = tok.encoding_for_model, importlib.import_module
    monkeypatch.setattr(tok, "encoding_for_model", lambda m, *a, **k: asked["models"].append(m) or real_enc(m, *a, **k))
    monkeypatch.setattr(warmup.importlib, "import_module", lambda n, *a: asked["modules"].append(n) or real_import(n, *a))
    monkeypatch.setattr(http, "_ssl_ctx", None)  # as in a fresh kernel
    _join(warmup.start(Ocw()))
    asked["tls"] = http._ssl_ctx is not None
    return asked


def test_it_leaves_the_first_turns_imports_tls_and_encoding_ready(ocw_env, monkeypatch):
    from ocw.providers.registry import info

    monkeypatch.setenv("OCW_PROVIDER", "openai")
    got = _warm(monkeypatch)
    assert got == {"models": [info("openai").default_model], "tls": True,
                   "modules": ["ocw.providers.openai", "duckdb", "ocw.conversation.sessions", "ocw.conversation.turn",
                               "ocw.notebook.summarizer", "ocw.notebook.progress"]}
    monkeypatch.setenv("OCW_PROVIDER", "anthropic")
    monkeypatch.setenv("OCW_MODEL", "claude-sonnet-4-5")
    monkeypatch.setenv("OCW_DB", "postgresql://u@localhost/db")
    got = _warm(monkeypatch)
    assert got["models"] == ["claude-sonnet-4-5"] and got["tls"] is True
    assert got["modules"][:2] == ["ocw.providers.anthropic", "psycopg"]  # the configured database's driver
    monkeypatch.setenv("OCW_PROVIDER", "offline")
    assert _warm(monkeypatch)["tls"] is False  # no HTTP provider: no TLS context built


def test_a_store_opened_after_unload_is_closed_at_once_and_the_thread_ends_cleanly(ocw_env, monkeypatch):
    """%unload_ext before the thread opened the file: what it opens then is closed, not
    left holding the file; and a thread whose store was taken ends without an error
    (an exception in it would print a traceback into the user's notebook)."""
    db = _existing(ocw_env)
    opened = []
    real = warmup._open_existing
    monkeypatch.setattr(warmup, "_open_existing", lambda *a: opened.append(real(*a)) or opened[-1])
    late = warmup.WarmUp("offline", "x", db, 5.0)
    late.close()  # unloaded first
    late.run()  # the thread's body, here: it raises what the thread would
    assert opened[0] is not None and opened[0].backend.db._con is None  # opened, then closed at once
    assert late._store is None
    kept = warmup.WarmUp("offline", "x", db, 5.0)
    errors = []
    monkeypatch.setattr(warmup.threading, "excepthook", errors.append)
    kept.start()
    _join(kept)
    assert errors == []  # the thread ended without an exception
    store = kept.take(db)
    assert store is opened[1] and store.backend.db._con is not None
    store.close()
