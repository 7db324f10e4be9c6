"""Built-in tools: read-only views of the kernel, and (only behind an explicit
per-session opt-in, `%ocw allow-code`) code execution.

Everything they return is bounded, so one call cannot flood the window; the
session's tool-result cap then applies on top. None of them changes the user's
namespace except `run_python`, which exists only for a session that opted in.
"""
from __future__ import annotations

import ast
import inspect
import io
import os
import reprlib
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from ocw.conversation.tools import Tool

MAX_REPR = 4_000
MAX_FILE_CHARS = 20_000
MAX_VARIABLES = 200
_HIDDEN = ("In", "Out", "get_ipython", "exit", "quit")

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxset, _repr.maxfrozenset = 4, 50, 50, 50, 50
_repr.maxdict, _repr.maxdeque, _repr.maxarray = 50, 50, 50
_repr.maxstring, _repr.maxlong, _repr.maxother = MAX_REPR, 400, MAX_REPR


def _user_namespace(shell) -> dict:
    if shell is None:
        return {}
    hidden = getattr(shell, "user_ns_hidden", {})
    return {k: v for k, v in shell.user_ns.items()
            if not k.startswith("_") and k not in _HIDDEN and (k not in hidden or hidden[k] is not v)}


def _is_code(v) -> bool:
    return inspect.ismodule(v) or inspect.isclass(v) or inspect.isroutine(v) or isinstance(v, Tool)


def _kind(v) -> str:
    t = type(v)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _shape(v) -> str:
    try:
        shape = getattr(v, "shape", None)
        if shape is not None and not callable(shape):
            return "shape " + "×".join(str(x) for x in shape)
    except Exception:
        pass
    try:
        return f"len {len(v):,}"
    except Exception:
        return ""


def _bounded(text: str, limit: int = MAX_REPR) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[… {len(text) - limit:,} more characters]"


def _describe(v) -> str:
    kind, shape = _kind(v), _shape(v)
    head = f"{kind}" + (f" ({shape})" if shape else "")
    mod = type(v).__module__ or ""
    if mod.split(".")[0] == "pandas" and hasattr(v, "columns") and hasattr(v, "dtypes") and hasattr(v, "head"):
        return f"{head}\ndtypes:\n{v.dtypes.to_string()}\nhead:\n{v.head().to_string()}"
    if mod.split(".")[0] == "pandas" and hasattr(v, "dtype") and hasattr(v, "head"):  # a Series
        return f"{head}, dtype {v.dtype}\nhead:\n{v.head().to_string()}"
    return f"{head}\n{_repr.repr(v)}"


def _run_code(code: str, shell) -> str:
    """Run code in the user's namespace (IPython syntax such as %magics included);
    return what it printed and the repr of a final expression's value. An error
    raises with a short traceback of the user's code, in plain text."""
    source = shell.transform_cell(code) if hasattr(shell, "transform_cell") else code
    try:
        tree = ast.parse(source, "<run_python>")
    except SyntaxError as e:
        raise SyntaxError(f"{e.msg} (line {e.lineno})") from None
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    ns = shell.user_ns
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        try:
            exec(compile(ast.Module(body=tree.body, type_ignores=[]), "<run_python>", "exec"), ns)
            value = eval(compile(ast.Expression(body=last.value), "<run_python>", "eval"), ns) if last else None
        except Exception as e:
            frames = traceback.format_exception(type(e), e, e.__traceback__.tb_next)
            printed = out.getvalue()
            raise RuntimeError((printed + ("\n" if printed and not printed.endswith("\n") else "")
                                + "".join(frames[-6:])).strip()) from None
    text = out.getvalue()
    if value is not None:
        text += ("\n" if text and not text.endswith("\n") else "") + _repr.repr(value)
    return text


def make(shell, *, code_execution: bool = False, read_only: bool = True) -> dict[str, Tool]:
    def list_variables() -> str:
        """List the user's variables in this notebook: name, type, and shape or length."""
        rows = []
        for name, v in sorted(_user_namespace(shell).items()):
            if _is_code(v):
                continue
            shape = _shape(v)
            rows.append(f"{name}: {_kind(v)}" + (f" ({shape})" if shape else ""))
        if len(rows) > MAX_VARIABLES:
            rows = rows[:MAX_VARIABLES] + [f"[… {len(rows) - MAX_VARIABLES:,} more variables]"]
        return "\n".join(rows) or "(no variables)"

    def describe_variable(name: str) -> str:
        """Describe one variable of the notebook: its type, size, and a bounded repr (for a pandas DataFrame: shape, dtypes and the first rows)."""
        ns = _user_namespace(shell)
        if name not in ns:
            raise KeyError(f"no variable named {name!r}; call list_variables to see them")
        return _bounded(_describe(ns[name]))

    def read_file(path: str, max_chars: int = MAX_FILE_CHARS) -> str:
        """Read a text file inside the notebook's working directory (a relative path), up to max_chars characters."""
        root = Path.cwd().resolve()
        p = (root / Path(path).expanduser()).resolve()
        # A read-only tool the model drives must not reach ~/.ssh or /etc: only the
        # notebook's own folder tree (symlinks resolved) is readable.
        if p != root and root not in p.parents:
            raise PermissionError(f"{path} is outside the notebook's folder {root}; only files under it can be read")
        if not p.is_file():
            raise FileNotFoundError(f"{path} is not a file")
        limit = max(1, min(int(max_chars), MAX_FILE_CHARS))
        with open(p, "rb") as fh:
            if b"\0" in fh.read(4096):
                raise ValueError(f"{path} looks like a binary file ({os.path.getsize(p):,} bytes); only text files can be read")
        with open(p, encoding="utf-8", errors="replace") as fh:
            text = fh.read(limit + 1)
        if len(text) > limit:
            return text[:limit] + f"\n[… file continues; {os.path.getsize(p):,} bytes in all]"
        return text

    def run_python(code: str) -> str:
        """Run Python code in the user's notebook kernel (it can change their variables) and return what it printed and the value of its last expression. Code execution is on for this session only because the user allowed it."""
        if shell is None:
            raise RuntimeError("no kernel to run code in")
        return _bounded(_run_code(code, shell), MAX_FILE_CHARS) or "(no output)"

    tools: dict[str, Tool] = {}
    if read_only:
        for fn in (list_variables, describe_variable, read_file):
            tools[fn.__name__] = Tool(fn)
    if code_execution:
        tools["run_python"] = Tool(run_python)
    return tools


__all__ = ["make"]
