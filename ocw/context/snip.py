"""snip: trim the outgoing request only. Never writes to the DAG.

When a request is still over the window after compaction (a huge last turn, a
tiny window), the oldest tail messages are left out of this one request. The
system prompt, the summary and the newest message always stay, and a tool
call leaves together with its result.
"""
from __future__ import annotations


def _pinned(msg: dict) -> bool:
    return msg.get("role") == "system" or msg.get("name") == "context/summary"


def snip(messages: list[dict], budget: int) -> tuple[list[dict], int]:
    """Drop the oldest unpinned messages until the total `tokens` ≤ budget.
    Returns (messages to send, how many were dropped)."""
    total = sum(m.get("tokens", 0) for m in messages)
    if total <= budget:
        return messages, 0
    keep = list(messages)
    dropped = 0
    while total > budget:
        # The newest message (the one being sent) always stays.
        i = next((k for k, m in enumerate(keep[:-1]) if not _pinned(m)), None)
        if i is None:
            break
        uses = {b["id"] for b in keep[i].get("content", []) if b.get("type") == "tool_use"}
        total -= keep[i].get("tokens", 0)
        del keep[i]
        dropped += 1
        # Results answer the call just before them; they leave with it.
        while uses and i < len(keep) - 1 and any(
            b.get("type") == "tool_result" and b.get("tool_use_id") in uses for b in keep[i].get("content", [])
        ):
            total -= keep[i].get("tokens", 0)
            del keep[i]
            dropped += 1
    return keep, dropped
