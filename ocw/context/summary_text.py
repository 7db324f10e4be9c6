"""A summary as a compaction stores it: the summarizer's prose with the sentences that
state a stale value dropped, the identifiers it omitted appended (the facts pass, with
room of its own), and the session memory beside it — and the guard that it is smaller
than what it replaces.

Why apart from the engine (ocw/context/engine.py): the engine plans and asks the
summarizer; what is kept of the answer, and beside it, is decided here, from the
prepared plan alone, and is the same whichever summarizer answered (a model, the offline
one, or the structural summary). Pure: text and counts in, text out.
"""
from __future__ import annotations

import re

from ocw.context import memory as mem
from ocw.context.engine import Plan, Prepared
from ocw.context.facts import append_facts
from ocw.context.graph import SUMMARY_NAME
from ocw.context.memory_rules import update as update_memory
from ocw.context.render import block_text
from ocw.text.errors import OcwError
from ocw.text.tokens import count_message

FACTS_MAX = 2048  # tokens for identifiers the summary omits (see facts_budget) ...
FACTS_WINDOW_DIVISOR = 16  # ... at most 1/16 of the session's window ...
FACTS_REPLACED_SHARE = 0.9  # ... and summary + list at most 90 % of what they replace


def facts_budget(replaced_tokens: int, summary_tokens: int, window: int) -> int:
    """Room for the identifiers the summary omitted (`summary_tokens`: the summary
    as stored, framing included). Exact strings are what a paraphrase loses and
    what later turns need, and the list is carried from summary to summary, so
    its room is not a slice of the summary budget: it is what keeps summary plus
    list within FACTS_REPLACED_SHARE of what they replace (a compaction must
    shrink the context), capped at 1/FACTS_WINDOW_DIVISOR of the session's window
    and FACTS_MAX tokens, so the list never crowds the context it serves."""
    cap = min(FACTS_MAX, window // FACTS_WINDOW_DIVISOR)
    room = int(replaced_tokens * FACTS_REPLACED_SHARE) - summary_tokens
    return max(0, min(cap, room))


def memory_turns(plan: Plan, read: dict | None = None) -> list[tuple[int, str, str]]:
    """The newly folded messages as (turn, role, text) for the memory pass; a tool
    result is read whole as the model read it (the rendered, capped form): `read`
    gives, by node id, the blocks the model read before a prune stubbed them."""
    read = read or {}
    return [(plan.first_turn + k, m["role"], block_text(read.get(m.get("id"), m["content"])))
            for k, m in enumerate(plan.new_messages)]


def build_memory(prep: Prepared, window: int, extra=(), read: dict | None = None) -> mem.Memory:
    """The memory after this compaction: the old one plus the folded turns, within
    its share of the window and at most a quarter of what the compaction replaces
    (so the memory alone can never make a compaction grow the context)."""
    plan = prep.plan
    budget = min(mem.budget_for(window), plan.replaced_tokens // 4)
    return update_memory(plan.old_memory, memory_turns(plan, read), budget=budget, encoding=prep.encoding, extra=extra)


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def drop_stale(text: str, stale) -> str:
    """The summary's prose without the sentences that state a value the memory marks
    superseded, retracted or closed: the model reads the prose beside the memory, and
    a retracted file named there would read as current. Only whole-token matches
    count, so `run_1` never takes out `run_10`."""
    pats = [re.compile(r"(?<![\w.])" + re.escape(v.strip("`")) + r"(?![\w])") for v in stale if v.strip("`")]
    if not pats:
        return text
    out = []
    for line in text.splitlines():
        kept = [s for s in _SENTENCE_END.split(line) if not any(p.search(s) for p in pats)]
        if kept or not line.strip():
            out.append(" ".join(kept))
    return "\n".join(out)


def summary_blocks(text: str, memory: mem.Memory | None = None) -> list[dict]:
    """A summary node's content: its prose, then the memory block (if any)."""
    block = mem.to_block(memory) if memory is not None else None
    return [{"type": "text", "text": text}] + ([block] if block else [])


def finish(prep: Prepared, text: str, memory: mem.Memory | None = None) -> str:
    """The summary's prose as it will be stored (beside `memory`): with the identifiers it
    omitted appended by the facts pass (within `facts_budget`; never a value the
    memory marks stale, never one the memory already holds), then the memory block.
    A summary not smaller than what it replaces is refused (a compaction must
    shrink the context)."""
    plan, enc = prep.plan, prep.encoding
    memory = memory if memory is not None else mem.Memory()
    mem_block = mem.to_block(memory)
    mem_text = mem_block["text"] if mem_block else ""
    source = plan.old_summary_text + "\n" + "\n".join(prep.lines)

    def blocks_of(t: str) -> list[dict]:
        return summary_blocks(t, memory)

    text = drop_stale(text, memory.stale_values())
    text_tokens = count_message("llm", blocks_of(text), enc, SUMMARY_NAME)
    if text_tokens < plan.replaced_tokens:  # else: rejected below, facts or not
        text = append_facts(text, source, facts_budget(plan.replaced_tokens, text_tokens, prep.window), enc,
                            focus=prep.focus, exclude=memory.stale_values(), present=mem_text)
    new_tokens = count_message("llm", blocks_of(text), enc, SUMMARY_NAME)
    if new_tokens >= plan.replaced_tokens:
        raise OcwError.localized("err_not_smaller", new=f"{new_tokens:,}", old=f"{plan.replaced_tokens:,}")
    return text
