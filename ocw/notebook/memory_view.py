"""`%pin`, `%pins`, `%unpin`, `%memory`: what they say, as a `Result` for every surface.

The session memory and the pins are shown as the model reads them: the memory's
current items numbered as `%memory --forget N` takes them (ocw/context/pins.py
`listed`), each with the turn it came from; the pins with their numbers, time
and size. Model-derived text (memory values come from the conversation) reaches
HTML only escaped and sanitized; the widget gets the same rows as data
(`Result.data`) and draws its unpin / forget buttons from them, which run the
same commands. Every string is the UI text's, in the user's language.
"""
from __future__ import annotations

import datetime as _dt
import html as _html

from ocw.context import pins as rules
from ocw.conversation import pinning
from ocw.notebook.items import preview, time_label
from ocw.notebook.results import Result
from ocw.text.safe_html import sanitize
from ocw.text.tokens import count_text
from ocw.text.ui_text import ui_labels

ITEM_CHARS = 240  # a memory item or a pin as a list shows it (the model reads it whole)


def _when(iso) -> str:
    try:
        t = _dt.datetime.fromisoformat(str(iso))
    except ValueError:
        return ""
    return time_label(t.astimezone().replace(tzinfo=None) if t.tzinfo else t)


def _pin_rows(session) -> list[dict]:
    enc = session.encoding.name
    return [{"n": p["n"], "text": p["text"], "at": _when(p.get("at")), "source": p.get("source", "text"),
             "tokens": count_text(p["text"], enc)} for p in pinning.pins(session)]


def _pin_lines(rows: list[dict], L: dict) -> list[str]:
    if not rows:
        return [L["pins_none"]]
    return [L["pins_title"] + ":"] + ["  " + L["pins_line"].format(n=r["n"], text=preview(r["text"], ITEM_CHARS),
                                                                    at=r["at"], tokens=f"{r['tokens']:,}")
                                      for r in rows]


def pin_done(session, event: dict, lang: str) -> Result:
    n = count_text(event["text"], session.encoding.name)
    return Result(ui_labels(lang)["pin_done"].format(n=event["n"], tokens=f"{n:,}"))


def unpin_done(event: dict, lang: str) -> Result:
    return Result(ui_labels(lang)["unpin_done"].format(n=event["n"], words=preview(event["text"], 60)))


def pins(session, lang: str) -> Result:
    L = ui_labels(lang)
    rows = _pin_rows(session)
    return Result("\n".join(_pin_lines(rows, L)), data={"pins": rows})


def memory(session, lang: str, show_all: bool) -> Result:
    """The memory's sections with numbered items, the pins, and (`show_all`) what was forgotten;
    with no session (None) yet, what will go there."""
    L = ui_labels(lang)
    m = pinning.memory(session) if session is not None else None
    listing = rules.listed(m) if m is not None else []
    empty = L["mem_none"] if m is not None and m.items else L["mem_empty"]  # remembered before, or never
    items = [{"n": n, "kind": i.kind, "section": L[f"mem_sec_{i.kind}"], "text": _line(i), "turn": i.turn}
             for n, _title, i in listing]
    forgotten = []
    if show_all and session is not None:
        for f in rules.forgets(session.metadata):
            forgotten.append({"text": preview(str(f.get("value", "")), ITEM_CHARS), "turn": f.get("turn"),
                              "at": _when(f.get("at"))})
    pin_rows = _pin_rows(session) if session is not None else []
    lines = [L["mem_title"] + ":"]
    if not items:
        lines.append("  " + empty)
    section = None
    for it in items:
        if it["section"] != section:
            section = it["section"]
            lines.append(f"  {section}:")
        lines.append(f"    {it['n']}. {preview(it['text'], ITEM_CHARS)} ({L['mem_turn'].format(n=it['turn'])})")
    if forgotten:
        lines.append(f"  {L['mem_forgotten']}:")
        lines += [f"    - {f['text']} ({L['mem_turn'].format(n=f['turn'])}, {L['mem_forgotten_at'].format(at=f['at'])})"
                  for f in forgotten]
    lines += _pin_lines(pin_rows, L)
    if items or pin_rows:
        lines.append(L["mem_hint"])
    data = {"memory": {"items": items, "forgotten": forgotten, "pins": pin_rows, "empty": empty}}
    return Result("\n".join(lines), html=_html_of(items, forgotten, pin_rows, L, empty), data=data)


def _line(item) -> str:
    """An item as the model reads it, without its list dash and turn."""
    text = item.line()[2:]
    return text.rsplit(" (turn ", 1)[0]


def _html_of(items, forgotten, pin_rows, L, empty: str) -> str:
    e = _html.escape
    parts = [f"<p><strong>{e(L['mem_title'])}</strong></p>"]
    if not items:
        parts.append(f"<p>{e(empty)}</p>")
    section = None
    for it in items:
        if it["section"] != section:
            if section is not None:
                parts.append("</ol>")
            section = it["section"]
            parts.append(f"<p>{e(section)}</p><ol start=\"{it['n']}\">")
        parts.append(f"<li>{e(preview(it['text'], ITEM_CHARS))} <em>({e(L['mem_turn'].format(n=it['turn']))})</em></li>")
    if section is not None:
        parts.append("</ol>")
    if forgotten:
        parts.append(f"<p>{e(L['mem_forgotten'])}</p><ul>" + "".join(
            f"<li><del>{e(f['text'])}</del> <em>({e(L['mem_forgotten_at'].format(at=f['at']))})</em></li>"
            for f in forgotten) + "</ul>")
    if pin_rows:
        parts.append(f"<p>{e(L['pins_title'])}</p><ul>" + "".join(
            f"<li>{r['n']}. {e(preview(r['text'], ITEM_CHARS))} <em>({e(r['at'])}, {r['tokens']:,} tokens)</em></li>"
            for r in pin_rows) + "</ul>")
    else:
        parts.append(f"<p>{e(L['pins_none'])}</p>")
    if items or pin_rows:
        parts.append(f"<p><em>{e(L['mem_hint'])}</em></p>")
    return sanitize("".join(parts))


def forget_done(item, lang: str) -> Result:
    return Result(ui_labels(lang)["mem_forget_done"].format(item=preview(_line(item), 120)))


def pin_source_text(session, node_id: str) -> tuple[str, str]:
    """A stored message's text as it is pinned (its text blocks), and its source label."""
    n = session.node(node_id)
    text = "\n\n".join(b["text"] for b in n["content"] if b.get("type") == "text" and b.get("text"))
    return text, f"message {n['depth']}"
