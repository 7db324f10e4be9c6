"""What the chat widget and `%branch` display, built from stored rows: pure functions, no I/O.

The invariant that keeps the widget safe: the browser sets innerHTML only from an
`html` field, and every `html` field here is `safe_html.markdown_html(...)` of
model text (replies, summaries) — the renderer of `%%chat`. Everything else
(user text, tool arguments and results, previews, times) is a plain string the
browser shows with textContent, with terminal control characters removed and
secret-looking environment values redacted from tool text, as in a `%%chat` cell.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json

from ocw.context import memory as mem
from ocw.text.safe_html import markdown_html, plain_text, preview
from ocw.text.secrets import redact

PREVIEW = 80  # characters of a message shown in the graph and in %branch
TOOL_ARGS = 120  # characters of a tool call's arguments on its one line
TOOL_RESULT = 4000  # characters of a tool result kept in the widget (the store keeps it whole)


# The widget re-reads its page after every turn: a reply already rendered is not rendered again.
_html = functools.lru_cache(maxsize=512)(markdown_html)


def time_label(when, now: _dt.datetime | None = None) -> str:
    """"14:02" today, "2026-11-29 14:02" another day, "" unknown."""
    if not isinstance(when, _dt.datetime):
        return ""
    now = now or _dt.datetime.now()
    return when.strftime("%H:%M") if when.date() == now.date() else when.strftime("%Y-%m-%d %H:%M")


def _texts(blocks: list, kind: str = "text") -> str:
    return "\n\n".join(b.get(kind, "") for b in blocks if isinstance(b, dict) and b.get("type") == kind
                       and b.get(kind))


def content_preview(blocks: list | None, limit: int = PREVIEW) -> str:
    """One line of a message for the graph and `%branch`: its text, else its tool calls."""
    if not blocks:
        return ""
    text = _texts(blocks)
    if not text:
        calls = [b.get("name", "?") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        text = ("🔧 " + ", ".join(calls)) if calls else (f"🔧 {len(results)} tool result(s)" if results else "")
    return preview(plain_text(text), limit)


def _tool_call(block: dict) -> dict:
    args = redact(json.dumps(block.get("input", {}), ensure_ascii=False))
    return {"call_id": str(block.get("id", "")), "name": plain_text(str(block.get("name", "?"))),
            "args": preview(plain_text(args), TOOL_ARGS), "status": "", "result": ""}


def _result_text(block: dict) -> str:
    text = plain_text(redact(str(block.get("content", ""))))
    return text if len(text) <= TOOL_RESULT else text[:TOOL_RESULT] + "…"


def tool_step(call: dict, result: dict) -> dict:
    """A tool call and its result, as a turn reports it while it runs."""
    step = _tool_call({"id": call.get("id"), "name": call.get("name"), "input": call.get("input", {})})
    step.update(status="error" if result.get("is_error") else "ok", result=_result_text(result))
    return step


def message_items(rows: list[dict], now: _dt.datetime | None = None) -> list[dict]:
    """Stored messages (oldest first) → display items. A tool message's results join the
    calls of the assistant message before it (one collapsed line per call), and that
    item then ends at the tool message (`end_id`, `depth`: where a rewind to it goes)."""
    items: list[dict] = []
    for r in rows:
        blocks = r["content"] or []
        base = {"id": r["id"], "end_id": r["id"], "depth": r["depth"], "role": r["role"],
                "time": time_label(r["created_at"], now), "preview": content_preview(blocks)}
        if r["role"] == "tool" or (r["role"] == "user" and not _texts(blocks)
                                   and any(b.get("type") == "tool_result" for b in blocks)):
            results = [b for b in blocks if b.get("type") == "tool_result"]
            prev = items[-1] if items else None
            calls = {t["call_id"]: t for t in prev.get("tools", [])} if prev and prev["role"] == "assistant" else {}
            if prev is not None and calls and all(b.get("tool_use_id") in calls for b in results):
                for b in results:
                    calls[b["tool_use_id"]].update(status="error" if b.get("is_error") else "ok",
                                                   result=_result_text(b))
                prev.update(end_id=r["id"], depth=r["depth"])
                continue
            base.update(role="tool", tools=[{"call_id": str(b.get("tool_use_id", "")), "name": "", "args": "",
                                             "status": "error" if b.get("is_error") else "ok",
                                             "result": _result_text(b)} for b in results])
        elif r["role"] == "assistant":
            text = _texts(blocks)
            base.update(html=_html(text) if text else "",
                        tools=[_tool_call(b) for b in blocks if b.get("type") == "tool_use"],
                        thinking=plain_text(_texts(blocks, "thinking")))
        else:  # user, system: their own words, shown as text
            base["text"] = plain_text(_texts(blocks))
        items.append(base)
    return items


def extend_items(old_rows: list[dict], old_items: list[dict], rows: list[dict]) -> list[dict]:
    """`message_items(rows)`, reusing `old_items` (the items of `old_rows`) for the rows
    `rows` starts with: only the new rows' items are built, and the last reused row's item
    again (a tool result that follows may join it). The reused items are the same objects
    (the chat widget's changes find them unchanged at once); an item ends at a row before
    that one, so the rows after it group as they did (results join only the item before)."""
    p = 0
    while p < len(old_rows) and p < len(rows) and old_rows[p]["id"] == rows[p]["id"]:
        p += 1
    at = {r["id"]: i for i, r in enumerate(old_rows[:p])}
    keep = len(old_items)
    while keep and at.get(old_items[keep - 1]["end_id"], p) >= p - 1:
        keep -= 1  # reaches the last shared row (which a new row may join) or past it
    start = at[old_items[keep - 1]["end_id"]] + 1 if keep else 0
    return list(old_items[:keep]) + message_items(rows[start:])


def _item_text(i) -> str:
    if i.kind == "setting":
        return f"{i.key} = {i.value}"
    if i.kind == "decision" and i.detail:
        return f"{i.value}, over {i.detail}"
    return f"{i.detail}: {i.value}" if i.kind == "working" and i.detail else i.value


def memory_items(content: list) -> list[dict]:
    """The session memory of a summary node for the chat capsule: its sections in the
    model's order, current items only (newest first), each as plain text with its turn
    (the browser sets them as text, never as HTML)."""
    m = mem.from_blocks(content)
    out = []
    for kind in mem.KINDS:
        cur = sorted(m.current(kind), key=lambda i: -i.turn)
        if cur:
            out.append({"kind": kind, "items": [{"text": plain_text(redact(_item_text(i))), "turn": i.turn}
                                                for i in cur]})
    return out


def summary_items(rows: list[dict], now: _dt.datetime | None = None) -> tuple[dict, list[dict]]:
    """(the active summary's capsule — its sanitized HTML, how many messages it covers,
    when — or {}; every summary over the branch for the graph, superseded ones marked)."""
    active, capsules = {}, []
    for s in rows:
        capsule = {"id": s["id"], "cover_count": int(s["cover_count"]), "time": time_label(s["created_at"], now),
                   "tokens": int(s.get("tokens") or 0), "active": bool(s["active"]),
                   "undone": bool(s.get("undone"))}
        capsules.append(capsule)
        if s["active"]:
            content = s.get("content") or []
            active = {**capsule, "html": _html(_texts(mem.prose_blocks(content))), "memory": memory_items(content)}
    return active, capsules


def branch_items(tree: list[dict], now: _dt.datetime | None = None) -> list[dict]:
    """The branches for the graph and `%branch`: length, last time, fork point, preview
    of the first differing message — and, where two branches leave at the same point
    with the same first words (a question asked again), `ending`: the preview of the
    last question asked on it, so no two look the same."""
    items = [{"id": b["id"], "role": b.get("role") or "", "length": int(b["depth"] or 0),
              "time": time_label(b["created_at"], now), "current": bool(b["current"]), "leaf": bool(b["leaf"]),
              "fork_id": b["fork_id"] or "", "fork_depth": int(b["fork_depth"] or 0), "first_id": b["first_id"] or "",
              "preview": content_preview(b.get("first_content")), "ending": ""} for b in tree]
    alike: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        if not it["current"]:
            alike.setdefault((it["fork_id"], it["preview"]), []).append(i)
    for same in alike.values():
        if len(same) > 1:
            for i in same:
                asked = content_preview(tree[i].get("last_content"))
                # One question per branch: the same on both, so their replies tell them apart.
                items[i]["ending"] = asked if asked and asked != items[i]["preview"] \
                    else content_preview(tree[i].get("leaf_content"))
    return items
