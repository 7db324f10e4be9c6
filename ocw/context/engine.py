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
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import events as ev
from ..errors import CompactionInProgress, OcwError
from ..i18n import system_message, text as i18n_text
from ..providers.base import SUMMARY_MARKER
from ..render import block_text
from ..tokens import count_message, count_text, truncate_to_tokens
from .cut import find_cut_index
from .facts import append_facts

AUTO_FAILURE_LIMIT = 3
FACTS_SHARE = 0.15  # of the summary budget, for identifiers the summary omits

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


AUTO_TAIL_SHARE = 0.4  # automatic/reactive compaction keeps at most this share of the window


def plan_compaction(session, keep_recent_tokens: int | None = None, trigger: str = "manual") -> Plan | str:
    """Read rendered history and choose the cut. Returns a Plan, or the reason
    there is nothing to compact. Makes no LLM call and writes nothing."""
    history = session.rendered_history()
    summary = next((m for m in history if m.get("name") == "context/summary"), None)
    tail = [m for m in history if m.get("id") and m is not summary]
    # An automatic compaction must bring the next turn well under the threshold,
    # or it would run again every turn (a loop); the manual default follows the seed.
    cap = int(session.context_window * AUTO_TAIL_SHARE) if trigger != "manual" else None
    cut = find_cut_index(tail, session.context_window, keep_recent_tokens, max_tail_tokens=cap)
    if cut.index <= 0:
        return cut.reason
    folded = tail[: cut.index]
    branch = session.branch()
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
    return f"[{msg['role']}{':' + msg['name'] if msg.get('name') else ''}] {block_text(msg['content'])}"


def _summary_input(previous: str, lines: list[str]) -> str:
    prev = previous.strip() or "(none)"
    return f"<previous-summary>\n{prev}\n</previous-summary>\n\n<new-turns>\n" + "\n\n".join(lines) + "\n</new-turns>"


def summarize(provider, plan: Plan, *, out_budget: int, window: int, encoding: str) -> tuple[str, int]:
    """Rolling summary of plan.new_messages onto the old summary, in chunks that
    each fit the summarizer's own window. Returns (text, calls made)."""
    overhead = count_text(SUMMARY_SYSTEM, encoding) + 64
    in_budget = window - out_budget - overhead
    if in_budget < 256:
        raise OcwError(f"the summarizer's window ({window:,} tokens) is too small to summarize anything")
    partial, calls, chunk, chunk_tokens = plan.old_summary_text, 0, [], 0

    def flush():
        nonlocal partial, calls, chunk, chunk_tokens
        reply = provider.complete(
            [{"role": "user", "content": [{"type": "text", "text": _summary_input(partial, chunk)}]}],
            system=SUMMARY_SYSTEM,
            max_tokens=out_budget,
        )
        calls += 1
        partial = (reply.text or "").strip()
        if not partial:
            raise OcwError("the summarizer returned an empty summary")
        chunk, chunk_tokens = [], 0

    for msg in plan.new_messages:
        line = transcript_line(msg)
        room = in_budget - count_text(partial, encoding) - 32
        tokens = count_text(line, encoding)
        if tokens > room:  # one message larger than a whole chunk: keep its head
            if chunk:
                flush()
                room = in_budget - count_text(partial, encoding) - 32
            line = truncate_to_tokens(line, max(64, room - 32), encoding) + " […cut for the summarizer]"
            tokens = count_text(line, encoding)
        if chunk and chunk_tokens + tokens > room:
            flush()
        chunk.append(line)
        chunk_tokens += tokens
    if chunk:
        flush()
    return partial, calls


def summary_budget(replaced_tokens: int, window: int) -> int:
    """Room for the summary: a fifth of what it replaces, within sane bounds."""
    return max(256, min(int(replaced_tokens * 0.2), 4096, max(256, window // 4)))


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
    session.sync()
    # Both figures come from the same estimate (estimate_total_used): a measured
    # figure before and an estimate after would compare two different rulers.
    tokens_before = session.occupancy()["estimated_total"]
    plan = plan_compaction(session, keep_recent_tokens, trigger)
    if isinstance(plan, str):
        payload = {"no_op": True, "reason": plan, "trigger": trigger,
                   "tokens_before": tokens_before, "tokens_after": tokens_before}
        session.events.emit(ev.COMPACTION_FINISHED, payload)
        return CompactionResult("no_op", trigger, tokens_before=tokens_before, tokens_after=tokens_before,
                                reason=plan, payload=payload)

    provider = provider or _default_provider(session)
    session.compaction_running = True
    session.events.emit(ev.COMPACTION_STARTED, {"trigger": trigger, "tokens_before": tokens_before})
    calls = 0
    try:
        enc = session.encoding.name
        window = getattr(provider, "context_window", None) or session.context_window
        out_budget = summary_budget(plan.replaced_tokens, window)
        text, calls = summarize(provider, plan, out_budget=out_budget, window=window, encoding=enc)
        source = plan.old_summary_text + "\n" + "\n".join(transcript_line(m) for m in plan.new_messages)
        text = append_facts(text, source, int(out_budget * FACTS_SHARE), enc)
        new_tokens = count_message("llm", [{"type": "text", "text": text}], enc, "context/summary")
        if new_tokens >= plan.replaced_tokens:
            raise OcwError(
                f"the summary ({new_tokens:,} tokens) is not smaller than what it replaces "
                f"({plan.replaced_tokens:,} tokens); nothing was saved"
            )
        summary_id = session._persist_summary(text, plan.covered_ids, plan.head, plan.generation)
    except BaseException as e:  # KeyboardInterrupt included: nothing was persisted
        error = e.user_message() if isinstance(e, OcwError) else (str(e) or e.__class__.__name__)
        if trigger == "auto":
            session.auto_compact_failures += 1
        payload = {"error": error, "trigger": trigger}
        session.events.emit(ev.COMPACTION_FAILED, payload)
        if not isinstance(e, Exception):
            raise
        return CompactionResult("failed", trigger, tokens_before=tokens_before, tokens_after=tokens_before,
                                reason=error, error=error, summarizer_calls=calls, payload=payload)
    session.auto_compact_failures = 0
    session.compaction_running = False
    after = session.occupancy()
    payload = {"summarised_count": len(plan.new_messages), "tokens_before": tokens_before,
               "tokens_after": after["total"], "summary_id": summary_id, "trigger": trigger}
    session.events.emit(ev.COMPACTION_FINISHED, payload)
    session._publish()
    return CompactionResult("succeeded", trigger, summarised_count=len(plan.new_messages),
                            tokens_before=tokens_before, tokens_after=after["total"], summary_id=summary_id,
                            summarizer_calls=calls, payload=payload)


def auto_compact_paused(session) -> bool:
    return session.auto_compact_failures >= AUTO_FAILURE_LIMIT
