"""The compaction engine: read → threshold → summarize → persist → refresh.

Invariants, and why they hold:
- No-op is decided before any LLM call: the cut is chosen from token counts
  alone (`find_cut_index`), so "nothing to compact" never emits
  `compaction_started` and never reaches the summarizer.
- Re-compaction never re-reads text a summary covers: the summarizer's input is
  the old summary's text plus only the newly folded turns.
- All or nothing: the only write is `Session._persist_summary`, one
  transaction; every failure before or inside it leaves the file as it was.
- A summary must be smaller than what it replaces, or it is rejected: a
  compaction that grows the context is a failure, not a success.
- Every summarizer call fits the summarizer's window: lines are grouped by the
  cached per-node counts (no re-tokenizing in `prepare`), and each call's input
  is counted exactly before it is sent (`_fit`), separators included.
- Identifiers survive rolling compactions: the facts pass appends what the
  summary omitted, with room of its own (`facts_budget`), and the next
  compaction reads that list as part of the old summary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import events as ev
from ..errors import CompactionInProgress, OcwError
from ..i18n import system_message, text as i18n_text
from ..providers.base import SUMMARY_MARKER
from ..render import block_text
from ..session import SUMMARY_NAME
from ..tokens import FRAME_TOKENS, count_message, count_text, render_block, truncate_to_tokens
from .cut import TOO_SHORT as CUT_TOO_SHORT, find_cut_index
from .facts import append_facts

AUTO_FAILURE_LIMIT = 3
FACTS_MAX = 2048  # tokens for identifiers the summary omits (see facts_budget) ...
FACTS_WINDOW_DIVISOR = 16  # ... at most 1/16 of the session's window ...
FACTS_REPLACED_SHARE = 0.9  # ... and summary + list at most 90 % of what they replace

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
    covered_ids: list[str]  # old summary's range + newly folded turns (a branch prefix)
    new_messages: list[dict]  # the newly folded turns, rendered
    old_summary_text: str
    replaced_tokens: int  # old summary + newly folded turns
    head: str | None
    generation: int


ALREADY_COMPACTED = "already_compacted"  # no-op kinds, each with its own system message
TOO_SHORT = "too_short"
NOTHING_OLDER = "nothing_older"


def plan_compaction(session, keep_recent_tokens: int | None = None, trigger: str = "manual") -> Plan | tuple[str, str]:
    """Read rendered history and choose the cut. Returns a Plan, or (no-op kind,
    reason) when there is nothing to compact. Makes no LLM call and writes nothing.
    The same tail rule holds for every trigger (see cut.py); budgets are judged in
    calibrated tokens, the ones the ring shows."""
    history = session.rendered_history()
    summary = next((m for m in history if m.get("name") == SUMMARY_NAME), None)
    tail = [m for m in history if m.get("id") and m is not summary]
    cut = find_cut_index(tail, session.context_window, keep_recent_tokens, calibration=session.calibration)
    if cut.index <= 0:
        # The seed's "already compacted" text is for a session that has a summary;
        # one that never had one says why there is nothing to fold instead.
        kind = ALREADY_COMPACTED if summary else TOO_SHORT if cut.kind == CUT_TOO_SHORT else NOTHING_OLDER
        return kind, cut.reason
    folded = tail[: cut.index]
    branch = session.branch()
    start = len(branch) - len(tail)  # the tail is the branch after the summary's range
    if branch[start] != folded[0]["id"]:  # pragma: no cover - defensive
        start = branch.index(folded[0]["id"])
    covered = branch[: start + len(folded)]
    old_text = block_text(summary["content"]) if summary else ""
    return Plan(
        covered_ids=covered,
        new_messages=folded,
        old_summary_text=old_text,
        replaced_tokens=(summary["tokens"] if summary else 0) + sum(m["tokens"] for m in folded),
        head=session.head,
        generation=session.generation,
    )


def transcript_line(msg: dict) -> str:
    name = msg.get("name")
    head = f"[{msg['role']}:{name}] " if name else f"[{msg['role']}] "
    blocks = msg["content"]
    # One block (most messages): skip block_text's join; the text is the same.
    return head + (render_block(blocks[0]) if len(blocks) == 1 else block_text(blocks))


def _summary_input(previous: str, lines: list[str]) -> str:
    prev = previous.strip() or "(none)"
    return f"<previous-summary>\n{prev}\n</previous-summary>\n\n<new-turns>\n" + "\n\n".join(lines) + "\n</new-turns>"


WRAPPER_TOKENS = 32  # the <previous-summary>/<new-turns> tags around a chunk
CUT_NOTE = " […cut for the summarizer]"


@dataclass
class Prepared:
    """Everything a compaction needs before its LLM call (see `prepare`)."""

    tokens_before: int
    plan: Plan | None = None  # None: nothing to compact (see `reason`, `no_op_kind`)
    reason: str = ""
    no_op_kind: str = ""
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


def _summarizer_window(provider, session) -> int:
    """The smaller of the summarizer's own window (if it states one) and the session's."""
    own = getattr(provider, "context_window", None)
    return min(own, session.context_window) if own else session.context_window


def prepare(session, keep_recent_tokens: int | None = None, trigger: str = "manual", provider=None) -> Prepared:
    """Everything but the LLM call: sync, occupancy, rendered history, cut selection,
    and the summarizer's input (transcript lines, their token estimates, the planned
    chunks). Writes nothing, calls no model, re-tokenizes no ordinary message."""
    session.sync()
    # "X" of "X → Y" is the figure the ring showed just before (measured or calibrated).
    tokens_before = session.occupancy()["total"]
    plan = plan_compaction(session, keep_recent_tokens, trigger)
    if isinstance(plan, tuple):
        kind, reason = plan
        return Prepared(tokens_before, reason=reason, no_op_kind=kind)
    provider = provider or _default_provider(session)
    enc = session.encoding.name
    # Sizes below are in estimated tokens; the model counts `calibration` times as
    # many, so its window holds that much less of them.
    calibration = session.calibration
    window = int(_summarizer_window(provider, session) / calibration)
    out_budget = summary_budget(plan.replaced_tokens, window)
    in_budget = window - out_budget - (count_text(SUMMARY_SYSTEM, enc) + 64)
    prep = Prepared(tokens_before, plan, provider=provider, window=window, out_budget=out_budget,
                    max_tokens=math.ceil(out_budget * calibration), in_budget=in_budget, encoding=enc)
    if in_budget < 256:
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


def _fit(partial: str, lines: list[str], in_budget: int, encoding: str) -> tuple[str, int]:
    """The summarizer input for `partial` plus the longest prefix of `lines` that fits
    `in_budget` exactly. Returns (input, lines used ≥ 1). A lone line that does not
    fit is cut (deeper on each retry: joins can tokenize differently from parts); a
    previous summary that leaves too little room is cut to half the budget."""
    k = len(lines)
    first, margin = lines[0], 0
    note = count_text(CUT_NOTE, encoding)
    for _ in range(64):
        body = _summary_input(partial, lines[:k])
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
        base = count_text(_summary_input(partial, [""]), encoding)
        if base > in_budget * 3 // 4:
            # The previous summary alone leaves too little room (a summarizer that
            # ignored max_tokens, or an old summary written for a larger window).
            partial = truncate_to_tokens(partial, in_budget // 2, encoding)
            continue
        margin += max(4, n - in_budget)
        lines = [truncate_to_tokens(first, max(0, in_budget - base - margin - note), encoding) + CUT_NOTE]
    raise OcwError("could not fit a summarizer call into its window")  # pragma: no cover - defensive


def summarize(provider, prep: Prepared) -> tuple[str, int]:
    """Rolling summary of the prepared transcript onto the old summary. Each call
    takes as many lines as fit beside the current partial summary, and its input is
    counted exactly before it is sent, so every call fits the summarizer's window.
    Returns (text, calls made)."""
    if prep.in_budget < 256:
        raise OcwError.localized("err_summarizer_window", window=f"{prep.window:,}")
    enc = prep.encoding
    partial = prep.plan.old_summary_text
    i, n = 0, len(prep.lines)
    while i < n:
        room = max(128, prep.in_budget - count_text(partial, enc) - WRAPPER_TOKENS)
        j = _take(prep.estimates, i, room)
        body, used = _fit(partial, prep.lines[i:j], prep.in_budget, enc)
        i += used
        reply = provider.complete(
            [{"role": "user", "content": [{"type": "text", "text": body}]}],
            system=SUMMARY_SYSTEM,
            max_tokens=prep.max_tokens or prep.out_budget,
        )
        prep.calls += 1
        measured = getattr(getattr(reply, "usage", None), "input_tokens", None)
        if isinstance(measured, int) and measured > 0:  # the summarizer's own usage calibrates the session
            prep.usage_samples.append((measured, count_message("user", [{"type": "text", "text": body}], enc)
                                       + count_text(SUMMARY_SYSTEM, enc) + FRAME_TOKENS))
        partial = (reply.text or "").strip()
        if not partial:
            raise OcwError.localized("err_empty_summary")
    return partial, prep.calls


def summary_budget(replaced_tokens: int, window: int) -> int:
    """Room for the summary: a fifth of what it replaces, within sane bounds."""
    return max(256, min(int(replaced_tokens * 0.2), 4096, max(256, window // 4)))


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


def _default_provider(session):
    provider = getattr(session, "provider", None)
    if provider is None:
        from ..providers import make_provider

        provider = make_provider("offline", context_window=session.context_window)
    return provider


def compact(session, *, keep_recent_tokens: int | None = None, trigger: str = "manual", provider=None) -> CompactionResult:
    if keep_recent_tokens is not None and (
        not isinstance(keep_recent_tokens, int) or isinstance(keep_recent_tokens, bool) or keep_recent_tokens < 0
    ):
        raise OcwError(f"keep_recent_tokens must be a whole number ≥ 0, not {keep_recent_tokens!r}")
    if not session.compact_lock.acquire(blocking=False):
        raise CompactionInProgress(i18n_text("busy", getattr(session, "lang", None)))
    try:
        return _compact_locked(session, keep_recent_tokens, trigger, provider)
    finally:
        session.compaction_running = False
        session.compact_lock.release()


def _compact_locked(session, keep_recent_tokens, trigger, provider) -> CompactionResult:
    prep = prepare(session, keep_recent_tokens, trigger, provider)
    tokens_before, plan = prep.tokens_before, prep.plan
    if plan is None:  # decided before any LLM call: no compaction_started, no summarizer call
        payload = {"no_op": True, "no_op_kind": prep.no_op_kind, "reason": prep.reason, "trigger": trigger,
                   "tokens_before": tokens_before, "tokens_after": tokens_before}
        session.events.emit(ev.COMPACTION_FINISHED, payload)
        return CompactionResult("no_op", trigger, tokens_before=tokens_before, tokens_after=tokens_before,
                                reason=prep.reason, payload=payload)

    session.compaction_running = True
    session.events.emit(ev.COMPACTION_STARTED, {"trigger": trigger, "tokens_before": tokens_before})
    try:
        enc = prep.encoding
        text, _ = summarize(prep.provider, prep)
        source = plan.old_summary_text + "\n" + "\n".join(prep.lines)
        text_tokens = count_message("llm", [{"type": "text", "text": text}], enc, SUMMARY_NAME)
        if text_tokens < plan.replaced_tokens:  # else: rejected below, facts or not
            text = append_facts(text, source, facts_budget(plan.replaced_tokens, text_tokens, prep.window), enc)
        new_tokens = count_message("llm", [{"type": "text", "text": text}], enc, SUMMARY_NAME)
        if new_tokens >= plan.replaced_tokens:
            raise OcwError.localized("err_not_smaller", new=f"{new_tokens:,}", old=f"{plan.replaced_tokens:,}")
        summary_id = session._persist_summary(text, plan.covered_ids, plan.head, plan.generation,
                                              usage_samples=prep.usage_samples)
    except BaseException as e:  # KeyboardInterrupt included: nothing was persisted
        error = e.user_message() if isinstance(e, OcwError) else (str(e) or e.__class__.__name__)
        if trigger == "auto":
            session.auto_compact_failures += 1
        payload = {"error": error, "trigger": trigger}
        key = "err_interrupted" if isinstance(e, KeyboardInterrupt) else getattr(e, "key", None)
        if key:  # ocw's own words: the message can say them in the user's language
            payload.update(error_key=key, error_params=getattr(e, "params", {}))
        session.events.emit(ev.COMPACTION_FAILED, payload)
        if not isinstance(e, Exception):
            raise
        return CompactionResult("failed", trigger, tokens_before=tokens_before, tokens_after=tokens_before,
                                reason=error, error=error, summarizer_calls=prep.calls, payload=payload)
    session.auto_compact_failures = 0
    session.compaction_running = False
    after = session.occupancy()
    payload = {"summarised_count": len(plan.new_messages), "tokens_before": tokens_before,
               "tokens_after": after["total"], "summary_id": summary_id, "trigger": trigger}
    session.events.emit(ev.COMPACTION_FINISHED, payload)
    session._publish()
    return CompactionResult("succeeded", trigger, summarised_count=len(plan.new_messages),
                            tokens_before=tokens_before, tokens_after=after["total"], summary_id=summary_id,
                            summarizer_calls=prep.calls, payload=payload)


def auto_compact_paused(session) -> bool:
    return session.auto_compact_failures >= AUTO_FAILURE_LIMIT
