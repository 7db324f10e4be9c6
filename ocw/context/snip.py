"""snip: trim the outgoing request only. Never writes to the DAG.

When a request is still over the window after compaction (a huge last turn, a
tiny window), the oldest tail messages are left out of this one request. The
system prompt, the summary, the user's pins and the newest message always stay, and a tool
call leaves together with its results — or stays with them: a call whose
result is in the newest message is kept, so a request never carries a
tool_use without its tool_result or a tool_result without its tool_use.
"""
from __future__ import annotations

from ocw.context.graph import SUMMARY_NAME
from ocw.context.pins import PINS_NAME


def _pinned(msg: dict) -> bool:
    return msg.get("role") == "system" or msg.get("name") in (SUMMARY_NAME, PINS_NAME)


def _groups(messages: list[dict]) -> list[list[int]]:
    """Message indices grouped so that a tool call and every message holding one of
    its results form one group; groups ordered by their first message."""
    parent = list(range(len(messages)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}  # tool_use id -> index of the message that made the call
    for i, m in enumerate(messages):
        for b in m.get("content", []):
            if b.get("type") == "tool_use" and "id" in b:
                owner[b["id"]] = i
            elif b.get("type") == "tool_result" and b.get("tool_use_id") in owner:
                a, c = find(owner[b["tool_use_id"]]), find(i)
                if a != c:
                    parent[max(a, c)] = min(a, c)
    groups: dict[int, list[int]] = {}
    for i in range(len(messages)):
        groups.setdefault(find(i), []).append(i)
    return [groups[k] for k in sorted(groups)]


def snip(messages: list[dict], budget: int) -> tuple[list[dict], int]:
    """Drop the oldest unpinned messages until the total `tokens` ≤ budget.
    Returns (messages to send, how many were dropped). `messages` is not modified."""
    total = sum(m.get("tokens", 0) for m in messages)
    if total <= budget or not messages:
        return messages, 0
    last = len(messages) - 1
    dropped: set[int] = set()
    for group in _groups(messages):
        if total <= budget:
            break
        # The newest message (the one being sent), the system prompt and the summary
        # always stay, and so does everything tied to them by a tool call.
        if last in group or any(_pinned(messages[i]) for i in group):
            continue
        dropped.update(group)
        total -= sum(messages[i].get("tokens", 0) for i in group)
    return [m for i, m in enumerate(messages) if i not in dropped], len(dropped)
