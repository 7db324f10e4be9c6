"""The widgets as static HTML: what a saved or exported notebook shows where no widget
runs (`nbconvert --to html`, a notebook viewer, a kernel that is gone).

A widget's display carries this `text/html` beside its widget view; a live front end
renders the view (its renderer ranks first), everything else the snapshot. It is the
state at display time — a snapshot, not a live view.

Safety: every text is escaped here; the only HTML taken as is is a message's `html`,
which ocw.notebook.items made with ocw.text.safe_html and which is sanitized once more
here. The frame around them is ocw's own fixed markup (its inline styles would not pass
the sanitizer, as with the tool view's <pre>), so nothing a model or a session name
wrote can run.
"""
from __future__ import annotations

import html

from ocw.text.safe_html import sanitize

# Styles inline: a static page has none of the widget's CSS. Neutral colours that
# read on light and dark pages alike.
_BOX = "border:1px solid rgba(128,128,128,.45);border-radius:6px;padding:6px 10px;max-width:60em"
_HEAD = "font-size:85%;opacity:.75;margin:6px 0 2px"
MESSAGES_SHOWN = 40  # the newest ones; a long conversation's snapshot stays a page


def _esc(value) -> str:
    return html.escape(str(value if value is not None else ""), quote=True)


def ring_html(name: str, total: int, window: int, rows: list[tuple[str, int, float | None]] = ()) -> str:
    """The ring's snapshot: the figure, and the breakdown (label, tokens, percent) as a table."""
    pct = 100.0 * total / window if window else 0.0
    head = f"<b>ocw context</b> · {_esc(name)} · {total:,} / {window:,} tokens ({pct:.1f}%)"
    body = "".join(f"<tr><td>{_esc(label)}</td><td style='text-align:right'>{n:,}</td>"
                   f"<td style='text-align:right'>{'' if p is None else _esc(f'{p}%')}</td></tr>"
                   for label, n, p in rows)
    table = f"<table style='margin-top:4px'>{body}</table>" if body else ""
    return f"<div class='ocw-snapshot' style='{_BOX}'>{head}{table}</div>"


def chat_html(name: str, messages: list[dict], summary: dict | None = None) -> str:
    """The chat widget's snapshot: the session's name, the active summary (folded) and
    the newest messages of the branch, each under its role and time."""
    parts = [f"<div class='ocw-snapshot' style='{_BOX}'><b>ocw chat</b> · {_esc(name)}"]
    if summary and summary.get("html"):
        parts.append(f"<details><summary style='{_HEAD}'>summary of {int(summary.get('cover_count', 0))} "
                     f"earlier messages</summary>{sanitize(summary['html'])}</details>")
    shown = messages[-MESSAGES_SHOWN:]
    if len(messages) > len(shown):
        parts.append(f"<div style='{_HEAD}'>… {len(messages) - len(shown)} earlier messages not shown</div>")
    for m in shown:
        role = m.get("role", "")
        parts.append(f"<div style='{_HEAD}'>{_esc(role)} · {_esc(m.get('time', ''))}</div>")
        if role == "assistant":
            parts.append(sanitize(m.get("html") or ""))
            for tool in m.get("tools") or []:
                parts.append(f"<div><code>{_esc(tool.get('name', ''))}({_esc(tool.get('args', ''))})</code></div>")
        elif role == "tool":
            parts.append("".join(f"<pre>{_esc(t.get('result', ''))}</pre>" for t in m.get("tools") or []))
        else:
            parts.append(f"<div style='white-space:pre-wrap'>{_esc(m.get('text', ''))}</div>")
    if not messages:
        parts.append(f"<div style='{_HEAD}'>no messages yet</div>")
    parts.append("</div>")
    return "".join(parts)
