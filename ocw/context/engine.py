"""The compaction engine: read → threshold → summarize → persist → refresh.

Invariants, and why they hold:
- No-op is decided before any LLM call: the cut is chosen from token counts
  alone (`find_cut_index`), so "nothing to compact" never emits
  `compaction_started` and never reaches the summarizer.
- Re-compaction never re-reads text a summary covers: the summarizer's input is
  the old summary's text plus only the newly folded turns.
- Pure of the store: the engine plans (`plan_compaction`, `prepare`) and asks
  the summarizer (`summarize`); the answer is checked and finished in
  ocw/context/summary_text.py (`finish`). Both return text and never write.
  The caller (ocw/conversation/compaction.py) persists in one transaction, so
  every failure leaves the file as it was.
- A summary must be smaller than what it replaces, or it is rejected
  (`summary_text.finish`): a compaction that grows the context is a failure.
- Every summarizer call fits the summarizer's window: lines are grouped by the
  cached per-node counts (no re-tokenizing in `prepare`), and each call's input
  is counted exactly before it is sent (`_fit`), separators included. A call
  the server still refuses is sized against `call_estimate` by the caller,
  which plans once more to what the server said (`refit`).
- One bad answer fails nothing: an empty one is asked once more, the same
  input; only a second empty answer fails the compaction.
- Identifiers survive rolling compactions: the facts pass appends what the
  summary omitted, with room of its own (ocw/context/summary_text.py, where the
  answer becomes what is stored), and the next compaction reads that list as
  part of the old summary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ocw.context import events as ev
from ocw.context.calibration import CALIBRATION_MAX, MIN_LEARNED_WINDOW, positive_int
from ocw.text.errors import ContextOverflowError, OcwError
from ocw.context.graph import SUMMARY_NAME
from ocw.text.i18n import system_message
from ocw.text.prompts import FOCUS_CLOSE, FOCUS_OPEN, MEMORY_REQUEST, SUMMARY_MARKER
from ocw.context.render import block_text
from ocw.text.tokens import FRAME_TOKENS, count_message, count_soon, count_text, render_block, truncate_to_tokens
from ocw.context.cut import TOO_SHORT as CUT_TOO_SHORT, find_cut_index
from ocw.context import memory as mem
from ocw.context import memory_model
from ocw.text.focus import clean as clean_focus


SUMMARY_SYSTEM = f"""{SUMMARY_MARKER}
You compact a long conversation so it can continue in a smaller context window.
Write a faithful, dense summary that replaces the earlier turns. Merge the
previous summary (if any) with the new turns; drop nothing that still matters.
Use these sections, each a few terse bullet points:

## User intent — what the user is trying to achieve, in their words where it matters
## Decisions — what was decided, and why
## Work done — what was built, run, found or answered
## Open items — questions, errors, next steps not yet resolved
## Active context — files, names, values and settings the next turn will need

Keep exact identifiers verbatim: file paths, URLs, ids, numbers with units,
`code names`, error names. Do not invent anything. Answer with the summary only."""


def summary_system(focus: str | None = None, structured: bool = False) -> str:
    """The summarizer's system prompt; with a focus (`%compact -- what to keep`), the
    user's instructions follow the rules, tagged so that any summarizer finds them.
    `structured` (a real model): the session memory is asked for as JSON as well."""
    focus = clean_focus(focus)
    base = f"{SUMMARY_SYSTEM}\n\n{MEMORY_REQUEST}" if structured else SUMMARY_SYSTEM
    if not focus:
        return base
    return (f"{base}\n\nThe user gave instructions for this summary. Follow them first, within the "
            f"rules above, and keep in full what they ask for:\n{FOCUS_OPEN}{focus}{FOCUS_CLOSE}")


@dataclass
class CompactionResult:
    outcome: str  # "succeeded" | "no_op" | "failed"
    trigger: str = "manual"
    summarised_count: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary_id: str | None = None
    reason: str = ""
    error: str | None = None
    summarizer_calls: int = 0
    payload: dict = field(default_factory=dict)

    @property
    def event(self) -> str:
        return ev.COMPACTION_FAILED if self.outcome == "failed" else ev.COMPACTION_FINISHED

    def message(self, lang: str | None = None) -> str:
        """The system message for this outcome (DESIGN.md §4)."""
        return system_message(self.event, self.payload, lang)


@dataclass
class Plan:
    boundary_id: str  # the last newly folded message: the new summary covers the branch up to it
    new_messages: list[dict]  # the newly folded turns, rendered
    old_summary_text: str  # the old summary's prose (its memory block apart)
    replaced_tokens: int  # old summary + newly folded turns
    old_memory: mem.Memory = field(default_factory=mem.Memory)
    first_turn: int = 1  # the turn (branch depth) of new_messages[0]


ALREADY_COMPACTED = "already_compacted"  # no-op kinds, each with its own system message
TOO_SHORT = "too_short"
NOTHING_OLDER = "nothing_older"


def plan_compaction(history: list[dict], window: int, keep_recent_tokens: int | None = None,
                    calibration: float = 1.0, first_turn: int = 1,
                    max_tail: float | None = None) -> Plan | tuple[str, str]:
    """Choose the cut over rendered history (system prompt, the active summary, the
    uncovered tail). Returns a Plan, or (no-op kind, reason) when there is nothing to
    compact. The same tail rule holds for every trigger (see cut.py); budgets are
    judged in calibrated tokens, the ones the ring shows."""
    summary = next((m for m in history if m.get("name") == SUMMARY_NAME), None)
    tail = [m for m in history if m.get("id") and m is not summary]
    cut = find_cut_index(tail, window, keep_recent_tokens, calibration=calibration, max_tail=max_tail)
    if cut.index <= 0:
        # The seed's "already compacted" text is for a session that has a summary;
        # one that never had one says why there is nothing to fold instead.
        kind = ALREADY_COMPACTED if summary else TOO_SHORT if cut.kind == CUT_TOO_SHORT else NOTHING_OLDER
        return kind, cut.reason
    folded = tail[: cut.index]
    return Plan(
        boundary_id=folded[-1]["id"],
        new_messages=folded,
        old_summary_text=block_text(mem.prose_blocks(summary["content"])) if summary else "",
        replaced_tokens=(summary["tokens"] if summary else 0) + sum(m["tokens"] for m in folded),
        old_memory=mem.from_blocks(summary["content"]) if summary else mem.Memory(),
        first_turn=first_turn,
    )


def transcript_line(msg: dict) -> str:
    name = msg.get("name")
    head = f"[{msg['role']}:{name}] " if name else f"[{msg['role']}] "
    blocks = msg["content"]
    # One block (most messages): skip block_text's join; the text is the same.
    return head + (render_block(blocks[0]) if len(blocks) == 1 else block_text(blocks))


def _summary_input(previous: str, lines: list[str], memory: str = "") -> str:
    prev = previous.strip() or "(none)"
    memory = f"{memory}\n\n" if memory else ""  # the current memory, for a structured answer
    return f"<previous-summary>\n{prev}\n</previous-summary>\n\n{memory}<new-turns>\n" + "\n\n".join(lines) + "\n</new-turns>"


MIN_SUMMARIZER_INPUT = 256  # tokens of input below which no summarizer call is made
WRAPPER_TOKENS = 32  # the <previous-summary>/<new-turns> tags around a chunk
CUT_NOTE = " […cut for the summarizer]"


@dataclass
class Prepared:
    """Everything a compaction needs before its LLM call (see `prepare`)."""

    plan: Plan
    provider: object = None
    window: int = 0  # the summarizer's window, in estimated tokens (its real window ÷ calibration)
    out_budget: int = 0  # room for each summarizer answer, in estimated tokens
    max_tokens: int = 0  # out_budget in the model's own tokens (what the request asks for)
    in_budget: int = 0  # tokens of summarizer input per call (window − output − system prompt)
    encoding: str = "cl100k_base"
    lines: list[str] = field(default_factory=list)  # the newly folded turns, one transcript line each
    estimates: list[int] = field(default_factory=list)  # tokens of each line (with its separator), an upper bound
    chunks: list[tuple[int, int]] = field(default_factory=list)  # planned calls: line ranges [start, end)
    calls: int = 0  # summarizer calls made so far
    usage_samples: list[tuple[int, int]] = field(default_factory=list)  # (measured, estimated) input tokens
    last_input: str = ""  # the input of the last call sent (a refusal of it is sized against it)
    focus: str = ""  # what the user asked the summary to keep ('' for none)
    system: str = SUMMARY_SYSTEM  # the summarizer's system prompt (with the focus, if any)
    structured: bool = False  # a real model: the memory is asked for as JSON (memory_model)
    memory_answer: dict | None = None  # the last call's parsed memory, None if it did not parse


def _take(estimates: list[int], start: int, room: int) -> int:
    """End of the longest run of lines from `start` whose estimates fit `room` (≥ 1 line)."""
    end, used = start + 1, estimates[start]
    while end < len(estimates) and used + estimates[end] <= room:
        used += estimates[end]
        end += 1
    return end


def plan_chunks(estimates: list[int], *, first_room: int, room: int) -> list[tuple[int, int]]:
    """Group lines into summarizer calls by their estimated tokens: the first call
    carries the old summary (`first_room` is what it leaves), every later one at
    most a previous answer of `max_tokens` (`room`). Real answers are usually
    shorter, so `summarize` may need fewer calls than planned, never more than
    the exact size check adds."""
    out, i = [], 0
    while i < len(estimates):
        j = _take(estimates, i, first_room if not out else room)
        out.append((i, j))
        i = j
    return out


def prepare(plan: Plan, provider, *, window: int, calibration: float, encoding: str,
            focus: str | None = None) -> Prepared:
    """Everything but the LLM call: the summarizer's input (transcript lines, their
    token estimates, the planned chunks). `window` is the summarizer's window in the
    model's tokens; sizes here are in estimated tokens, of which the model counts
    `calibration` times as many. `focus`: what the user asked the summary to keep
    (it goes into the system prompt, and the facts pass keeps its kinds first).
    Calls no model, re-tokenizes no ordinary message."""
    window = int(window / calibration)
    enc = encoding
    # A real model is asked for the memory as JSON; the offline model (and no model) is not,
    # nor a model whose window has room for a summary only without the ask (the memory is
    # then the deterministic pass's, as it always is in part).
    structured = provider is not None and not getattr(provider, "offline", False)
    out_budget = summary_budget(plan.replaced_tokens, window)
    system = summary_system(focus, structured)
    in_budget = window - out_budget - (count_text(system, enc) + 64)
    if structured and in_budget - count_text(memory_model.current_json(plan.old_memory), enc) < MIN_SUMMARIZER_INPUT:
        structured, system = False, summary_system(focus)
        in_budget = window - out_budget - (count_text(system, enc) + 64)
    prep = Prepared(plan, provider=provider, window=window, out_budget=out_budget,
                    max_tokens=math.ceil(out_budget * calibration), in_budget=in_budget, encoding=enc,
                    focus=clean_focus(focus), system=system, structured=structured)
    if in_budget < MIN_SUMMARIZER_INPUT:
        return prep  # summarize() fails with a clear message, after compaction_started
    old_tokens = count_text(plan.old_summary_text, enc)
    first_room = max(128, in_budget - old_tokens - WRAPPER_TOKENS)
    room = max(128, in_budget - out_budget - WRAPPER_TOKENS)
    line_limit = min(first_room, room)
    lines, estimates = [], []
    for m in plan.new_messages:
        line = transcript_line(m)
        # The cached node count bounds the line's tokens: the node's framing and
        # "role\n" cover the line's "[role] " prefix and the separator between lines.
        est = m["tokens"]
        if est > line_limit:  # one message larger than a whole call: keep its head
            n = count_text(line, enc)
            if n > line_limit:
                line = truncate_to_tokens(line, max(64, line_limit - 32), enc) + CUT_NOTE
                n = count_text(line, enc)
            est = n + 1
        lines.append(line)
        estimates.append(est)
    prep.lines, prep.estimates = lines, estimates
    prep.chunks = plan_chunks(estimates, first_room=first_room, room=room)
    return prep


def _fit(partial: str, lines: list[str], in_budget: int, encoding: str, memory: str = "") -> tuple[str, int]:
    """The summarizer input for `partial` plus the longest prefix of `lines` that fits
    `in_budget` exactly. Returns (input, lines used ≥ 1). A lone line that does not
    fit is cut (deeper on each retry: joins can tokenize differently from parts); a
    previous summary that leaves too little room is cut to half the budget."""
    k = len(lines)
    first, margin, cut = lines[0], 0, False
    note = count_text(CUT_NOTE, encoding)
    for _ in range(64):
        body = _summary_input(partial, lines[:k], memory)
        n = count_text(body, encoding)
        if n <= in_budget:
            return body, k
        if k > 1:
            excess, drop = n - in_budget, 0
            while k - drop > 1 and excess > 0:
                drop += 1
                excess -= count_text(lines[k - drop], encoding)
            k -= drop
            continue
        base = count_text(_summary_input(partial, [""], memory), encoding)
        if base > in_budget * 3 // 4:
            # The previous summary alone leaves too little room (a summarizer that
            # ignored max_tokens, or an old summary written for a larger window).
            partial = truncate_to_tokens(partial, in_budget // 2, encoding)
            continue
        if cut:  # the cut line still overshoots (a join tokenized longer than its parts): cut deeper
            margin += max(4, n - in_budget)
        # The first cut takes exactly the room left; only a retry keeps a margin. (Subtracting
        # the uncut line's whole excess as well cut it twice as deep as needed.)
        cut = True
        lines = [truncate_to_tokens(first, max(0, in_budget - base - margin - note), encoding) + CUT_NOTE]
    raise OcwError("could not fit a summarizer call into its window")  # pragma: no cover - defensive


def summarize(provider, prep: Prepared, on_call=None, meanwhile=None) -> tuple[str, int]:
    """Rolling summary of the prepared transcript onto the old summary. Each call
    takes as many lines as fit beside the current partial summary, and its input is
    counted exactly before it is sent, so every call fits the summarizer's window.
    `on_call(k, done, n)` is told before the k-th call, with `done` of the `n` lines
    summarized so far (progress: call k of an estimated total). `meanwhile()` runs
    once, while the first call's input is counted on another thread (`count_soon`):
    Python work that needs no answer overlaps the longest count of the compaction.
    Returns (text, calls made)."""
    if prep.in_budget < MIN_SUMMARIZER_INPUT:
        raise OcwError.localized("err_summarizer_window", window=f"{prep.window:,}")
    enc = prep.encoding
    partial = prep.plan.old_summary_text
    memory = memory_model.current_json(prep.plan.old_memory) if prep.structured else ""
    i, n = 0, len(prep.lines)
    while i < n:
        room = max(128, prep.in_budget - count_text(partial + memory, enc) - WRAPPER_TOKENS)
        j = _take(prep.estimates, i, room)
        if meanwhile is not None:  # the input `_fit` tries first, exactly as it will build it
            count_soon(_summary_input(partial, prep.lines[i:j], memory), enc)
            meanwhile()
            meanwhile = None
        body, used = _fit(partial, prep.lines[i:j], prep.in_budget, enc, memory)
        for _ in range(2):  # an empty answer is asked once more: a sampled model can stop at once
            if on_call is not None:
                on_call(prep.calls + 1, i, n)
            answer, parsed = _call(provider, prep, body), None
            if prep.structured:  # the memory block leaves the prose; the next call reads it as current
                answer, parsed = memory_model.split_answer(answer)
            if answer:
                break
        if not answer:
            raise OcwError.localized("err_empty_summary")
        i += used
        partial = answer
        if prep.structured:
            prep.memory_answer = parsed
            if parsed is not None:
                memory = memory_model.current_json_of(parsed)
    return partial, prep.calls


def _call(provider, prep: Prepared, body: str) -> str:
    """One summarizer call on `body`; its answer stripped. Its usage, when reported, is a sample."""
    prep.last_input = body
    reply = provider.complete(
        [{"role": "user", "content": [{"type": "text", "text": body}]}],
        system=prep.system,
        max_tokens=prep.max_tokens or prep.out_budget,
    )
    prep.calls += 1
    measured = getattr(getattr(reply, "usage", None), "input_tokens", None)
    if isinstance(measured, int) and measured > 0:  # the summarizer's own usage calibrates the session
        prep.usage_samples.append((measured, call_estimate(prep)))
    return (reply.text or "").strip()


def call_estimate(prep: Prepared) -> int:
    """The estimated input tokens of the last call sent: its message, system prompt and framing."""
    enc = prep.encoding
    return (count_message("user", [{"type": "text", "text": prep.last_input}], enc)
            + count_text(prep.system, enc) + FRAME_TOKENS)


def refit(sizing: tuple[int, float], err: ContextOverflowError, estimate: int) -> tuple[int, float] | None:
    """The (window, calibration) a retry of a refused summarizer call is planned with, from
    the server's own words: the window it stated (never above the one planned with) and the
    prompt size it counted over ocw's estimate of that call. The ratio is this retry's measure
    only: a refused request calibrates nothing (DESIGN.md §3). Why the retry can fit: each call
    is planned to the window in calibrated tokens, and the refused one was over it only by
    what the calibration under-counted or the window over-stated. A refusal that tightens
    neither (it stated nothing, or a prompt that fits with no room left for the reply) is
    planned as if every token counted twice, so a retry never repeats the call that failed.
    None (no retry) for a stated window under MIN_LEARNED_WINDOW: a misreading or a window
    no summarizer call fits (its input alone is at least MIN_SUMMARIZER_INPUT)."""
    window, calibration = sizing
    if positive_int(err.limit):
        if err.limit < MIN_LEARNED_WINDOW:
            return None
        window = min(window, err.limit)
    if positive_int(err.prompt_tokens) and estimate > 0:
        calibration = max(calibration, min(err.prompt_tokens / estimate, CALIBRATION_MAX))
    return (window, calibration) if (window, calibration) != sizing else (window, calibration * 2)


def summary_budget(replaced_tokens: int, window: int) -> int:
    """Room for the summary: a fifth of what it replaces, within sane bounds."""
    return max(256, min(int(replaced_tokens * 0.2), 4096, max(256, window // 4)))
