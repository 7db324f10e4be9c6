"""`%new --from-summary [N]`: continue in a fresh session from where another one stands.

What the new session starts with (reads of the origin only; nothing of it changes):
- one system note carrying the origin's active summary — its prose and its session
  memory block, as the model read them there (the origin's pins become the new
  session's own pins: `carried_pins`);
- then the origin's last N turns, copied as they are stored: a turn starts at a user
  message, so every tool call travels with its result.
The note is a "system" message in mid-conversation, which every provider receives as
user text (ocw/conversation/turn.py), so no reply is invented to pair with it.

The link to the origin is metadata["origin"] = {session, name, summary, turns, at},
written when the session row is created, and the seed is appended in one transaction
after it (the caller undoes the new session if that append fails), so the new session
either exists with its whole seed or not at all.
"""
from __future__ import annotations

import datetime as _dt

from ocw.context.render import block_text

ORIGIN_KEY = "origin"
MAX_TURNS = 50  # turns a new session may carry over (a fresh session is meant to be small)


def carried_pins(origin) -> list[str]:
    """The texts of the origin's pins in force, oldest first. They become the new
    session's own pins (ocw.conversation.sessions.create_session), not lines of the
    seed note: a note is folded by the next compaction, a pin is read verbatim after
    every one."""
    return [p["text"] for p in pins_of(origin)]


def pins_of(session) -> list[dict]:
    from ocw.conversation.pinning import pins

    return pins(session)


def last_turns(origin, n: int) -> list[tuple]:
    """The origin's last `n` turns on its branch, oldest first, as (role, blocks, name)."""
    if n <= 0 or origin.head is None:
        return []
    nodes, users = [], 0
    node = origin._rows.get(origin.head)
    while node is not None and users < n:
        nodes.append(node)
        users += node.role == "user"
        node = origin._rows.get(node.parent_id) if node.parent_id else None
    while nodes and nodes[-1].role != "user":  # start at a user message: tool calls keep their results
        nodes.pop()
    nodes.reverse()
    contents = origin._contents(nodes)
    return [(n.role, contents[n.id], n.name) for n in nodes]


def seed(origin, n: int, lang: str | None = None) -> tuple[list[tuple], dict]:
    """(the messages the new session starts with, its origin link). Reads only."""
    from ocw.text.i18n import text

    origin.sync()
    active = origin.active_summary()
    parts = []
    if active is not None:
        parts.append(block_text(origin._contents([active])[active.id]))
    messages = []
    if parts:
        head = text("from_summary_note", lang, name=origin.name)
        messages.append(("system", [{"type": "text", "text": head + "\n\n" + "\n\n".join(parts)}], None))
    turns = last_turns(origin, n)
    link = {"session": origin.id, "name": origin.name, "summary": active.id if active else None,
            "turns": sum(1 for r, _, _ in turns if r == "user"),
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    return messages + turns, link


def origin_of(metadata: dict) -> dict | None:
    value = metadata.get(ORIGIN_KEY)
    return value if isinstance(value, dict) and isinstance(value.get("session"), str) else None


def said(new, origin_name: str, link: dict, lang: str | None = None) -> str:
    """The one line `%new --from-summary` says: what was carried, the figures to start with."""
    from ocw.text.i18n import text

    n = link["turns"]
    what = [text("from_summary_summary" if link["summary"] else "from_summary_no_summary", lang)]
    if n:
        what.append(text("from_summary_turns", lang, n=n, s="" if n == 1 else "s"))
    carried = len(pins_of(new))
    if carried:
        what.append(text("from_summary_pins", lang, n=carried, s="" if carried == 1 else "s"))
    return text("from_summary_done", lang, name=new.name, origin=origin_name, what=", ".join(what),
                model=new.model, window=f"{new.context_window:,}", tokens=f"{new.occupancy()['total']:,}")


def origins(store, rows: list[dict]) -> dict[str, str]:
    """For `%sessions`: session id → the name of the session it continues (its current
    name: an origin filed away by %new is listed under its new name), for those that do."""
    import json

    names = {r["id"]: r["name"] for r in rows}
    out = {}
    for sid, row in store.session_rows([r["id"] for r in rows]).items():
        meta = row.get("metadata")
        meta = json.loads(meta) if isinstance(meta, str) else (meta or {})
        link = origin_of(meta) if isinstance(meta, dict) else None
        if link is not None:
            out[sid] = names.get(link["session"], link.get("name") or link["session"])
    return out


def origin_name(session) -> str | None:
    """The name of the session `session` continues, as it is called now (%new files the
    origin away under a new name), or None when it continues none."""
    link = origin_of(session.metadata)
    if link is None:
        return None
    row = session.backend.session_row(link["session"])
    return row["name"] if row is not None else f"{link.get('name') or link['session']} (deleted since)"
