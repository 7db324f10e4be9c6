"""Cut selection (DESIGN.md §4, seed 004): which older messages fold into the summary.

Pure: it sees token counts and blocks, never the store or a provider, so the
no-op decision is made before any LLM call.

One tail rule for every trigger (manual, automatic, reactive): 10 % of the
window clamped to 8k–40k tokens, but never more than 25 % of the window, with
at least five nonempty messages unless those alone exceed half the window.
Why 25 %: the tail is what stays after a compaction, beside the summary (at
most a quarter of the window, see engine.summary_budget) and the system prompt,
so the next turn always lands well under the 80 % line — no compaction loop,
and Compact now frees something even on a 6k window.

Budgets are in the tokens the user reads (calibrated: a local model's
tokenizer may count twice what the offline estimate says); `calibration`
turns a message's estimated count into those.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

MIN_MESSAGES = 4  # fewer than this in the uncovered tail: nothing to compact
MIN_TAIL_MESSAGES = 5  # the default tail keeps at least this many nonempty messages

TOO_SHORT = "too_short"  # fewer than MIN_MESSAGES uncovered messages
TAIL_HOLDS_ALL = "tail_holds_all"  # everything fits in the tail that is kept


@dataclass(frozen=True)
class Cut:
    index: int  # messages[:index] fold into the summary; 0 means nothing to compact
    reason: str = ""
    kind: str = ""  # TOO_SHORT | TAIL_HOLDS_ALL when index == 0


def default_tail_budget(window: int) -> int:
    """10 % of the window clamped to 8k–40k, never more than 25 % of the window."""
    budget = min(max(int(window * 0.10), 8_000), 40_000)
    return max(0, min(budget, int(window * 0.25)))


def _nonempty(msg: dict) -> bool:
    for b in msg.get("content", []):
        if b.get("type") == "text" and b.get("text", "").strip():
            return True
        if b.get("type") in ("tool_use", "tool_result", "thinking"):
            return True
    return False


def _keep_tool_pairs(messages: list[dict], cut: int) -> int:
    """Move `cut` earlier (keeping more) until no kept tool_result answers a folded
    tool_use. A result answers the nearest call with its id at or before it, so an
    id that a provider reuses later in the branch does not tie a kept result to an
    unrelated old call. One pass over the blocks, then work only on what moves."""
    use_at: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        for b in m.get("content", []):
            if b.get("type") == "tool_use" and "id" in b:
                use_at.setdefault(b["id"], []).append(i)
    if not use_at:
        return cut
    checked = len(messages)  # messages[cut:checked] are the kept ones not yet examined
    while cut > 0:
        need = cut
        for i in range(cut, checked):
            for b in messages[i].get("content", []):
                if b.get("type") == "tool_result":
                    at = use_at.get(b.get("tool_use_id"))
                    if at:
                        k = bisect_right(at, i) - 1
                        if k >= 0 and at[k] < need:
                            need = at[k]
        checked = cut
        if need == cut:
            break
        cut = need
    return cut


def find_cut_index(messages: list[dict], window: int, keep_recent_tokens: int | None = None,
                   calibration: float = 1.0, max_tail: float | None = None) -> Cut:
    """`messages` is the uncovered tail of rendered_history (no system prompt, no
    summary), each with `tokens` (estimated) and `content`. Returns how many to fold.

    `keep_recent_tokens` (calibrated tokens) replaces the default tail and drops the
    five-message floor: `%compact N` keeps the latest N tokens, whatever they hold.
    `max_tail` (calibrated tokens, an automatic compaction's landing room, see
    landing.py) caps the default tail and its five-message widening: on a small
    window the tail shrinks so that the session lands well under the line."""
    if len(messages) < MIN_MESSAGES:
        return Cut(0, f"fewer than {MIN_MESSAGES} messages to compact", TOO_SHORT)
    scale = calibration if calibration and calibration > 0 else 1.0

    def size(m: dict) -> float:
        return m.get("tokens", 0) * scale

    if keep_recent_tokens is not None:
        budget, min_tail = max(0, int(keep_recent_tokens)), 0
    else:
        budget, min_tail = default_tail_budget(window), MIN_TAIL_MESSAGES
    widen_to = window / 2
    if max_tail is not None and keep_recent_tokens is None:
        budget, widen_to = min(budget, max(0, int(max_tail))), min(widen_to, max(0.0, max_tail))
    # Keep the longest suffix within the token budget ...
    cut = len(messages)
    kept = 0.0
    while cut > 0 and kept + size(messages[cut - 1]) <= budget:
        cut -= 1
        kept += size(messages[cut])
    # ... then widen it to hold at least `min_tail` nonempty messages, unless
    # those alone would exceed half the window.
    nonempty_kept = sum(1 for m in messages[cut:] if _nonempty(m))
    while cut > 0 and nonempty_kept < min_tail and kept + size(messages[cut - 1]) <= widen_to:
        cut -= 1
        kept += size(messages[cut])
        nonempty_kept += _nonempty(messages[cut])
    # Never separate a tool call from its result: move the cut earlier (keeping
    # more) until no kept result answers a folded call.
    cut = _keep_tool_pairs(messages, cut)
    if cut <= 0:
        return Cut(0, "the recent tail already holds everything; nothing older to fold", TAIL_HOLDS_ALL)
    return Cut(cut)
