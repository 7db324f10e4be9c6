"""ocw — keep long LLM conversations in a notebook healthy.

`%load_ext ocw` in a notebook; from Python, `ocw.Store(path).create_session(...)`.
"""
from __future__ import annotations

from ocw._version import __version__  # noqa: E402,F401

from ocw.text.errors import OcwError  # noqa: E402
# Import the submodule now, so that importing it later (the magics do) cannot
# rebind `ocw.notebook.config` from the function below to the module.
from ocw.notebook import config as _config_module  # noqa: E402,F401


def __getattr__(name):
    # Lazy: importing ocw (and `%load_ext ocw`) must stay cheap — no DuckDB, no
    # httpx, no tokenizer, no widgets — until something is used.
    if name == "Store":
        from ocw.conversation.sessions import Store

        return Store
    if name == "Session":
        from ocw.conversation.session import Session

        return Session
    if name == "tool":
        from ocw.conversation.tools import tool

        return tool
    raise AttributeError(name)


def current_session():
    """The session the notebook's %%chat cells use (None before the first one)."""
    from ocw.notebook.magics import get_runtime

    rt = get_runtime()
    return rt.current_session() if rt is not None else None


def config():
    """The live `Ocw` configuration of this kernel (same object as %config Ocw)."""
    from ocw.notebook.magics import get_runtime

    rt = get_runtime()
    if rt is None:
        raise OcwError("ocw is not loaded", hint="run %load_ext ocw first")
    return rt.config


def chat():
    """The chat widget for the current session (the same as `%chat`): the conversation,
    its graph, a composer with slash commands, and the ring."""
    from ocw.notebook.magics import get_runtime

    rt = get_runtime()
    if rt is None:
        raise OcwError("ocw is not loaded", hint="run %load_ext ocw first")
    return rt.chat_widget()


def command(name, fn=None, *, help=None, args="", required=False):
    """Add a slash command: `@ocw.command("name", help=..., args=...)` on a function, or
    `ocw.command("name", fn)`. It appears in the chat widget's slash menu, `%ocw help` and
    `%ocw commands` after the built-ins, marked by who added it; `/name words` in the chat
    widget or `%ocw run name words` in a cell calls `fn("words")` (or `fn()` if it takes no
    argument). Its output is what it prints plus what it returns (None, a str, an
    `IPython.display.Markdown`/`HTML` — sanitized — or an ocw Result). A name a built-in has
    is kept but never runs: you are told so once. Installed packages add theirs through
    the `ocw.commands` entry-point group."""
    from ocw.notebook import user_commands

    try:
        out = user_commands.command(name, fn, help=help, args=args, required=required)
    except OcwError as e:
        from IPython.core.error import UsageError

        raise UsageError(e.user_message()) from None  # one line in a cell, no traceback
    if fn is not None:
        _tell()
        return out

    def decorate(f):
        try:
            out(f)
        except OcwError as e:
            from IPython.core.error import UsageError

            raise UsageError(e.user_message()) from None
        _tell()
        return f

    return decorate


def _tell():
    """Say the notices registering just raised (a shadowed built-in's name), once."""
    import sys

    from ocw.notebook import user_commands
    from ocw.notebook.magics import get_runtime

    rt = get_runtime()
    for line in user_commands.take_notices(rt.config.lang if rt is not None else None):
        print(line, file=sys.stderr)


def on(event, fn):
    """Run `fn` at a compaction: "pre_compact" (gets the plan; may veto it or add to the focus) or
    "post_compact" (gets the summary, the memory, the figures before → after). See ocw.conversation.hooks."""
    from ocw.conversation.hooks import on as _on

    return _on(event, fn)


def off(event, fn=None):
    """Remove a hook `ocw.on` added (every hook of `event` when fn is None); returns how many."""
    from ocw.conversation.hooks import off as _off

    return _off(event, fn)


def load_ipython_extension(ipython):
    from ocw.notebook.magics import load_ipython_extension as _load

    _load(ipython, make_widget=_make_widget)


def _make_widget(kind, runtime):
    # The root wires the layers: the notebook layer asks for widgets through this,
    # and the widgets (ipywidgets, anywidget) are imported only when one is shown.
    from ocw.widgets import make

    return make(kind, runtime)


def unload_ipython_extension(ipython):
    from ocw.notebook.magics import unload_ipython_extension as _unload

    _unload(ipython)


__all__ = ["Store", "OcwError", "current_session", "config", "chat", "command", "on", "off", "__version__"]
