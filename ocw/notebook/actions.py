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
from ocw.notebook import user_commands
from ocw.notebook.commands import BY_NAME, help_html, help_lines, slash_menu
from ocw.notebook.results import Result, text
from ocw.notebook.results import text as text_result
from ocw.text import checks, i18n
from ocw.text.errors import CommandUsage, OcwError
from ocw.text.i18n import text as i18n_text
from ocw.text.secrets import redact


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


def parse(fn: Callable, line: str, usage: str):
    """The options of `line` by `fn`'s @argument list; a mistake is one CommandUsage that names
    the command and shows its usage (what to type instead)."""
    try:
        return parse_argstring(fn, line)
    except UsageError as e:
        raise CommandUsage(f"{usage.split()[0]}: {e} (usage: {usage})") from None


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
    args = parse(context, line, "%context [--text]")
    s = rt.current_session()
    if rich and not args.text:
        w = rt.context_widget()
        return Result(repr(w), widget=w)
    if s is not None:
        rt.summarizer_for(s, probe=False)  # the summarizer configured now, shown without asking its server
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
@argument("--share", nargs=2, default=None, metavar=("NAME", "ROLE"),
          help="share this session with a database role (team database)")
@argument("--unshare", nargs=2, default=None, metavar=("NAME", "ROLE"), help="take a share back")
def sessions(rt, line: str, rich: bool) -> Result:
    """%sessions [--delete NAME [--yes] | --share NAME ROLE | --unshare NAME ROLE] — list sessions with
    size and last use, delete one, or share one with a database role (row-level security)."""
    usage = "%sessions [--delete NAME [--yes] | --share NAME ROLE | --unshare NAME ROLE]"
    args = parse(sessions, line, usage)
    if sum(x is not None for x in (args.delete, args.share, args.unshare)) > 1:
        raise CommandUsage(f"%sessions does one of --delete, --share, --unshare at a time (usage: {usage})")
    pair = args.share or args.unshare
    if pair is not None:
        if args.yes:
            raise CommandUsage("--yes confirms a deletion only: %sessions --delete NAME --yes")
        name, role = (unquoted(x) for x in pair)
        checks.name(role, "ROLE")
        shown, changed = rt.store.share_session(name, role, share=args.share is not None)
        key = ("shared" if args.share else "unshared") if changed else ("already_shared" if args.share else "not_shared")
        return Result(i18n.text(key, rt.config.lang, name=shown, role=role))
    if args.delete is None:
        if args.yes:
            raise CommandUsage("--yes confirms a deletion: %sessions --delete NAME --yes")
        from ocw.conversation.continue_from import origins

        rows = rt.store.sessions()
        return Result(report.sessions_table(rows, rt.current, origins(rt.store, rows)))
    return Result(rt.delete_session(unquoted(args.delete), confirmed=args.yes))


def help_(rt, line: str, rich: bool) -> Result:
    """%ocw help — the commands (the added ones last, marked by whom)."""
    from ocw.text.safe_html import plain_text, sanitize

    lang, added = rt.config.lang, user_commands.added()
    return Result("\n".join(plain_text(x) for x in help_lines(lang, added)), html=sanitize(help_html(lang, added)))


def _esc(s: str) -> str:
    import html

    return html.escape(s)


def commands_(rt, line: str, rich: bool) -> Result:
    """%ocw commands — every slash command: the built-ins, then the added ones and who added them."""
    from ocw.text.safe_html import plain_text, sanitize

    no_arguments("%ocw commands", line)
    lang = rt.config.lang
    rows = [(f"/{e['name']}{' ' + e['args'] if e['args'] else ''}", e["help"],
             e.get("by") or user_commands.words("builtin", lang)) for e in slash_menu(lang, user_commands.added())]
    notes = [] if user_commands.added() else [user_commands.words("none_added", lang)]
    width = max(len(r[0]) for r in rows)
    text_ = "\n".join(notes + [plain_text(f"{u.ljust(width)}  {h} [{by}]") for u, h, by in rows])
    table = "".join(f"<tr><td><code>{_esc(u)}</code></td><td>{_esc(h)}</td><td>{_esc(by)}</td></tr>"
                    for u, h, by in rows)
    html = "".join(f"<p>{_esc(n)}</p>" for n in notes) + f"<table><tbody>{table}</tbody></table>"
    return Result(text_, html=sanitize(html))


def run_(rt, line: str, rich: bool) -> Result:
    """%ocw run NAME [ARGS] — a slash command in a cell: a built-in's name runs the built-in."""
    name, _, rest = line.strip().partition(" ")
    name = name.lstrip("/")
    if not name:
        raise CommandUsage("%ocw run takes a command's name and its arguments, e.g. %ocw run hello world "
                           "(%ocw commands lists them).")
    if name == "run":
        raise CommandUsage("%ocw run runs another command, e.g. %ocw run hello world.")
    return run(rt, name, rest, rich=rich)


def doctor(rt, line: str, rich: bool) -> Result:
    """%ocw doctor [--send] — provider, key present, reachability, tokenizer, database, versions;
    --send sends the report to the model as a user message (a normal turn: stored, counted)."""
    if line.strip() not in ("", "--send"):
        raise CommandUsage(f"%ocw doctor takes only --send (got {line.strip()!r}): %ocw doctor [--send]")
    lang = rt.config.lang
    said = redact(report.doctor(rt))  # the report names no key; redact as every output does
    if line.strip() == "--send":
        if rt.current_session() is None:
            return _no_session(rt)
        return Result(said, send=said)
    if rt.current_session() is None:
        return Result(said)
    return Result(f"{said}\n{i18n_text('doctor_offer', lang)}")


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


_PIN_MESSAGE = re.compile(r"--message\s+(n_[0-9A-Za-z]+)")


def pin(rt, line: str, rich: bool) -> Result:
    """%pin TEXT | %pin {name} — the model reads it verbatim with every request, after every compaction."""
    from ocw.conversation import pinning
    from ocw.notebook import memory_view, references

    text = line.strip()
    if not text:
        raise CommandUsage("%pin takes what to pin: %pin the amounts are in cents, or %pin {df} for a variable's "
                           "value as it is now")
    s = rt.current_session() or rt.session_for()
    m = _PIN_MESSAGE.fullmatch(text)
    notes: list[str] = []
    if m:  # the chat widget's pin button: a stored message, verbatim
        text, source = memory_view.pin_source_text(s, m.group(1))
    else:
        source = text if re.fullmatch(r"\{\w+\}", text) else "text"
        text, notes = references.expand_message(rt, text)  # {name} as %%chat expands it, cut to its budget
    done = memory_view.pin_done(s, pinning.pin(s, text, source), rt.config.lang)
    return text_result(*notes, done.text)


def pins(rt, line: str, rich: bool) -> Result:
    """%pins — the pins, numbered, with their time and size."""
    from ocw.notebook import memory_view

    no_arguments("%pins", line)
    s = rt.current_session()
    return _no_session(rt) if s is None else memory_view.pins(s, rt.config.lang)


def unpin(rt, line: str, rich: bool) -> Result:
    """%unpin N — take pin N out of what the model reads (the record is kept)."""
    from ocw.conversation import pinning
    from ocw.notebook import memory_view

    usage = "%unpin takes the number %pins shows, e.g. %unpin 1"
    if not line.strip():
        raise CommandUsage(usage + ".")
    n = whole_number(line.strip(), usage)
    s = rt.current_session()
    if s is None:
        raise CommandUsage(f"there is no pin {n}: nothing is pinned (%pin TEXT pins something).")
    return memory_view.unpin_done(pinning.unpin(s, n), rt.config.lang)


@magic_arguments()
@argument("--all", action="store_true", help="what was forgotten too")
@argument("--forget", default=None, metavar="N", help="the model no longer reads memory item N (recorded)")
def memory(rt, line: str, rich: bool) -> Result:
    """%memory [--all] [--forget N] — the session memory and the pins; forget an item."""
    from ocw.conversation import pinning
    from ocw.notebook import memory_view

    usage = "%memory [--all] [--forget N]"
    args = parse(memory, line, usage)
    s = rt.current_session()
    if args.forget is not None:
        n = whole_number(args.forget, "%memory --forget takes the number %memory shows, e.g. %memory --forget 2")
        if s is None:
            raise CommandUsage(f"there is no memory item {n}: there is no session yet.")
        return memory_view.forget_done(pinning.forget(s, n), rt.config.lang)
    return memory_view.memory(s, rt.config.lang, show_all=args.all)


def retry_save(rt, line: str, rich: bool) -> Result:
    """%ocw retry-save — store the reply a failed write (a full disk, a lock wait, a lost connection) left unsaved."""
    no_arguments("%ocw retry-save", line)
    return Result(rt.retry_save())


ACTIONS: dict[str, Callable[..., Result]] = {
    "compact": compact, "summary": summary, "context": context, "rewind": rewind, "branch": branch,
    "new": new, "sessions": sessions, "export": export, "session": session, "chat-widget": chat_widget,
    "help": help_, "commands": commands_, "run": run_, "doctor": doctor, "tools": tools, "allow-code": _code(True), "deny-code": _code(False),
    "retry-save": retry_save, "pin": pin, "pins": pins, "unpin": unpin, "memory": memory,
}


def run(rt, name: str, line: str = "", *, rich: bool = False) -> Result:
    """Run command `name` of the table (or one of its aliases) with the words `line`; a
    name no built-in has runs the added command of that name (user_commands: a built-in
    always wins). The surface that calls it has checked the environment first (the magics'
    `friendly`, the chat widget's `_command`), once per command."""
    if name in BY_NAME:
        return ACTIONS[BY_NAME[name].name](rt, line, rich)
    return user_commands.run(name, line, rt.config.lang)
