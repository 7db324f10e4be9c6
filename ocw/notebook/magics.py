"""The magics: `%%chat`, and a line magic for each command of the table.

A line magic's body is one call: `actions.run` does the command and returns a
`Result`, which the magic shows in the cell (ocw/notebook/results.py). `%%chat`
streams the reply as it comes (ocw/notebook/streaming.py).

ocw's magics shadow none of IPython's (a new session is `%new`; IPython's
`%clear` stays IPython's), and unloading ocw removes only the magics it
registered itself.

Errors follow one path: an OcwError becomes a one-line UsageError that says
what to do (no traceback); OCW_DEBUG=1 (or %config Ocw.debug = True) shows
tracebacks instead.
"""
from __future__ import annotations

import functools
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ocw.notebook import actions, references, report, stop_button, user_commands, warmup
from ocw.notebook.actions import unquoted
from ocw.notebook.config import PROVIDER_NAMES, make_config
from ocw.notebook.runtime import Runtime
from ocw.notebook.streaming import StreamView, interrupted_message
from ocw.text.errors import OcwError

OCW_SUBCOMMANDS = ("help", "commands", "run", "doctor", "tools", "allow-code", "deny-code", "export",
                   "retry-save")  # `%ocw <word>`
WITH_ARGUMENTS = frozenset({"export", "run", "doctor"})  # the `%ocw` subcommands that take words after them


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


# Commands whose line is prose, taken as typed (`no_var_expand`): IPython's `$var`/`{expr}`
# expansion of a magic's line costs time quadratic in the line (a pasted 20,000-character
# focus took 16 s) and would evaluate braces a user wrote as text. The other commands keep
# IPython's expansion, which users rely on (`%rewind $node`, `%session $name`).
AS_TYPED = frozenset({"compact", "pin"})  # %pin {name}: ocw expands it (references.py), not IPython


def _runs(name: str):
    """A line magic that runs command `name` of the table and shows its result
    (ocw/notebook/actions.py); its help (`%compact?`) is the action's."""
    action = actions.ACTIONS[name]

    def magic(self, line):
        actions.run(self.runtime, name, line, rich=self.rich).show(self.rich)

    magic.__name__ = action.__name__.rstrip("_")
    magic.__doc__ = action.__doc__
    return no_var_expand(friendly(magic)) if name in AS_TYPED else friendly(magic)


@magics_class
class OcwMagics(Magics):
    def __init__(self, shell, runtime: Runtime):
        super().__init__(shell)
        self.runtime = runtime

    @property
    def rich(self) -> bool:
        """A notebook that renders widgets and display updates; jupyter console (which
        drops updates) and a terminal get text (ocw/notebook/frontend.py)."""
        return type(self.shell).__name__ == "ZMQInteractiveShell" and self.runtime.frontend().updates

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
        cell, notes = references.expand_message(self.runtime, cell, unquoted(args.model))
        for note in notes:
            print(note)
        view = StreamView(self.rich)
        try:
            self.runtime.chat(cell, session=unquoted(args.session), new=args.new, model=unquoted(args.model),
                              provider=args.provider, tools=args.tools,
                              on_text=view.on_text, on_system=view.on_system, on_tool=view.on_tool)
        except OcwError:
            view.finish()  # the reply shown so far ends its line; the error line follows
            raise
        except KeyboardInterrupt as e:
            # One message for one event: the partial reply stays as it was, and the
            # error line (which also stops a Run All) says what was kept.
            view.finish()
            raise UsageError(interrupted_message(getattr(getattr(e, "turn_result", None), "tool_steps", 0))) from None
        view.finish()  # a reached step limit was already said by the turn's system message
        if self.runtime.config.status_line and self.runtime.current is not None:
            print(report.status_line(self.runtime.current, self.runtime.config.lang,
                                     self.runtime.config.reactive_compact))

    compact = line_magic("compact")(_runs("compact"))  # each line as typed: see _runs
    context = line_magic("context")(_runs("context"))
    summary = line_magic("summary")(_runs("summary"))
    rewind = line_magic("rewind")(_runs("rewind"))
    branch = line_magic("branch")(_runs("branch"))
    chat_widget = line_magic("chat")(_runs("chat-widget"))
    session = line_magic("session")(_runs("session"))
    new = line_magic("new")(_runs("new"))
    sessions = line_magic("sessions")(_runs("sessions"))
    pin = line_magic("pin")(_runs("pin"))  # as typed, like compact: see AS_TYPED
    pins = line_magic("pins")(_runs("pins"))
    unpin = line_magic("unpin")(_runs("unpin"))
    memory = line_magic("memory")(_runs("memory"))

    @line_magic
    @friendly
    def ocw(self, line):
        """%ocw help | commands | run NAME [ARGS] | doctor [--send] | tools | allow-code | deny-code | retry-save
        | export [--format md|json] [--force] [PATH]"""
        words = line.strip().split() or ["help"]
        cmd = words[0]
        if cmd not in OCW_SUBCOMMANDS:
            raise UsageError(f"unknown %ocw command {cmd!r}; try %ocw help")
        rest = line.strip()[len(cmd):]
        if cmd not in WITH_ARGUMENTS and rest.strip():
            raise UsageError(f"%ocw {cmd} takes no further arguments (got {rest.strip()!r}); try %ocw help")
        for notice in user_commands.take_notices(self.runtime.config.lang):  # said once, wherever first
            print(notice)
        result = actions.run(self.runtime, cmd, rest, rich=self.rich)
        result.show(self.rich)
        if result.send is not None:  # /doctor --send: the report goes to the model as a %%chat cell would
            self._send(result.send)

    def _send(self, message: str) -> None:
        """A user message a command asks to send: a normal turn (stored, counted), streamed below."""
        view = StreamView(self.rich)
        try:
            self.runtime.chat(message, on_text=view.on_text, on_system=view.on_system, on_tool=view.on_tool)
        except KeyboardInterrupt as e:
            view.finish()
            raise UsageError(interrupted_message(getattr(getattr(e, "turn_result", None), "tool_steps", 0))) from None
        except OcwError:
            view.finish()  # the reply shown so far ends its line; the error line follows
            raise
        view.finish()


_state: dict = {}


def load_ipython_extension(ipython, make_widget=None):
    """Register the magics on `ipython`; `make_widget(kind, runtime)` builds the
    widgets (the package root passes ocw.widgets.make)."""
    if "runtime" in _state and _state.get("shell") is ipython:
        return  # loading twice is harmless
    cfg, dropped = make_config(ipython)
    for note in dropped:
        print(note, file=sys.stderr)
    ipython.configurables.append(cfg)
    runtime = Runtime(ipython, cfg, make_widget=make_widget)
    magics = OcwMagics(ipython, runtime)
    ipython.register_magics(magics)
    runtime.rich_cells = lambda: magics.rich  # progress in place (ocw/notebook/progress.py)
    stop_button.install(ipython)  # the stop button reaches a compaction the chat widget runs
    errors = runtime.errors = references.ErrorMemory()  # the last error, for {Err} in a message
    ipython.events.register("post_run_cell", errors)
    _state.update(runtime=runtime, shell=ipython, config=cfg, errors=errors)
    runtime.warm_up = warmup.start(cfg)  # the first %%chat's imports and tokenizer, off the cell's path


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
    stop_button.uninstall(ipython)
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
