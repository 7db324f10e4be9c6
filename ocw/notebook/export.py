"""`%ocw export [--format md|json] [--force] [PATH]`: a session, written to a file.

- md: the current branch, root to HEAD, readable — each message under its own
  heading, tool calls and results in fenced blocks, and every summary of the
  branch placed after the last message it covers and marked (active or
  superseded, with its trigger and figures).
- json: the whole DAG — every node of every branch, summaries included, with
  the session's row and metadata — for tools and archives.

The file is a file, not an output: model text goes into it as it is. What the
magic prints is one line of plain text (where it went). Nothing is lost or
half-written: the file is written beside its target and renamed over it, and
an existing file is replaced only if it is an earlier ocw export (or with
--force). Secrets never reach it: the store holds none (keys live in the
environment), and this writes only what the store holds.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile

from ocw.context import compaction_log
from ocw.context import pins as pin_rules
from ocw.text.errors import OcwError
from ocw.context.render import block_text

MD_MARK = "<!-- ocw export"
FORMATS = ("md", "json")


class ExportError(OcwError):
    """An export that cannot be written where asked."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _iso(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def default_path(session, fmt: str, notebook: str | None = None) -> str:
    """Beside the notebook (Jupyter tells the kernel its path), named after it; else
    in the working directory, named after the session."""
    notebook = notebook if notebook is not None else os.environ.get("JPY_SESSION_NAME", "").strip()
    if notebook and session.name == notebook:
        folder = os.path.dirname(notebook) or os.getcwd()
        stem = os.path.splitext(os.path.basename(notebook))[0]
    else:
        folder = os.path.dirname(notebook) if notebook and os.path.isdir(os.path.dirname(notebook)) else os.getcwd()
        stem = re.sub(r"[^\w.-]+", "-", session.name).strip("-.") or session.id
    return os.path.join(folder, f"{stem}.ocw.{fmt}")


def _fence(text: str) -> str:
    run = max((len(r) for r in re.findall(r"`+", text)), default=0)
    return "`" * max(3, run + 1)


_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _closed(text: str) -> str:
    """Message text as Markdown, with a code fence it leaves open closed at its end
    (an unclosed ``` would turn every later heading of the export into code)."""
    fence = None
    for line in text.splitlines():
        m = _FENCE_LINE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):]:
            fence = None
    return text if fence is None else f"{text.rstrip(chr(10))}\n{fence}"


def _block_md(block: dict) -> str:
    t = block.get("type")
    if t == "text":
        return _closed(block.get("text", ""))
    if t == "thinking":
        return "*Thinking:*\n\n" + "\n".join("> " + ln for ln in block.get("thinking", "").splitlines())
    if t == "tool_use":
        args = json.dumps(block.get("input", {}), ensure_ascii=False, sort_keys=True)
        return f"**Tool call** `{block.get('name')}` ({block.get('id')}):\n\n{_fenced(args, 'json')}"
    if t == "tool_result":
        content = block_text([block])
        flag = " — error" if block.get("is_error") else ""
        return f"**Tool result** ({block.get('tool_use_id')}){flag}:\n\n{_fenced(content)}"
    return _fenced(json.dumps(block, ensure_ascii=False))


def _fenced(text: str, lang: str = "") -> str:
    fence = _fence(text)
    return f"{fence}{lang}\n{text}\n{fence}"


def _summary_md(node, text: str, status: str, entry: dict | None) -> str:
    facts = [status, f"covers messages 1–{node.cover_count:,}"]
    if entry:
        facts.append(f"{entry.get('trigger')} compaction, {entry.get('at')}")
        if isinstance(entry.get("before"), int) and isinstance(entry.get("after"), int):
            facts.append(f"{entry['before']:,} → {entry['after']:,} tokens")
        if entry.get("focus"):
            facts.append(f"focus: {entry['focus']}")
    quoted = "\n".join("> " + ln if ln else ">" for ln in text.splitlines())
    return f"> **Summary {node.id}** ({'; '.join(facts)})\n>\n{quoted}"


def branch_markdown(session) -> tuple[str, int, int]:
    """The branch as Markdown; (text, messages, summaries)."""
    session.sync()
    ids = session.branch()
    nodes = [session._rows.get(i) for i in ids]
    on_branch = set(ids)
    active = session.active_summary()
    summaries = [s for s in session.summaries() if s.parent_id in on_branch]
    contents = session._contents(nodes + summaries)
    after: dict[str, list] = {}
    for s in summaries:
        after.setdefault(s.parent_id, []).append(s)
    meta = session.metadata
    lines = [f"{MD_MARK}: session {session.name!r} ({session.id}), HEAD {session.head}, {_now()} -->",
             f"# Conversation: {session.name}", "",
             f"Model `{session.model}` ({session.provider_name}) · window {session.context_window:,} tokens · "
             f"{len(nodes):,} messages on this branch · {session.compaction_count} "
             f"compaction{'s' if session.compaction_count != 1 else ''}", ""]
    if session.system_prompt:
        lines += ["## System prompt", "", _closed(session.system_prompt), ""]
    pinned = pin_rules.current(meta)
    if pinned:  # the model reads them verbatim with every request (ocw/context/pins.py)
        lines += ["## Pinned", ""]
        for p in pinned:
            lines += [f"### Pin {p['n']} · {p.get('at', '')}", "", _closed(p["text"]), ""]
    for i, n in enumerate(nodes, 1):
        lines += [f"## {i} · {n.role}", ""]
        lines += ["\n\n".join(_block_md(b) for b in contents[n.id]), ""]
        for s in after.get(n.id, []):
            status = "active" if active is not None and s.id == active.id else "superseded"
            lines += [_summary_md(s, block_text(contents[s.id]), status, compaction_log.entry_for(meta, s.id)), ""]
    return "\n".join(lines).rstrip() + "\n", len(nodes), len(summaries)


def session_json(session) -> tuple[str, int, int]:
    """The whole session as JSON; (text, messages, summaries)."""
    session.sync()
    backend, sid = session.backend, session.id
    nodes = backend.nodes_since(sid, 0, None, session.epoch)
    contents = backend.content(sid, nodes) if nodes else {}
    on_branch = set(session.branch())
    row = backend.session_row(sid)
    doc = {"ocw_export": 1, "exported_at": _now(),
           "session": {k: _iso(v) for k, v in row.items() if k != "rev"},
           "nodes": [{"id": n.id, "parent_id": n.parent_id, "role": n.role, "name": n.name,
                      "content": contents.get(n.id, []), "tokens": n.tokens, "depth": n.depth,
                      "summary": n.is_summary, "cover_count": n.cover_count if n.is_summary else None,
                      "supersedes": n.supersedes, "on_branch": n.id in on_branch,
                      "created_at": _iso(n.created_at)} for n in nodes],
           # The pins in force (their pin / unpin / forget records are in session.metadata.pins).
           "pins": pin_rules.current(row.get("metadata") or {})}
    summaries = sum(1 for n in nodes if n.is_summary)
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n", len(nodes) - summaries, summaries


def _is_ours(path: str) -> bool:
    """Is the file at `path` an earlier ocw export (fine to replace)?"""
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(200)
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith(MD_MARK) or head.lstrip().startswith('{\n "ocw_export"')


def write(path: str, text: str, *, force: bool = False) -> str:
    """Write `text` to `path` all at once (a temp file renamed over it). Returns the
    absolute path."""
    path = os.path.abspath(os.path.expanduser(path))
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise ExportError(f"{path} is a folder", hint="give a file name, e.g. chat.md")
    if not os.path.isdir(folder):
        raise ExportError(f"no folder {folder}", hint="create it first, or give another path")
    if os.path.exists(path) and not force and not _is_ours(path):
        raise ExportError(f"{path} exists and is not an ocw export; nothing was written",
                          hint="give another path, or add --force to replace it")
    try:  # the temp file too: a folder that exists but cannot be written is one line
        fd, tmp = tempfile.mkstemp(prefix=".ocw-export-", dir=folder)
    except OSError as e:
        raise ExportError(f"cannot write in {folder}: {e.strerror or e}", hint="pick a folder you can write to") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise ExportError(f"cannot write {path}: {e.strerror or e}", hint="pick a folder you can write to") from None
        raise
    return path


USAGE = "%ocw export [--format md|json] [--force] [PATH]"


def parse_line(rest: str) -> tuple[str, bool, str | None]:
    """The magic's arguments: (format, force, path or None); one line for a mistake."""
    import shlex

    try:
        words = shlex.split(rest)
    except ValueError as e:
        raise ExportError(f"%ocw export: {e}", hint="quote a path with spaces: %ocw export 'my chat.md'") from None
    fmt, force, paths = "md", False, []
    while words:
        w = words.pop(0)
        if w in ("--format", "-f") and words:
            fmt = words.pop(0)
        elif w.startswith("--format="):
            fmt = w.split("=", 1)[1]
        elif w == "--force":
            force = True
        elif w.startswith("-"):
            raise ExportError(f"%ocw export: unknown option {w!r}", hint=f"usage: {USAGE}")
        else:
            paths.append(w)
    if fmt not in FORMATS or len(paths) > 1:
        raise ExportError(f"%ocw export takes --format md or --format json and at most one path (got {rest.strip()!r})",
                          hint=f"usage: {USAGE}")
    return fmt, force, paths[0] if paths else None


def export(session, fmt: str = "md", path: str | None = None, *, force: bool = False) -> str:
    """Export `session`; returns the one line saying where it went."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}", hint="use --format md or --format json")
    if path is not None and path.endswith(("/", os.sep)):
        # A trailing slash names a folder: the file goes in it, under its default name
        # (taken for a file name, `dir/newdir/` wrote a file called newdir).
        folder = os.path.expanduser(path)
        if not os.path.isdir(folder):
            raise ExportError(f"no folder {os.path.abspath(folder)}", hint="create it first, or give another path")
        path = os.path.join(folder, os.path.basename(default_path(session, fmt)))
    text, messages, summaries = branch_markdown(session) if fmt == "md" else session_json(session)
    where = write(path or default_path(session, fmt), text, force=force)
    what = (f"{messages:,} messages of this branch, {summaries} summar{'y' if summaries == 1 else 'ies'}"
            if fmt == "md" else f"the whole session: {messages:,} messages, {summaries} "
                                f"summar{'y' if summaries == 1 else 'ies'}")
    return f"Exported session {session.name!r} ({what}) as {'Markdown' if fmt == 'md' else 'JSON'} to {where}"
