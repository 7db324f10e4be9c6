"""The tools offered in one turn, and running one call.

Apart from ocw/conversation/tools.py (what a tool is, `@ocw.tool`) so that the
built-in tools, which are tools, and the registry, which offers them, import
one way: builtin_tools -> tools, toolbox -> both.
"""
from __future__ import annotations

import contextlib
import io
import sys

from ocw.conversation import builtin_tools
from ocw.conversation.tools import Tool, registered, render_result
from ocw.text.secrets import redact


class _Tee(io.TextIOBase):
    """Collects what a tool prints, so it reaches the cell only after redaction."""

    def __init__(self):
        self.buf = io.StringIO()

    def writable(self) -> bool:
        return True

    def write(self, s) -> int:
        return self.buf.write(s)


class ToolRegistry:
    """The tools offered in one turn: the user's @ocw.tool functions, plus the
    built-in read-only tools when turned on, plus `run_python` only for a session
    that opted in (`%ocw allow-code`). The opt-in lives in this kernel's memory,
    per session id: a new session, or a restarted kernel, starts without it."""

    def __init__(self, shell=None, config=None, builtins: bool = False, session_id: str | None = None):
        self.shell = shell
        self.config = config
        self.builtins = builtins
        self.session_id = session_id
        self._code_sessions: set[str | None] = set()

    def active(self, builtins: bool = False, session=None) -> "ToolRegistry | None":
        """The registry for one turn of `session` (an id or a Session), or None if it offers nothing."""
        sid = getattr(session, "id", session)
        reg = ToolRegistry(self.shell, self.config, builtins=builtins, session_id=sid)
        reg._code_sessions = self._code_sessions  # shared: a later opt-out applies at once
        return reg if reg.tools() else None

    def enable_code_execution(self, on: bool = True, session=None) -> None:
        """The explicit per-session opt-in for run_python (`%ocw allow-code` / `deny-code`)."""
        sid = getattr(session, "id", session) if session is not None else self.session_id
        (self._code_sessions.add if on else self._code_sessions.discard)(sid)

    def code_execution_enabled(self, session=None) -> bool:
        sid = getattr(session, "id", session) if session is not None else self.session_id
        return sid in self._code_sessions

    def tools(self) -> dict[str, Tool]:
        out: dict[str, Tool] = {}
        code = self.code_execution_enabled()
        if self.builtins or code:
            out.update(builtin_tools.make(self.shell, code_execution=code, read_only=self.builtins))
        out.update(registered())
        return out

    def definitions(self) -> list[dict]:
        return [t.definition() for t in self.tools().values()]

    def run(self, call: dict) -> dict:
        """Run one tool_use block; always returns a tool_result block (redacted).
        Only KeyboardInterrupt (the stop button) escapes."""
        tools = self.tools()
        name, args = call.get("name"), call.get("input")
        t = tools.get(name)
        if t is None:
            return self._result(call, f"unknown tool {name!r}; available: {', '.join(tools) or 'none'}", True)
        if not isinstance(args, dict) or "_raw" in args:
            raw = args.get("_raw") if isinstance(args, dict) else args
            return self._result(call, f"malformed arguments for {name}: expected a JSON object, got {raw!r}", True)
        problem = t.check_arguments(args)
        if problem:
            return self._result(call, f"bad arguments for {name}: {problem}", True)
        out, err = _Tee(), _Tee()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                value = t.call(args)
            text, is_error = render_result(value), False
        except (Exception, SystemExit) as e:
            text, is_error = f"{name} raised {type(e).__name__}: {e}", True
        finally:
            self._echo(out.buf.getvalue(), sys.stdout)
            self._echo(err.buf.getvalue(), sys.stderr)
        return self._result(call, text, is_error)

    @staticmethod
    def _echo(text: str, stream) -> None:
        if text:
            stream.write(redact(text))
            stream.flush()

    @staticmethod
    def _result(call: dict, content: str, is_error: bool) -> dict:
        return {"type": "tool_result", "tool_use_id": call.get("id", ""), "content": redact(content),
                "is_error": is_error}


def no_tools_result(call: dict) -> dict:
    """The answer to a call the model made although this turn offers no tools."""
    return ToolRegistry._result(call, f"tool {call.get('name')!r} is not available: no tools are on in this turn", True)


__all__ = ["ToolRegistry", "no_tools_result"]
