"""Agent tools: kernel functions the model may call.

`@ocw.tool` turns a function into a tool: its name, its docstring as the
description, a JSON schema from its type hints. A hint ocw cannot express is
an error at registration, so a user learns it when defining the tool, not when
the model first calls it. Calls never raise into the turn: a raising tool, an
unknown name, malformed arguments or arguments of the wrong type all come back
to the model as an error result, and the user sees one readable line. Only the
stop button (KeyboardInterrupt) ends a call early, and it ends the turn.

Everything a tool returns or prints is redacted (values of secret-looking
environment variables) before the model, the store or the cell sees it.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import sys
import types
import typing
from typing import Annotated, Any, Callable, Literal, get_args, get_origin

from ocw.text.errors import ToolError

_REGISTERED: dict[str, "Tool"] = {}
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI and Anthropic both accept
_SUPPORTED = "str, int, float, bool, list[...], dict[str, ...], Literal[...], Optional[...]"


def _schema(hint, where: str) -> dict:
    """The JSON schema of one type hint; ToolError for a hint JSON cannot express."""
    if hint is inspect.Parameter.empty:
        raise ToolError(f"{where} needs a type hint ({_SUPPORTED})")
    if hint is Any or hint is object:
        raise ToolError(f"{where}: {getattr(hint, '__name__', hint)} says nothing the model can use; "
                        f"use one of {_SUPPORTED}")
    if hint is type(None):
        return {"type": "null"}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        out = _schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            out["description"] = " ".join(notes)
        return out
    if origin is Literal:
        if not args or not all(type(a) in _JSON_TYPES for a in args):
            raise ToolError(f"{where}: Literal values must be str, int, float or bool")
        kinds = {type(a) for a in args}
        out = {"enum": list(args)}
        if len(kinds) == 1:
            out["type"] = _JSON_TYPES[kinds.pop()]
        return out
    if hint is list or origin is list:
        if len(args) > 1:
            raise ToolError(f"{where}: list takes one item type, e.g. list[str]")
        return {"type": "array", "items": _schema(args[0], where)} if args else {"type": "array"}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise ToolError(f"{where}: dict keys must be str (JSON object keys are strings)")
        return {"type": "object", "additionalProperties": _schema(args[1], where)} if args else {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        nullable = type(None) in args
        parts = [_schema(a, where) for a in args if a is not type(None)]
        if len(parts) == 1:
            inner = parts[0]
            if not nullable:
                return inner
            if set(inner) <= {"type", "description"} and isinstance(inner.get("type"), str):
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": parts + ([{"type": "null"}] if nullable else [])}
    if origin in (set, frozenset, tuple) or hint in (set, frozenset, tuple):
        raise ToolError(f"{where}: {_hint_name(hint)} cannot be expressed in JSON; use list[...] instead")
    raise ToolError(f"{where}: type {_hint_name(hint)} cannot be expressed as JSON; use {_SUPPORTED}")


def _hint_name(hint) -> str:
    return hint.__name__ if isinstance(hint, type) else repr(hint)


# -- checking the model's arguments against the schema ------------------------------
def _type_ok(value, t: str) -> bool:
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    if t == "null":
        return value is None
    return True


def _describe(schema: dict) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_describe(s) for s in schema["anyOf"])
    t = schema.get("type")
    return " or ".join(t) if isinstance(t, list) else (t or "any value")


def check_value(value, schema: dict, where: str) -> str | None:
    """None if `value` fits `schema` (the subset `_schema` produces), else why not."""
    if "anyOf" in schema:
        if any(check_value(value, s, where) is None for s in schema["anyOf"]):
            return None
        return f"{where} must be {_describe(schema)}, not {json.dumps(value, default=repr)[:80]}"
    if "enum" in schema:
        ok = any(value == v and type(value) is type(v) for v in schema["enum"])
        return None if ok else f"{where} must be {_describe(schema)}, not {json.dumps(value, default=repr)[:80]}"
    t = schema.get("type")
    kinds = t if isinstance(t, list) else [t] if t else []
    if kinds and not any(_type_ok(value, k) for k in kinds):
        return f"{where} must be {_describe(schema)}, not {json.dumps(value, default=repr)[:80]}"
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            err = check_value(item, schema["items"], f"{where}[{i}]")
            if err:
                return err
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for k, item in value.items():
            err = check_value(item, schema["additionalProperties"], f"{where}[{k!r}]")
            if err:
                return err
    return None


class Tool:
    """A function the model may call, with the definition the model sees."""

    def __init__(self, fn: Callable, name: str | None = None, description: str | None = None):
        if not callable(fn):
            raise ToolError(f"@ocw.tool needs a function, not {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "")
        if not _NAME.match(self.name):
            raise ToolError(f"tool name {self.name!r} must be 1–64 letters, digits, '_' or '-'",
                            hint="pass name=... to @ocw.tool")
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise ToolError(f"{self.name}: async functions cannot be tools (the turn calls tools synchronously)",
                            hint="write a plain def that returns the result")
        self.description = (description or inspect.getdoc(fn) or f"Call {self.name}.").strip()
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError) as e:
            raise ToolError(f"{self.name}: cannot read its signature ({e})") from None
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # NameError for an undefined forward reference, and friends
            raise ToolError(f"{self.name}: its type hints cannot be resolved ({type(e).__name__}: {e})") from None
        props, required = {}, []
        self._positional: list[str] = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind == p.VAR_POSITIONAL else "**"
                raise ToolError(f"{self.name}: {star}{p.name} cannot be described to a model; name each argument")
            if p.kind == p.POSITIONAL_ONLY:
                self._positional.append(p.name)
            schema = _schema(hints.get(p.name, p.annotation), f"{self.name}({p.name})")
            if p.default is not inspect.Parameter.empty:
                try:
                    json.dumps(p.default)
                    schema["default"] = p.default
                except (TypeError, ValueError):
                    pass
            else:
                required.append(p.name)
            props[p.name] = schema
        self.input_schema = {"type": "object", "properties": props, "required": required}
        self.signature = sig

    def definition(self) -> dict:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def check_arguments(self, args: dict) -> str | None:
        """None if the model's arguments fit this tool, else a sentence saying why not."""
        props = self.input_schema["properties"]
        unknown = [k for k in args if k not in props]
        if unknown:
            return f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; " \
                   f"{self.name} takes {', '.join(props) or 'no arguments'}"
        missing = [k for k in self.input_schema["required"] if k not in args]
        if missing:
            return f"missing required argument{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
        for k, v in args.items():
            if v is None and props[k].get("default", ...) is None:
                continue  # `x: int = None` accepts its default
            err = check_value(v, props[k], k)
            if err:
                return err
        return None

    def call(self, args: dict):
        pos = [args[k] for k in self._positional if k in args]
        kw = {k: v for k, v in args.items() if k not in self._positional}
        return self.fn(*pos, **kw)

    def __call__(self, *a, **kw):
        return self.fn(*a, **kw)

    def __repr__(self) -> str:
        return f"<ocw tool {self.name}{self.signature}>"


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None):
    """Register a kernel function as a tool the model can call.

        @ocw.tool
        def top_rows(table: str, n: int = 5) -> str:
            "The first n rows of a table in this notebook."

    The decorated object is still callable as the function. Re-running the cell
    replaces the tool; `ocw.conversation.tools.unregister(name)` removes it.
    """
    def register(f):
        t = Tool(f, name=name, description=description)
        _REGISTERED[t.name] = t
        return t

    return register(fn) if fn is not None else register


def unregister(name: str) -> None:
    _REGISTERED.pop(name, None)


def registered() -> dict[str, "Tool"]:
    """The user's @ocw.tool functions, by name."""
    return dict(_REGISTERED)


def render_result(value) -> str:
    """A tool's return value as the text the model reads."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float, list, tuple, dict)):
        try:
            return json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError):
            return repr(value)
    return repr(value)


__all__ = ["tool", "Tool", "unregister", "registered", "render_result", "check_value"]
