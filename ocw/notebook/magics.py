"""`%%chat`, `%compact`, `%context`, `%rewind`, `%branch`, `%new`, `%sessions`,
`%ocw help|doctor|tools` — thin bodies that call the Runtime.

ocw's magics shadow none of IPython's (a new session is `%new`; IPython's
`%clear` stays IPython's), and unloading ocw removes only the magics it
registered itself.

Errors follow one path: an OcwError becomes a one-line UsageError that says
what to do (no traceback); OCW_DEBUG=1 (or %config Ocw.debug = True) shows
tracebacks instead.
"""
from __future__ import annotations

import functools
import re
import sys
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ocw.text import checks
from ocw.notebook import report
from ocw.notebook.config import PROVIDER_NAMES, make_config
from ocw.text.errors import OcwError
from ocw.notebook.runtime import Runtime



def interrupted_message(tool_steps: int) -> str:
    """What an interrupted %%chat kept, in one line."""
    if tool_steps:  # finished tool steps are stored in call + result pairs
        kept = ("the finished step is saved" if tool_steps == 1
                else f"the {tool_steps} finished steps are saved")
        return (f"Interrupted after {tool_steps} tool step{'s' if tool_steps != 1 else ''}: {kept} (calls with "
                "their results), the interrupted one is not; the next %%chat continues from there.")
    return "Interrupted: nothing of this turn was saved; run the cell again to resend it."


def friendly(fn):
    """Turn ocw's typed errors into one-line UsageErrors (tracebacks with debug on)."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            self.runtime.config.check_environment()
            return fn(self, *args, **kwargs)
        except OcwError as e:
            if _debug(self.runtime.config):
                raise
            raise UsageError(e.user_message()) from None

    return wrapper


def _debug(config) -> bool:
    try:
        return bool(config.debug)
    except OcwError:  # a bad OCW_DEBUG: its own error is shown elsewhere; here, one line
        return False


def _whole_number(arg: str, usage: str) -> int:
    """A magic's count argument: ASCII digits within DuckDB's INTEGER, or a one-line error."""
    if not re.fullmatch(r"[0-9]+", arg) or int(arg) > checks.INT32_MAX:
        raise UsageError(f"{usage} (got {arg!r}).")
    return int(arg)


def _unquoted(value: str | None) -> str | None:
    """IPython's magic_arguments keeps the quotes (`--session 'my notes'` arrives as
    "'my notes'"): take one matching pair off, so the name is what the user typed."""
    if value is not None and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _split_focus(line: str) -> tuple[str, str | None]:
    """`%compact [N] [-- what to keep]`: the words before a standalone `--`, and the
    instructions after it (None without `--`; refused when empty)."""
    m = re.match(r"(.*?)(?:(?:^|\s)--(?:\s+|$)(.*))?$", line.strip(), re.S)
    head, focus = m.group(1).strip(), m.group(2)
    if focus is not None:
        focus = " ".join(focus.split())
        if not focus:
            raise UsageError("Nothing after --: write what the summary must keep, e.g. "
                             "%compact -- keep the list of file paths")
    return head, focus


def _no_arguments(magic: str, line: str) -> None:
    if line.strip():
        raise UsageError(f"{magic} takes no arguments (got {line.strip()!r}).")


class _StreamView:
    """Streams a reply: sanitized HTML updated in place in a notebook, text in a terminal.

    The reply is model text, so it goes out only as `safe_html.display_bundle` (never as
    `text/markdown`, which JupyterLab would render with its HTML live). Re-rendering the
    whole reply costs time on the kernel's thread (about 14 ms for 20 kB here), so the
    view waits at least 50 ms, and at least four times the last render, between updates:
    rendering stays under a fifth of the stream's time however long the reply grows.
    """

    MIN_INTERVAL = 0.05  # seconds between in-place updates
    RENDER_SHARE = 4  # wait at least this many times the last render's cost

    def __init__(self, rich: bool):
        self.rich = rich
        self.text = ""
        self.handle = None
        self._last = 0.0
        self._interval = self.MIN_INTERVAL

    def on_text(self, delta: str) -> None:
        self.text += delta
        if not self.rich:
            from ocw.text.safe_html import plain_text

            sys.stdout.write(plain_text(delta))
            sys.stdout.flush()
            return
        from IPython.display import display

        if self.handle is None:
            self.handle = display(self._bundle(self.text), raw=True, display_id=True)
        elif time.monotonic() - self._last > self._interval:
            started = time.monotonic()
            self.handle.update(self._bundle(self.text), raw=True)
            self._last = time.monotonic()
            self._interval = max(self.MIN_INTERVAL, self.RENDER_SHARE * (self._last - started))

    @staticmethod
    def _bundle(text: str) -> dict:
        # text/plain carries the reply too: a plain-text front end (jupyter console,
        # nbconvert --to markdown/script, nbval) shows it instead of the HTML.
        from ocw.text.safe_html import display_bundle  # lazy: %load_ext stays light

        return display_bundle(text)

    def on_system(self, message: str) -> None:
        print(message, flush=True)

    def on_tool(self, call: dict, result: dict) -> None:
        # The text so far stays above the call; the next step's text starts below it.
        if self.rich and self.handle is not None:
            self.handle.update(self._bundle(self.text), raw=True)
        elif not self.rich and self.text and not self.text.endswith("\n"):
            sys.stdout.write("\n")
        self.handle, self.text = None, ""
        report.show_tool_call(call, result, rich=self.rich)

    def finish(self, note: str | None = None) -> None:
        if self.rich and self.handle is not None:
            self.handle.update(self._bundle(self.text + (f"\n\n*{note}*" if note else "")), raw=True)
        elif self.rich and note:
            print(note)
        elif not self.rich:
            if self.text:
                sys.stdout.write("\n")
            if note:
                print(note)


@magics_class
class OcwMagics(Magics):
    def __init__(self, shell, runtime: Runtime):
        super().__init__(shell)
        self.runtime = runtime

    @property
    def rich(self) -> bool:
        return type(self.shell).__name__ == "ZMQInteractiveShell"

    @magic_arguments()
    @argument("--session", "-s", default=None, help="session name or id (default: named after the notebook)")
    @argument("--new", action="store_true", help="start a fresh session first")
    @argument("--model", "-m", default=None, help="model to use from now on in this session")
    @argument("--provider", "-p", default=None, choices=list(PROVIDER_NAMES), help="provider")
    @argument("--tools", action="store_true", default=None, help="offer the built-in read-only tools")
    @cell_magic
    @friendly
    def chat(self, line, cell):
        """Send the cell to the model as the user message; the reply streams below."""
        args = parse_argstring(self.chat, line)
        if not cell or not cell.strip():
            raise UsageError("The %%chat cell is empty: write your message below the %%chat line.")
        cell = self._expand_references(cell, _unquoted(args.model))
        view = _StreamView(self.rich)
        try:
            self.runtime.chat(cell, session=_unquoted(args.session), new=args.new, model=_unquoted(args.model),
                              provider=args.provider, tools=args.tools,
                              on_text=view.on_text, on_system=view.on_system, on_tool=view.on_tool)
        except KeyboardInterrupt as e:
            # One message for one event: the partial reply stays as it was, and the
            # error line (which also stops a Run All) says what was kept.
            view.finish()
            raise UsageError(interrupted_message(getattr(getattr(e, "turn_result", None), "tool_steps", 0))) from None
        view.finish()  # a reached step limit was already said by the turn's system message
        if self.runtime.config.status_line and self.runtime.current is not None:
            print(report.status_line(self.runtime.current, self.runtime.config.lang))

    def _expand_references(self, cell: str, model: str | None) -> str:
        """{name}, {In[n]}, {Out[n]}, {Err} outside code (ocw/notebook/references.py), expanded
        before the model is called; a value that was cut is said in one line."""
        if "{" not in cell and "}" not in cell:
            return cell
        from ocw.notebook import references
        from ocw.text.tokens import encoding_for_model

        cfg, current = self.runtime.config, self.runtime.current
        model = model or cfg.model or (current.model if current is not None else cfg.resolved_model())
        text, notes = references.expand(cell, references.sources_of(self.shell, _state.get("errors")),
                                        encoding=encoding_for_model(model).name)
        for note in notes:
            print(f"Note: {note} in the message (the model reads the cut value).")
        return text

    @line_magic
    @friendly
    def compact(self, line):
        """%compact [keep_recent_tokens] [-- what to keep] — fold older turns into the summary now."""
        arg, focus = _split_focus(line)
        keep = None
        if arg:
            keep = _whole_number(arg, "%compact takes a whole number of tokens to keep, e.g. %compact 2000, "
                                      "then optionally -- and what the summary must keep")
        if self.runtime.current_session() is None:
            print(report.no_session(self.runtime.config.lang))
            return
        print(self.runtime.compact(keep, focus=focus).message(self.runtime.config.lang))

    @magic_arguments()
    @argument("--text", action="store_true", help="plain-text table instead of the widget")
    @line_magic
    @friendly
    def context(self, line):
        """%context — the ring and breakdown panel (a text table in a terminal)."""
        args = parse_argstring(self.context, line)
        s = self.runtime.current_session()
        if self.rich and not args.text:
            from IPython.display import display

            display(self.runtime.context_widget())
            return
        if s is None:
            print(report.no_session(self.runtime.config.lang))
            return
        print(report.context_table(s, self.runtime.config.lang))

    @magic_arguments()
    @argument("--all", action="store_true", help="every summary, superseded ones too")
    @line_magic
    @friendly
    def summary(self, line):
        """%summary [--all] — the active summary, what it covers, when and why it was made."""
        try:
            args = parse_argstring(self.summary, line)
        except UsageError as e:
            raise UsageError(f"%summary: {e} (usage: %summary [--all])") from None
        s = self.runtime.current_session()
        if s is None:
            print(report.no_session(self.runtime.config.lang))
            return
        from ocw.notebook import summary_view

        if self.rich:
            from IPython.display import display

            display(summary_view.summary_bundle(s, args.all), raw=True)
        else:
            print(summary_view.summary_text(s, args.all))

    @line_magic
    @friendly
    def rewind(self, line):
        """%rewind [N | node_id] — HEAD back N turns (default 1) or to a node."""
        s = self.runtime.require_session()
        arg = line.strip() or "1"
        if arg[:1] in "+-0123456789":  # a count, not a node id (ids start with n_)
            target = s.rewind_turns(_whole_number(arg, "%rewind takes a number of turns (1 or more) or a node id"))
            what = f"{arg} turn{'s' if arg != '1' else ''}"
        else:
            s.rewind(arg)
            target, what = arg, arg
        print(f"Rewound {what}; HEAD is now {target or 'the start'}. The next %%chat starts a new branch "
              f"(the old turns are kept: %branch).")

    @line_magic
    @friendly
    def branch(self, line):
        """%branch [node_id] — list branches, or switch to one."""
        s = self.runtime.require_session()
        arg = line.strip()
        if arg:
            s.checkout(arg)
            print(f"Switched to {arg}.")
        print(report.branches_table(s))

    @line_magic("chat")
    @friendly
    def chat_widget(self, line):
        """%chat — the chat widget for the current session (also ocw.chat())."""
        _no_arguments("%chat", line)
        from IPython.display import display

        display(self.runtime.chat_widget())

    @line_magic
    @friendly
    def session(self, line):
        """%session NAME — continue another stored session (by name or id) from now on."""
        name = _unquoted(line.strip())
        if not name:
            raise UsageError("%session takes the name or id of a stored session (see %sessions).")
        s = self.runtime.switch_session(name)
        messages = s.node(s.head)["depth"] if s.head else 0
        print(f"Session {s.name!r} ({s.id}) is current: {messages} messages on its branch, model {s.model}. "
              "The next %%chat continues it.")

    @magic_arguments()
    @argument("--name", default=None, help="name of the new session (default: the current session's, else the notebook's)")
    @line_magic
    @friendly
    def new(self, line):
        """%new [--name NAME] — a fresh session; the old one is kept."""
        args = parse_argstring(self.new, line)
        s = self.runtime.new_session(_unquoted(args.name))
        print(f"New session {s.name!r} — model {s.model}, window {s.context_window:,} tokens (older sessions: %sessions).")

    @magic_arguments()
    @argument("--delete", default=None, metavar="NAME", help="delete this session (name or id) and everything of it")
    @argument("--yes", action="store_true", help="confirm --delete")
    @line_magic
    @friendly
    def sessions(self, line):
        """%sessions [--delete NAME [--yes]] — list sessions with size and last use, or delete one."""
        try:
            args = parse_argstring(self.sessions, line)
        except UsageError as e:
            raise UsageError(f"%sessions: {e} (usage: %sessions [--delete NAME [--yes]])") from None
        if args.delete is None:
            if args.yes:
                raise UsageError("--yes confirms a deletion: %sessions --delete NAME --yes")
            print(report.sessions_table(self.runtime.store.sessions(), self.runtime.current))
            return
        print(self.runtime.delete_session(_unquoted(args.delete), confirmed=args.yes))

    @line_magic
    @friendly
    def ocw(self, line):
        """%ocw help | doctor | tools | allow-code | deny-code | export [--format md|json] [--force] [PATH]"""
        words = line.strip().split() or ["help"]
        cmd = words[0]
        if cmd == "export":
            print(self._export(line.strip()[len("export"):]))
            return
        if len(words) > 1:
            raise UsageError(f"%ocw {cmd} takes no further arguments (got {' '.join(words[1:])!r}); try %ocw help")
        if cmd == "help":
            from ocw.notebook.commands import help_lines

            print("\n".join(help_lines(self.runtime.config.lang)))
        elif cmd == "doctor":
            print(report.doctor(self.runtime))
        elif cmd == "tools":
            s = self.runtime.current_session()
            print(report.tools_table(self.runtime.tool_registry().active(builtins=self.runtime.config.tools, session=s),
                                     session=s, cap=self.runtime.config.tool_result_cap))
        elif cmd in ("allow-code", "deny-code"):
            s = self.runtime.current_session() or self.runtime.session_for()
            self.runtime.tool_registry().enable_code_execution(cmd == "allow-code", session=s)
            if cmd == "allow-code":
                print(f"Code execution is ON for session {s.name!r}: the model can call run_python, which runs "
                      "code in this kernel and can change your variables. %ocw deny-code turns it off.")
            else:
                print(f"Code execution is off for session {s.name!r}.")
        else:
            raise UsageError(f"unknown %ocw command {cmd!r}; try %ocw help")


    def _export(self, rest: str) -> str:
        """`%ocw export [--format md|json] [--force] [PATH]` (ocw/notebook/export.py)."""
        from ocw.notebook import export

        fmt, force, path = export.parse_line(rest)
        return export.export(self.runtime.require_session(), fmt, path, force=force)


_state: dict = {}


def load_ipython_extension(ipython):
    if "runtime" in _state and _state.get("shell") is ipython:
        return  # loading twice is harmless
    cfg, dropped = make_config(ipython)
    for note in dropped:
        print(note, file=sys.stderr)
    ipython.configurables.append(cfg)
    runtime = Runtime(ipython, cfg)
    ipython.register_magics(OcwMagics(ipython, runtime))
    from ocw.notebook.references import ErrorMemory  # the last error, for {Err} in a %%chat cell

    errors = ErrorMemory()
    ipython.events.register("post_run_cell", errors)
    _state.update(runtime=runtime, shell=ipython, config=cfg, errors=errors)


def unload_ipython_extension(ipython):
    runtime = _state.pop("runtime", None)
    cfg = _state.pop("config", None)
    _state.pop("shell", None)
    errors = _state.pop("errors", None)
    if errors is not None:
        try:
            ipython.events.unregister("post_run_cell", errors)
        except ValueError:  # already gone
            pass
    if runtime is not None:
        runtime.close()
    mm = ipython.magics_manager
    for kind, table in mm.magics.items():
        for name, fn in list(table.items()):
            # Only ocw's own: a name another extension or IPython registered stays.
            if isinstance(getattr(fn, "__self__", None), OcwMagics):
                del table[name]
    mm.registry.pop("OcwMagics", None)
    if cfg in getattr(ipython, "configurables", []):
        ipython.configurables.remove(cfg)


def get_runtime() -> Runtime | None:
    return _state.get("runtime")
