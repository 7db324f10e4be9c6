"""Agent tools: kernel functions the model may call.

`@ocw.tool` turns a function into a tool: its name, its docstring as the
description, a JSON schema from its type hints. A hint ocw cannot express is
an error at registration, so a user learns it when defining the tool, not when
the model first calls it. Calls never raise into the turn: a raising tool, an
unknown name or malformed arguments all come back to the model as an error
result, and the user sees one readable line.
"""
from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Any, Callable, Literal, get_args, get_origin

from .errors import ToolError

_REGISTERED: dict[str, "Tool"] = {}
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
RESULT_PREVIEW_CHARS = 20_000  # bounded text of a built-in's answer


def _schema(hint, where: str) -> dict:
    if hint is inspect.Parameter.empty or hint is Any:
        raise ToolError(f"{where} needs a type hint (str, int, float, bool, list[...], dict[str, ...], Literal[...])")
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        kinds = {type(a) for a in args}
        if not kinds <= set(_JSON_TYPES):
            raise ToolError(f"{where}: Literal values must be str, int, float or bool")
        out = {"enum": list(args)}
        if len(kinds) == 1:
            out["type"] = _JSON_TYPES[kinds.pop()]
        return out
    if origin in (list, typing.List) or hint is list:
        return {"type": "array", "items": _schema(args[0], where) if args else {}}
    if origin in (dict, typing.Dict) or hint is dict:
        if args and args[0] is not str:
            raise ToolError(f"{where}: dict keys must be str (JSON objects)")
        return {"type": "object", "additionalProperties": _schema(args[1], where) if args else {}}
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:  # Optional[X]
            return _schema(non_none[0], where)
        return {"anyOf": [_schema(a, where) for a in non_none]}
    raise ToolError(f"{where}: type {hint!r} cannot be expressed as JSON; use str, int, float, bool, lists, dicts or Literal")


class Tool:
    def __init__(self, fn: Callable, name: str | None = None, description: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        if not self.name.replace("_", "").isalnum():
            raise ToolError(f"tool name {self.name!r} must be letters, digits and underscores")
        self.description = (description or inspect.getdoc(fn) or f"Call {self.name}.").strip()
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        props, required = {}, []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolError(f"{self.name}: *args/**kwargs cannot be described to a model; name each argument")
            schema = _schema(hints.get(p.name, p.annotation), f"{self.name}({p.name})")
            if p.default is not inspect.Parameter.empty:
                try:
                    json.dumps(p.default)
                    schema["default"] = p.default
                except TypeError:
                    pass
            else:
                required.append(p.name)
            props[p.name] = schema
        self.input_schema = {"type": "object", "properties": props, "required": required}
        self.signature = sig

    def definition(self) -> dict:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def __call__(self, *a, **kw):
        return self.fn(*a, **kw)

    def __repr__(self) -> str:
        return f"<ocw tool {self.name}{self.signature}>"


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None):
    """Register a kernel function as a tool the model can call.

        @ocw.tool
        def top_rows(table: str, n: int = 5) -> str:
            "The first n rows of a table in this notebook."
    """
    def register(f):
        t = Tool(f, name=name, description=description)
        _REGISTERED[t.name] = t
        return t

    return register(fn) if fn is not None else register


def unregister(name: str) -> None:
    _REGISTERED.pop(name, None)


def _render_result(value) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


class ToolRegistry:
    """The tools offered in one turn: the user's @ocw.tool functions, plus the
    built-in read-only tools when turned on."""

    def __init__(self, shell=None, config=None, builtins: bool = False):
        self.shell = shell
        self.config = config
        self.builtins = builtins
        self._code_execution = False

    def active(self, builtins: bool = False) -> "ToolRegistry | None":
        reg = ToolRegistry(self.shell, self.config, builtins=builtins)
        reg._code_execution = self._code_execution
        return reg if reg.tools() else None

    def enable_code_execution(self, on: bool = True) -> None:
        """Explicit per-session opt-in for run_python (shown by %ocw doctor)."""
        self._code_execution = on

    def code_execution_enabled(self) -> bool:
        return self._code_execution

    def tools(self) -> dict[str, Tool]:
        out: dict[str, Tool] = {}
        if self.builtins or self._code_execution:
            from . import builtin_tools

            out.update(builtin_tools.make(self.shell, code_execution=self._code_execution,
                                          read_only=self.builtins))
        out.update(_REGISTERED)
        return out

    def definitions(self) -> list[dict]:
        return [t.definition() for t in self.tools().values()]

    def run(self, call: dict) -> dict:
        """Run one tool_use block; always returns a tool_result block."""
        from .report import redact

        tools = self.tools()
        name, args = call.get("name"), call.get("input")
        t = tools.get(name)
        if t is None:
            return self._result(call, f"unknown tool {name!r}; available: {', '.join(tools) or 'none'}", True)
        if not isinstance(args, dict) or "_raw" in args:
            raw = args.get("_raw") if isinstance(args, dict) else args
            return self._result(call, f"malformed arguments for {name}: expected a JSON object, got {raw!r}", True)
        try:
            bound = t.signature.bind(**args)
        except TypeError as e:
            return self._result(call, f"bad arguments for {name}: {e}", True)
        try:
            value = t.fn(*bound.args, **bound.kwargs)
        except Exception as e:
            return self._result(call, f"{name} raised {type(e).__name__}: {e}", True)
        return self._result(call, redact(_render_result(value)), False)

    @staticmethod
    def _result(call: dict, content: str, is_error: bool) -> dict:
        return {"type": "tool_result", "tool_use_id": call.get("id", ""), "content": content, "is_error": is_error}


__all__ = ["tool", "Tool", "ToolRegistry", "unregister"]
