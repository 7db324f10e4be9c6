"""`%summary`: the active summary, what it covers, when and why it was made, and
the compactions so far (`--all`: every summary, superseded ones too).

Reads only: the session's summaries (kept in memory by its branch view), their
text, and the compaction log in its metadata (ocw/context/compaction_log.py).
The summary text is model text: in a notebook it is shown through
ocw.text.safe_html (sanitized HTML) and everything around it is escaped; in a
terminal everything is plain text. A summary made before the log existed (or
whose entry fell off the bounded log) is still shown, from its node, and says
that its figures were not kept.
"""
from __future__ import annotations

import html

from ocw.context import compaction_log
from ocw.context import count as count_rules
from ocw.context import lost as lost_rules
from ocw.context import undo_log
from ocw.conversation import continue_from


def _when(entry: dict | None, node) -> str:
    if entry and entry.get("at"):
        return entry["at"].replace("T", " ").replace("+00:00", " UTC")
    created = getattr(node, "created_at", None)
    return created.strftime("%Y-%m-%d %H:%M:%S") if created is not None and hasattr(created, "strftime") else "?"


def _figures(entry: dict | None) -> str:
    if not entry:
        return "figures not kept"
    before, after = entry.get("before"), entry.get("after")
    out = f"{entry.get('trigger') or '?'}, "
    out += f"{before:,} → {after:,} tokens" if isinstance(before, int) and isinstance(after, int) else "figures not kept"
    if isinstance(entry.get("folded"), int):
        out += f", folded {entry['folded']:,} message{'s' if entry['folded'] != 1 else ''}"
    return out


def _boundary_preview(session, node) -> str:
    """'up to n_x (assistant: "first words…")' — where the covered range ends."""
    try:
        b = session.node(node.parent_id)
    except Exception:  # a boundary on a branch no longer loaded: the id is enough
        return f"up to {node.parent_id}"
    from ocw.context.render import block_text
    from ocw.notebook.report import preview

    return f"up to {b['id']} ({b['role']}: \u201c{preview(block_text(b['content']), 60)}\u201d)"


def _status(session, node, active) -> str:
    if active is not None and node.id == active.id:
        return "active"
    if node.id in undo_log.undone_ids(session.metadata):
        return "undone"
    superseded = any(s.supersedes == node.id for s in session.summaries())
    return "superseded" if superseded else "not on this branch"


def _by(entry: dict | None) -> str:
    """Which model summarized, when it was a summarizer of its own (Ocw.summary_model). The chat
    model's compactions read as they always did (the log keeps its name all the same)."""
    if not (entry or {}).get("own_summarizer") or not entry.get("summarizer"):
        return ""
    return f", summarized by {entry['summarizer']} (a summarizer of its own)"


def _header(session, node, entry, status: str) -> str:
    focus = f"; focus: \u201c{entry['focus']}\u201d" if entry and entry.get("focus") else ""
    trigger = (entry or {}).get("trigger")
    made = f"made {_when(entry, node)}" + (f" by {trigger} compaction" if trigger else "") + _by(entry)
    return (f"Summary {node.id} [{status}] covers {node.cover_count:,} message{'s' if node.cover_count != 1 else ''}, "
            f"{_boundary_preview(session, node)}; {made}{focus}")


def _log_lines(session) -> list[str]:
    meta = session.metadata
    count, inferred = count_rules.compaction_count(meta), count_rules.inferred_count(meta)
    undone = undo_log.undone_ids(meta)
    lines = [f"Compactions so far: {count}" + (f" ({inferred} inferred from a drop in provider-reported usage; "
                                                "inferred ones have no summary)" if inferred else "")
             + (f"; {len(undone)} undone (%compact --undo)" if undone else "")]
    for i, e in enumerate(compaction_log.entries(meta), 1):
        lines.append(f"  {i}. {_when(e, None)}  {_figures(e)}  → {e['summary']}"
                     + (f"  by {e['summarizer']}" if e.get("own_summarizer") and e.get("summarizer") else "")
                     + (" [undone]" if e["summary"] in undone else "")
                     + (f"  focus: \u201c{e['focus']}\u201d" if e.get("focus") else ""))
        lines.extend(f"     {line}" for line in lost_rules.lines(e.get("lost")))
    if count >= lost_rules.MANY:  # said once, here: each compaction folds the last summary again
        lines.append(f"This session has been compacted {count} times; each time the summary is summarized again "
                     "and detail is lost. %new --from-summary continues in a fresh session from here.")
    return lines


def summary_parts(session, all_summaries: bool = False) -> list[tuple[str, str | None]]:
    """What %summary shows, as (header line, summary text or None) pairs and plain lines."""
    session.sync()
    active = session.active_summary()
    meta = session.metadata
    if all_summaries:
        nodes = list(reversed(session.summaries()))  # newest first
    else:
        nodes = [active] if active is not None else []
    texts = session._contents(nodes) if nodes else {}
    if active is not None and active.id in texts:  # as the model reads it: forgotten memory items out
        from ocw.conversation.pinning import summary_read

        texts[active.id] = summary_read(session, active, texts[active.id])[0]
    out: list[tuple[str, str | None]] = []
    if not nodes:
        out.append(("No summary is active on this branch: nothing has been compacted here yet"
                    + (" (%summary --all lists the others)." if session.summaries() and not all_summaries else "."),
                    None))
    for node in nodes:
        entry = compaction_log.entry_for(meta, node.id)
        from ocw.context.render import block_text

        out.append((_header(session, node, entry, _status(session, node, active)), block_text(texts[node.id])))
    out.extend((line, None) for line in _log_lines(session))
    link = continue_from.origin_of(meta)
    if link is not None:  # %new --from-summary: where this session came from
        carried = f"its summary {link['summary']}" if link.get("summary") else "no summary"
        out.append((f"Continued from session {continue_from.origin_name(session)!r} ({link['session']}) on "
                    f"{str(link.get('at') or '?').replace('T', ' ').replace('+00:00', ' UTC')}: {carried} and "
                    f"the last {link.get('turns', 0)} turn{'s' if link.get('turns') != 1 else ''}.", None))
    return out


def summary_text(session, all_summaries: bool = False) -> str:
    """The plain-text view (a terminal)."""
    from ocw.text.safe_html import plain_text

    lines = []
    for head, text in summary_parts(session, all_summaries):
        lines.append(plain_text(head))
        if text is not None:
            lines.append(plain_text(text))
            lines.append("")
    return "\n".join(lines).rstrip()


def summary_bundle(session, all_summaries: bool = False) -> dict[str, str]:
    """The notebook view: headers escaped, each summary as sanitized HTML."""
    from ocw.text.safe_html import markdown_html, plain_text, sanitize

    html_parts = []
    for head, text in summary_parts(session, all_summaries):
        head = html.escape(plain_text(head))
        html_parts.append(f"<p><strong>{head}</strong></p>" if text is not None else f"<p>{head}</p>")
        if text is not None:
            html_parts.append(f"<blockquote>{markdown_html(text)}</blockquote>")
    # sanitized as a whole too: the one rule for text/html that carries model text
    return {"text/plain": summary_text(session, all_summaries), "text/html": sanitize("\n".join(html_parts))}
