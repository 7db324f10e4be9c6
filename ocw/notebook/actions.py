"""What each command of the table does, returning a `Result` (ocw/notebook/results.py).

One function per command, named in `ACTIONS` by the table's names, each taking
the runtime and the words typed after the command. The magics (`%compact ...`),
the chat widget's slash commands (`/compact ...`) and the `%ocw` subcommands
all call `run`, so a command says and does the same thing wherever it is typed,
and its output reaches each surface as a result, not as printed text. The words
are parsed here (IPython's magic_arguments), so a typing mistake is the same
one-line `CommandUsage` everywhere.
"""
from __future__ import annotations

import re
from typing import Callable

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ocw.notebook import report
from ocw.notebook.items import content_preview, time_label
from ocw.notebook.commands import BY_NAME, help_html, help_lines
from ocw.notebook.results import Result, text
from ocw.text import checks
from ocw.text.errors import CommandUsage, OcwError


def whole_number(arg: str, usage: str) -> int:
    """A count argument: ASCII digits within DuckDB's INTEGER, or a one-line error."""
    if not re.fullmatch(r"[0-9]+", arg) or int(arg) > checks.INT32_MAX:
        raise CommandUsage(f"{usage} (got {arg!r}).")
    return int(arg)


def unquoted(value: str | None) -> str | None:
    """IPython's magic_arguments keeps the quotes (`--session 'my notes'` arrives as
    "'my notes'"): take one matching pair off, so the name is what the user typed."""
    if value is not None and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def split_focus(line: str) -> tuple[str, str | None]:
    """`%compact [N] [-- what to keep]`: the words before a standalone `--`, and the
    instructions after it (None without `--`; refused when empty)."""
    m = re.match(r"(.*?)(?:(?:^|\s)--(?:\s+|$)(.*))?$", line.strip(), re.S)
    head, focus = m.group(1).strip(), m.group(2)
    if focus is not None:
        focus = " ".join(focus.split())
        if not focus:
            raise CommandUsage("Nothing after --: write what the summary must keep, e.g. "
                               "%compact -- keep the list of file paths")
    return head, focus


def parse(fn: Callable, line: str, usage: str | None = None):
    """The options of `line` by `fn`'s @argument list; a mistake is one CommandUsage."""
    try:
        return parse_argstring(fn, line)
    except UsageError as e:
        raise CommandUsage(f"{usage.split()[0]}: {e} (usage: {usage})" if usage else str(e)) from None


def no_arguments(name: str, line: str) -> None:
    if line.strip():
        raise CommandUsage(f"{name} takes no arguments (got {line.strip()!r}).")


def _no_session(rt) -> Result:
    return Result(report.no_session(rt.config.lang))


def compact(rt, line: str, rich: bool) -> Result:
    """%compact [keep_recent_tokens] [-- what to keep] | --undo — fold older turns into the summary now,
    or undo the active compaction."""
    arg, focus = split_focus(line)
    if arg == "--undo" or arg.startswith("--undo "):
        if arg != "--undo" or focus is not None:
            raise CommandUsage("%compact --undo takes nothing else: it undoes the active compaction.")
        if rt.current_session() is None:
            return _no_session(rt)
        return Result(rt.undo_compaction())
    keep = None
    if arg:
        keep = whole_number(arg, "%compact takes a whole number of tokens to keep, e.g. %compact 2000, "
                                 "then optionally -- and what the summary must keep")
    if rt.current_session() is None:
        return _no_session(rt)
    try:
        return Result(rt.compact(keep, focus=focus).message(rt.config.lang))
    except KeyboardInterrupt:  # the stop button: compaction saved nothing (ocw/conversation/compaction.py)
        from ocw.text.i18n import text as i18n_text

        raise OcwError(i18n_text("compact_stopped", rt.config.lang),
                       hint=i18n_text("compact_stopped_hint", rt.config.lang)) from None


@magic_arguments()
@argument("--text", action="store_true", help="plain-text table instead of the widget")
def context(rt, line: str, rich: bool) -> Result:
    """%context — the ring and breakdown panel (a text table in a terminal)."""
    args = parse(context, line)
    s = rt.current_session()
    if rich and not args.text:
        w = rt.context_widget()
        return Result(repr(w), widget=w)
    return _no_session(rt) if s is None else Result(report.context_table(s, rt.config.lang))


@magic_arguments()
@argument("--all", action="store_true", help="every summary, superseded ones too")
def summary(rt, line: str, rich: bool) -> Result:
    """%summary [--all] — the active summary, what it covers, when and why it was made."""
    args = parse(summary, line, "%summary [--all]")
    s = rt.current_session()
    if s is None:
        return _no_session(rt)
    from ocw.notebook import summary_view

    bundle = summary_view.summary_bundle(s, args.all)
    return Result(bundle["text/plain"], html=bundle["text/html"])


def rewind(rt, line: str, rich: bool) -> Result:
    """%rewind [N | node_id] — HEAD back N turns (default 1) or to a node."""
    s = rt.require_session()
    arg = line.strip() or "1"
    if arg[:1] in "+-0123456789":  # a count, not a node id (ids start with n_)
        target = s.rewind_turns(whole_number(arg, "%rewind takes a number of turns (1 or more) or a node id"))
        what = f"{arg} turn{'s' if arg != '1' else ''}"
        said = f"Rewound {what}; HEAD is now {where(s, target)}."
    else:
        s.rewind(arg)
        said = f"Rewound to {where(s, arg)}."
    return Result(f"{said} The next %%chat starts a new branch (the old turns are kept: %branch).")


def where(s, node_id: str | None) -> str:
    """A message as a reader knows it — its number on the branch, role, time and first
    words — never its bare id (ids mean nothing in a note)."""
    if not node_id:
        return "the start"
    n = s.node(node_id)
    when = time_label(n["created_at"])
    words = content_preview(n["content"])
    return (f"message {n['depth']} ({n['role']}{', ' + when if when else ''})"
            + (f": “{words}”" if words else ""))


def branch(rt, line: str, rich: bool) -> Result:
    """%branch [node_id] — list branches, or switch to one."""
    s = rt.require_session()
    arg = line.strip()
    if arg:
        s.checkout(arg)
    return text(f"Switched to the branch ending at {where(s, s.head)}." if arg else "", report.branches_table(s))


def chat_widget(rt, line: str, rich: bool) -> Result:
    """%chat — the chat widget for the current session (also ocw.chat())."""
    no_arguments("%chat", line)
    w = rt.chat_widget()
    return Result(repr(w), widget=w)


def session(rt, line: str, rich: bool) -> Result:
    """%session NAME — continue another stored session (by name or id) from now on."""
    name = unquoted(line.strip())
    if not name:
        raise CommandUsage("%session takes the name or id of a stored session (see %sessions).")
    s = rt.switch_session(name)
    messages = s.node(s.head)["depth"] if s.head else 0
    return Result(f"Session {s.name!r} ({s.id}) is current: {messages} messages on its branch, model {s.model}. "
                  "The next %%chat continues it.")


@magic_arguments()
@argument("--name", default=None, help="name of the new session (default: the current session's, else the notebook's)")
@argument("--from-summary", dest="from_summary", nargs="?", const="2", default=None, metavar="N",
          help="start it from the current session's summary, memory and last N turns (default 2)")
def new(rt, line: str, rich: bool) -> Result:
    """%new [--name NAME] [--from-summary [N]] — a fresh session; the old one is kept."""
    args = parse(new, line, "%new [--name NAME] [--from-summary [N]]")
    if args.from_summary is not None:
        from ocw.notebook.continuing import new_from_summary

        turns = whole_number(args.from_summary, "--from-summary takes a number of turns to carry over, e.g. "
                                                "%new --from-summary 3")
        return Result(new_from_summary(rt, unquoted(args.name), turns))
    s = rt.new_session(unquoted(args.name))
    return Result(f"New session {s.name!r} — model {s.model}, window {s.context_window:,} tokens "
                  "(older sessions: %sessions).")


@magic_arguments()
@argument("--delete", default=None, metavar="NAME", help="delete this session (name or id) and everything of it")
@argument("--yes", action="store_true", help="confirm --delete")
def sessions(rt, line: str, rich: bool) -> Result:
    """%sessions [--delete NAME [--yes]] — list sessions with size and last use, or delete one."""
    args = parse(sessions, line, "%sessions [--delete NAME [--yes]]")
    if args.delete is None:
        if args.yes:
            raise CommandUsage("--yes confirms a deletion: %sessions --delete NAME --yes")
        from ocw.conversation.continue_from import origins

        rows = rt.store.sessions()
        return Result(report.sessions_table(rows, rt.current, origins(rt.store, rows)))
    return Result(rt.delete_session(unquoted(args.delete), confirmed=args.yes))


def help_(rt, line: str, rich: bool) -> Result:
    """%ocw help — the commands."""
    from ocw.text.safe_html import sanitize

    return Result("\n".join(help_lines(rt.config.lang)), html=sanitize(help_html(rt.config.lang)))


def doctor(rt, line: str, rich: bool) -> Result:
    """%ocw doctor — provider, key present, reachability, tokenizer, database, versions."""
    return Result(report.doctor(rt))


def tools(rt, line: str, rich: bool) -> Result:
    """%ocw tools — the tools the model can call."""
    s = rt.current_session()
    return Result(report.tools_table(rt.tool_registry().active(builtins=rt.config.tools, session=s),
                                     session=s, cap=rt.config.tool_result_cap))


def _code(on: bool) -> Callable:
    def allow_or_deny(rt, line: str, rich: bool) -> Result:
        s = rt.current_session() or rt.session_for()
        rt.tool_registry().enable_code_execution(on, session=s)
        if on:
            return Result(f"Code execution is ON for session {s.name!r}: the model can call run_python, which runs "
                          "code in this kernel and can change your variables. %ocw deny-code turns it off.")
        return Result(f"Code execution is off for session {s.name!r}.")

    allow_or_deny.__doc__ = BY_NAME["allow-code" if on else "deny-code"].usage
    return allow_or_deny


def export(rt, line: str, rich: bool) -> Result:
    """%ocw export [--format md|json] [--force] [PATH] — the branch or the session to a file."""
    from ocw.notebook import export as exporting

    fmt, force, path = exporting.parse_line(line)
    return Result(exporting.export(rt.require_session(), fmt, path, force=force))


def retry_save(rt, line: str, rich: bool) -> Result:
    """%ocw retry-save — store the reply a failed write (a full disk, a lock wait, a lost connection) left unsaved."""
    no_arguments("%ocw retry-save", line)
    return Result(rt.retry_save())


ACTIONS: dict[str, Callable[..., Result]] = {
    "compact": compact, "summary": summary, "context": context, "rewind": rewind, "branch": branch,
    "new": new, "sessions": sessions, "export": export, "session": session, "chat-widget": chat_widget,
    "help": help_, "doctor": doctor, "tools": tools, "allow-code": _code(True), "deny-code": _code(False),
    "retry-save": retry_save,
}


def run(rt, name: str, line: str = "", *, rich: bool = False) -> Result:
    """Run command `name` of the table (or one of its aliases) with the words `line`.
    The surface that calls it has checked the environment first (the magics' `friendly`,
    the chat widget's `_command`), once per command."""
    return ACTIONS[BY_NAME[name].name](rt, line, rich)
