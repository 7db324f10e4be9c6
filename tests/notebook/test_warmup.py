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
                   "modules": ["ocw.providers.openai", "duckdb", "ocw.conversation.sessions", "ocw.conversation.turn"]}
    monkeypatch.setenv("OCW_PROVIDER", "anthropic")
    monkeypatch.setenv("OCW_MODEL", "claude-sonnet-4-5")
    monkeypatch.setenv("OCW_DB", "postgresql://u@localhost/db")
    got = _warm(monkeypatch)
    assert got["models"] == ["claude-sonnet-4-5"] and got["tls"] is True
    assert got["modules"][:2] == ["ocw.providers.anthropic", "psycopg"]  # the configured database's driver
    monkeypatch.setenv("OCW_PROVIDER", "offline")
    assert _warm(monkeypatch)["tls"] is False  # no HTTP provider: no TLS context built
