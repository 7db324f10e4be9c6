"""What imports what (issue 14): `%load_ext ocw` stays light, and the walls hold.

- In a warm kernel, `%load_ext ocw` imports neither DuckDB nor httpx (they cost
  about half of its time before); the first `%%chat` does — the control that
  proves the check can see an import.
- Importing the store and the engine loads no session at run time (the static
  rule, imports one way down the layers, is tests/test_layers.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_kernel import Kernel

PKG = Path(__file__).resolve().parent.parent / "ocw"
HEAVY = ("duckdb", "httpx", "httpcore")


def kernel_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")}
    env["OCW_DB"] = str(tmp_path / "imports.duckdb")
    return env


def run(k: Kernel, code: str) -> str:
    return k.run(code).stdout


LOADED = "import sys, json; print(json.dumps(sorted(m for m in {mods} if m in sys.modules)))".format(mods=HEAVY)


@pytest.mark.timeout(120)
def test_load_ext_in_a_warm_kernel_imports_neither_duckdb_nor_httpx(tmp_path):
    k = Kernel(kernel_env(tmp_path), str(tmp_path / "kernel.log"))
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


def test_importing_the_store_and_the_engine_loads_no_session_at_run_time():
    code = ("import sys, ocw.store.duckdb.store, ocw.context.engine, ocw.context.cut, ocw.context.occupancy;"
            "print([m for m in ('ocw.conversation.session', 'ocw.conversation.sessions') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


