"""What imports what (issue 14): `%load_ext ocw` stays light, and the walls hold.

- In a warm kernel, `%load_ext ocw` imports neither DuckDB nor httpx (they cost
  about half of its time before); the first `%%chat` does — the control that
  proves the check can see an import.
- The context engine is pure of the session: nothing under `ocw.context`
  imports `ocw.conversation.session`; the store modules import neither `ocw.conversation.session` nor the
  `ocw.conversation.sessions` façade (the store is rows in, rows out).
"""
from __future__ import annotations

import ast
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


def imports_of(path: Path) -> set[str]:
    """Absolute module names a source file imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_the_context_engine_does_not_import_the_session():
    for path in sorted((PKG / "context").glob("*.py")):
        found = {m for m in imports_of(path) if m in ("ocw.conversation.session", "ocw.conversation.sessions", "ocw.conversation.compaction")}
        assert not found, f"{path.name} imports {found}"


@pytest.mark.parametrize("module", ["store.py", "db.py", "migrations.py", "graph.py", "tail.py"])
def test_the_store_modules_do_not_import_the_session(module):
    found = {m for m in imports_of(PKG / module) if m in ("ocw.conversation.session", "ocw.conversation.sessions", "ocw.conversation.compaction")}
    assert not found, f"{module} imports {found}"


def test_importing_the_store_and_the_engine_loads_no_session_at_run_time():
    code = ("import sys, ocw.store.duckdb.store, ocw.context.engine, ocw.context.cut, ocw.context.occupancy;"
            "print([m for m in ('ocw.conversation.session', 'ocw.conversation.sessions') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_ast_check_sees_an_import():
    """The control for the two checks above: a file that does import the session is caught."""
    probe = PKG / "context" / "_probe_import_check.py"
    probe.write_text("from ..session import Session\n")
    try:
        assert "ocw.conversation.session" in imports_of(probe)
    finally:
        probe.unlink()
