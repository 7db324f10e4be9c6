"""What imports what (issue 14): `%load_ext ocw` stays light, and the walls hold.

- In a warm kernel, `%load_ext ocw` itself imports neither DuckDB nor httpx (they
  cost about half of its time before); with the warm-up off, the first `%%chat`
  does — the control that proves the check can see an import. With the warm-up
  on (the default, issue 28), a background thread imports them and builds the
  model's encoding after `%load_ext` returns, and opens nothing: the database file
  does not exist until the first turn.
- Importing the store and the engine loads no session at run time (the static
  rule, imports one way down the layers, is tests/test_layers.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_kernel import Kernel

PKG = Path(__file__).resolve().parent.parent / "ocw"
HEAVY = ("duckdb", "httpx", "httpcore")


def kernel_env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")}
    env["OCW_DB"] = str(tmp_path / "imports.duckdb")
    env.update(extra)
    return env


def run(k: Kernel, code: str) -> str:
    return k.run(code).stdout


LOADED = "import sys, json; print(json.dumps(sorted(m for m in {mods} if m in sys.modules)))".format(mods=HEAVY)


@pytest.mark.timeout(120)
def test_load_ext_in_a_warm_kernel_imports_neither_duckdb_nor_httpx(tmp_path):
    k = Kernel(kernel_env(tmp_path, OCW_WARM_UP="0"), str(tmp_path / "kernel.log"))
    try:
        run(k, "import IPython, ipykernel, traitlets")  # warm: what any kernel has
        assert json.loads(run(k, LOADED)) == []
        run(k, "%load_ext ocw")
        run(k, "%ocw help")
        assert json.loads(run(k, LOADED)) == []
        run(k, "%%chat\nhello")  # the control: a turn needs the store, so DuckDB loads now
        assert "duckdb" in json.loads(run(k, LOADED))
    finally:
        k.close()


WARMED = ("import sys, json, ocw.text.tokens as t, ocw.notebook.magics as m;"
          "w = m.get_runtime().warm_up;"
          "print(json.dumps([w is not None and not w.is_alive(), sorted(t.loaded_encodings()),"
          " sorted(x for x in {mods} if x in sys.modules)]))").format(mods=HEAVY)


@pytest.mark.timeout(120)
def test_the_warm_up_loads_the_first_turns_costs_in_the_background_and_opens_nothing(tmp_path):
    env = kernel_env(tmp_path, OCW_PROVIDER="openai", OCW_MODEL="gpt-4o", OCW_BASE_URL="http://127.0.0.1:9/v1")
    k = Kernel(env, str(tmp_path / "kernel.log"))
    try:
        run(k, "import IPython, ipykernel, traitlets")
        assert json.loads(run(k, LOADED)) == []
        run(k, "%load_ext ocw")
        deadline = time.monotonic() + 60
        while True:  # the thread's end is the condition; a slow machine only waits longer
            done, encodings, loaded = json.loads(run(k, WARMED))
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert done, "the warm-up thread did not finish within 60 s"
        assert encodings == ["o200k_base"]  # gpt-4o's encoding, built once for the first turn
        assert {"duckdb", "httpx"} <= set(loaded)  # the driver and the HTTP client (httpcore loads with a client)
        assert not (tmp_path / "imports.duckdb").exists()  # nothing opened: no file, no lock, no request
    finally:
        k.close()


NEW_OCW_MODULES = ("import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('ocw')"
                   " and m not in before)))")


@pytest.mark.timeout(120)
def test_after_the_warm_up_a_first_turn_imports_no_module_of_ocws(tmp_path):
    """The warm-up's module list (`warmup._modules`) is what a first `%%chat` loads: on an
    existing database, after the thread ends, the first turn imports nothing of ocw's."""
    from ocw.conversation.sessions import Store

    Store(str(tmp_path / "imports.duckdb")).close()  # a returning user's database
    k = Kernel(kernel_env(tmp_path, OCW_MODEL="gpt-4o"), str(tmp_path / "kernel.log"))
    try:
        run(k, "import IPython, ipykernel, traitlets")
        run(k, "%load_ext ocw")
        deadline = time.monotonic() + 60
        while not json.loads(run(k, WARMED))[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        run(k, "import sys; before = set(sys.modules)")
        out = k.run("%%chat\nhello")
        assert "auto-compact at 80 %" in out.stdout  # the turn ran: its status line
        assert json.loads(run(k, NEW_OCW_MODULES)) == []
        run(k, "before = set(sys.modules)")
        run(k, "import ocw.bench.floor")  # the control: modules not loaded yet are seen
        assert json.loads(run(k, NEW_OCW_MODULES)) == ["ocw.bench", "ocw.bench.floor"]
    finally:
        k.close()


def test_importing_the_store_and_the_engine_loads_no_session_at_run_time():
    code = ("import sys, ocw.store.duckdb.store, ocw.context.engine, ocw.context.cut, ocw.context.occupancy;"
            "print([m for m in ('ocw.conversation.session', 'ocw.conversation.sessions') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


