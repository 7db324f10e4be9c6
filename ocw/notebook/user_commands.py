"""Commands users add: `@ocw.command` in a notebook, and the `ocw.commands` entry points
of installed packages (seed 004: the menu "also fetches ... user commands").

What holds, and why:
- The built-ins stay the one table (ocw/notebook/commands.py); this module keeps only
  the added ones, in the order they were added, and every listing shows them after
  the built-ins, marked with who added them (a module, or an installed package).
- A built-in wins: an added command whose name (or an alias) a built-in has is kept
  but never listed or run, so the slash menu shows one entry and dispatch reaches the
  built-in. The user is told once per (name, who) which added command is shadowed —
  `take_notices` hands each notice out a single time, to whichever surface asks first.
- Entry points are read with importlib.metadata lazily, once: on the first listing or
  registration, never at `%load_ext` (loading must stay cheap). A package's command that
  fails to load is a notice, not an error: the other commands keep working.
- A command's output is what it prints plus what it returns: None, a str (plain text),
  an `ocw.Result` (text and HTML), or an IPython display object (`Markdown`, `HTML`,
  anything with `_repr_markdown_` / `_repr_html_`). HTML is sanitized and Markdown is
  rendered by ocw.text.safe_html (never trusted), and secret-looking environment values
  are redacted from both, as in every other output.
- A command that raises becomes one line (`CommandFailed`, an OcwError): the widget puts
  it into the conversation, a cell shows it as a one-line UsageError; no traceback.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import re
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from ocw.notebook.commands import BY_NAME
from ocw.notebook.results import Result
from ocw.text.errors import OcwError
from ocw.text.i18n import text as i18n_text
from ocw.text.secrets import redact

GROUP = "ocw.commands"  # the entry-point group installed packages add their commands in
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
LINE_LIMIT = 300  # a failure's one line is cut here

def words(key: str, lang: str | None = None, **kw) -> str:
    """ocw.text.i18n's `cmd_<key>` text."""
    return i18n_text(f"cmd_{key}", lang, **kw)


class CommandFailed(OcwError):
    """An added command raised: its one line."""


@dataclass(frozen=True)
class UserCommand:
    name: str
    fn: Callable[..., Any]
    help: str
    args: str
    required: bool
    who: str  # the module that defined it ("__main__": the notebook), or the package

    def by(self, lang: str | None = None) -> str:
        return words("added_by", lang, who=shown_who(self.who, lang))


_added: dict[str, UserCommand] = {}  # by name, in the order added
_notices: list[tuple[str, dict]] = []  # (key, params) not yet told
_told: set[tuple[str, str]] = set()  # (name, who) already told it is shadowed
_listeners: list = []  # callables returning the listener, or None once it is gone
_loaded = False


def shown_who(who: str, lang: str | None = None) -> str:
    """Who added a command, as a reader knows it: a package, a module, or this notebook."""
    return words("this_notebook", lang) if who == "__main__" else who


def is_builtin(name: str) -> bool:
    return name in BY_NAME


def _first_line(doc: str | None) -> str:
    return (inspect.cleandoc(doc).splitlines() or [""])[0] if doc else ""


def add(name: str, fn: Callable[..., Any], *, help: str | None = None, args: str = "",
        required: bool = False, who: str | None = None) -> UserCommand:
    """Register `fn` as the slash command `/name` (replacing an added one of that name)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise OcwError(words("bad_name", name=name))
    if not callable(fn):
        raise OcwError(words("not_callable", name=name, kind=type(fn).__name__))
    load_entry_points()
    who = who or getattr(fn, "__module__", None) or "__main__"
    cmd = UserCommand(name, fn, str(help) if help is not None else _first_line(fn.__doc__), str(args or ""),
                      bool(required), who)
    old = _added.get(name)
    if old is not None and old.who != who:
        _notices.append(("replaced", {"name": name, "old": old.who, "who": who}))
    _added[name] = cmd
    if is_builtin(name) and (name, who) not in _told:
        _told.add((name, who))
        _notices.append(("shadowed", {"name": name, "who": who}))
    _changed()
    return cmd


def command(name: str, fn: Callable[..., Any] | None = None, *, help: str | None = None, args: str = "",
            required: bool = False):
    """`@ocw.command("name", help=..., args=...)` on a function, or `ocw.command("name", fn)`."""
    if fn is not None:
        add(name, fn, help=help, args=args, required=required)
        return fn

    def decorate(f):
        add(name, f, help=help, args=args, required=required)
        return f

    return decorate


def remove(name: str) -> bool:
    """Forget the added command `name` (True if there was one)."""
    gone = _added.pop(name, None) is not None
    if gone:
        _changed()
    return gone


def clear() -> None:
    """Forget every added command and notice; the entry points are read again next time."""
    global _loaded
    _added.clear()
    _notices.clear()
    _told.clear()
    _loaded = False
    _changed()


def load_entry_points(force: bool = False) -> None:
    """The `ocw.commands` entry points of installed packages, read once (`force`: again,
    for a package installed since)."""
    global _loaded
    if _loaded and not force:
        return
    _loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=GROUP):
        who = getattr(getattr(ep, "dist", None), "name", None) or ep.value.split(":")[0]
        try:
            fn = ep.load()
            add(ep.name, fn, help=getattr(fn, "ocw_help", None), args=getattr(fn, "ocw_args", ""),
                required=bool(getattr(fn, "ocw_required", False)), who=who)
        except Exception as e:  # noqa: BLE001 - one package's mistake is told, never fatal
            _notices.append(("load_failed", {"name": ep.name, "who": who, "error": _one_line(e)}))


def added() -> list[UserCommand]:
    """Every added command a built-in does not shadow, in the order added."""
    load_entry_points()
    return [c for c in _added.values() if not is_builtin(c.name)]


def get(name: str) -> UserCommand | None:
    """The added command `/name` that runs (None for a built-in's name or no such command)."""
    load_entry_points()
    c = _added.get(name)
    return None if c is None or is_builtin(name) else c


def take_notices(lang: str | None = None) -> list[str]:
    """What the user has not been told yet (a shadowed name, a package that failed to load),
    each handed out once."""
    load_entry_points()
    out = []
    for key, params in _notices:
        out.append(words(key, lang, **{k: shown_who(v, lang) if k in ("who", "old") else v for k, v in params.items()}))
    _notices.clear()
    return out


def subscribe(fn: Callable[[], None]) -> None:
    """Call `fn()` whenever an added command comes or goes (weakly held if a bound method)."""
    _listeners.append(weakref.WeakMethod(fn) if inspect.ismethod(fn) else (lambda f=fn: f))


def _changed() -> None:
    for ref in list(_listeners):
        fn = ref()
        if fn is None:
            _listeners.remove(ref)
        else:
            fn()


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    line = f"{type(e).__name__}: {msg}" if msg != type(e).__name__ else msg
    return redact(line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 1] + "…")


def run(name: str, line: str = "", lang: str | None = None) -> Result:
    """Run the added command `/name` with the words `line`: its printed and returned output
    as a Result (sanitized, redacted); a command that raises is one CommandFailed line."""
    cmd = get(name)
    if cmd is None:
        raise OcwError(words("unknown", lang, name=name))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            value = cmd.fn(line) if _takes_argument(cmd.fn) else cmd.fn()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: one line, never a traceback
        raise CommandFailed(words("failed", lang, name=name, error=_one_line(e))) from None
    return as_result(out.getvalue(), value)


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it the line
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def as_result(printed: str, value: Any) -> Result:
    """What a command printed and returned, as one Result: text always, HTML when the
    value had more than text (sanitized: the command's author is trusted no more than a model)."""
    from ocw.text.safe_html import markdown_html, preformatted_html, sanitize

    printed = redact(printed.rstrip("\n"))
    text, html = "", None
    if value is None:
        pass
    elif isinstance(value, Result):
        text, html = value.text, sanitize(value.html) if value.html is not None else None
    elif isinstance(value, str):
        text = value
    elif hasattr(value, "_repr_markdown_"):
        md = value._repr_markdown_()
        md = md[0] if isinstance(md, tuple) else md
        text, html = str(md or ""), markdown_html(str(md or ""))
    elif hasattr(value, "_repr_html_"):
        h = value._repr_html_()
        h = h[0] if isinstance(h, tuple) else h
        html = sanitize(str(h or ""))
        from html import unescape

        from ocw.text.safe_html import plain_text

        text = plain_text(unescape(re.sub(r"<[^>]*>", "", html)))  # the words the sanitized HTML shows
    else:
        text = str(value)
    text = redact(text)
    if html is not None:
        html = redact(html)
        if printed:
            html = preformatted_html(printed) + html
    joined = "\n".join(p for p in (printed, text) if p)
    return Result(joined, html=html)
