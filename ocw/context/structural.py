"""The structural summary: what a compaction stores when no model-written summary can
fit (issue 23) — a summarizer window too small for even one call, or a summary that
came back no smaller than what it replaces.

It is built without any model call, from the plan alone: the previous summary's head,
then one line per folded message (its role and the head of its text), cut to a budget
that is a fraction of what it replaces. The budget bounds it, so it always fits the
window and always shrinks the context (the caller still runs the engine's `finish`,
which appends the identifiers it omits and refuses a summary that does not shrink).
Pure: text in, text out.
"""
from __future__ import annotations

from ocw.context.render import block_text
from ocw.text.tokens import count_text, truncate_to_tokens

STRUCTURAL_HEADER = "Structural summary (no model call; the summarizer had no room):"
STRUCTURAL_SHARE = 3  # at most a third of what it replaces ...
LINE_TOKENS = 24  # ... with at most this many tokens from each message's head
PREVIOUS_SHARE = 3  # and at most a third of its budget for the previous summary


def structural_summary(previous: str, messages: list[dict], replaced_tokens: int, budget: int,
                       encoding: str) -> str:
    """The summary for `messages` (rendered, oldest first) onto `previous`, within
    min(`budget`, `replaced_tokens` // STRUCTURAL_SHARE) tokens (at least 8)."""
    room = max(8, min(budget, replaced_tokens // STRUCTURAL_SHARE))
    parts = [STRUCTURAL_HEADER]
    used = count_text(STRUCTURAL_HEADER, encoding) + 1
    prev = " ".join(previous.split())
    if prev:
        head = truncate_to_tokens(prev, max(1, room // PREVIOUS_SHARE), encoding)
        parts.append(f"- earlier: {head}")
        used += count_text(parts[-1], encoding) + 1
    for m in messages:
        text = " ".join(block_text(m["content"]).split())
        if not text:
            continue
        line = f"- {m['role']}: {truncate_to_tokens(text, LINE_TOKENS, encoding)}"
        cost = count_text(line, encoding) + 1
        if used + cost > room:
            break
        parts.append(line)
        used += cost
    return truncate_to_tokens("\n".join(parts), room, encoding)
