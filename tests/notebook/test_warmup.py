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


_FRESH = """
import json, sys
from ocw.notebook import warmup
from ocw.notebook.config import Ocw
from ocw.providers import http
t = warmup.start(Ocw())
t.join(60)
print(json.dumps({"alive": t.is_alive(), "tls": http._ssl_ctx is not None,
                  "modules": [m for m in ("psycopg", "ocw.conversation.sessions", "ocw.conversation.turn")
                              if m in sys.modules]}))
"""


def _fresh_kernel(env: dict) -> dict:
    """The warm-up in a fresh interpreter (this one imported everything long ago): what it
    left loaded for the first turn."""
    import json
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("OCW_")}
    out = subprocess.run([sys.executable, "-c", _FRESH], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_fresh_kernel_is_left_with_the_first_turns_imports_and_tls(tmp_path):
    got = _fresh_kernel({"OCW_PROVIDER": "openai", "OCW_DB": str(tmp_path / "w.duckdb")})
    assert got == {"alive": False, "tls": True, "modules": ["ocw.conversation.sessions", "ocw.conversation.turn"]}
    got = _fresh_kernel({"OCW_PROVIDER": "anthropic", "OCW_DB": "postgresql://u@localhost/db"})
    assert got["tls"] is True and "psycopg" in got["modules"]  # the configured database's driver
    got = _fresh_kernel({"OCW_PROVIDER": "offline", "OCW_DB": str(tmp_path / "w.duckdb")})
    assert got["tls"] is False  # no HTTP provider: no TLS context built
