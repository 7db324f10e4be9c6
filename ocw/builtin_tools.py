"""Built-in tools: read-only views of the kernel, and (only behind an explicit
per-session opt-in) code execution.

Everything they return is bounded, so one call cannot flood the window; the
turn's tool-result cap then applies on top.
"""
from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from .tools import Tool

MAX_REPR = 4_000
MAX_FILE_CHARS = 20_000


def _user_namespace(shell) -> dict:
    if shell is None:
        return {}
    hidden = getattr(shell, "user_ns_hidden", {})
    return {k: v for k, v in shell.user_ns.items() if not k.startswith("_") and k not in hidden
            and k not in ("In", "Out", "get_ipython", "exit", "quit")}


def _shape(v) -> str:
    shape = getattr(v, "shape", None)
    if shape is not None and not callable(shape):
        try:
            return "shape " + "×".join(str(x) for x in shape)
        except TypeError:
            pass
    try:
        return f"len {len(v)}"
    except Exception:
        return ""


def make(shell, *, code_execution: bool = False, read_only: bool = True) -> dict[str, Tool]:
    def list_variables() -> str:
        """List the user's variables in this notebook: name, type, and shape or length."""
        rows = []
        for name, v in sorted(_user_namespace(shell).items()):
            if type(v).__name__ in ("module", "function", "builtin_function_or_method", "type") or isinstance(v, Tool):
                continue
            rows.append(f"{name}: {type(v).__module__}.{type(v).__qualname__}" + (f" ({_shape(v)})" if _shape(v) else ""))
        return "\n".join(rows) or "(no variables)"

    def describe_variable(name: str) -> str:
        """Describe one variable: its type, size, and a bounded repr (for a pandas DataFrame: shape, dtypes and head)."""
        ns = _user_namespace(shell)
        if name not in ns:
            raise KeyError(f"no variable named {name!r}; call list_variables to see them")
        v = ns[name]
        kind = f"{type(v).__module__}.{type(v).__qualname__}"
        if kind.startswith("pandas.") and hasattr(v, "dtypes") and hasattr(v, "head"):
            text = f"{kind} {_shape(v)}\ndtypes:\n{v.dtypes.to_string()}\nhead:\n{v.head().to_string()}"
        else:
            text = f"{kind} {_shape(v)}\n{repr(v)}"
        return text if len(text) <= MAX_REPR else text[:MAX_REPR] + f"\n[… {len(text) - MAX_REPR:,} more characters]"

    def read_file(path: str, max_chars: int = MAX_FILE_CHARS) -> str:
        """Read a text file (relative to the notebook's working directory), up to max_chars characters."""
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"{path} is not a file")
        limit = max(1, min(int(max_chars), MAX_FILE_CHARS))
        with open(p, encoding="utf-8", errors="replace") as fh:
            text = fh.read(limit + 1)
        if len(text) > limit:
            size = os.path.getsize(p)
            return text[:limit] + f"\n[… file continues; {size:,} bytes in all]"
        return text

    def run_python(code: str) -> str:
        """Run Python code in the user's kernel and return what it printed (code execution is on for this session)."""
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            result = shell.run_cell(code, store_history=False, silent=True) if shell is not None else None
        text = out.getvalue() + err.getvalue()
        if result is not None and result.error_in_exec is not None:
            text += f"\n{type(result.error_in_exec).__name__}: {result.error_in_exec}"
        return text[:MAX_FILE_CHARS] or "(no output)"

    tools: dict[str, Tool] = {}
    if read_only:
        for fn in (list_variables, describe_variable, read_file):
            tools[fn.__name__] = Tool(fn)
    if code_execution:
        tools["run_python"] = Tool(run_python)
    return tools


__all__ = ["make"]
