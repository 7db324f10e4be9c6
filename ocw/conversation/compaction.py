"""One compaction of a session: read → threshold → summarize → persist → refresh.

The engine (ocw/context/engine.py) is pure of the store: it plans and asks the
summarizer; ocw/context/summary_text.py checks and finishes the text. This is
where a session meets them:
- No-op is decided before any LLM call, so "nothing to compact" never emits
  `compaction_started` and never reaches the summarizer.
- All or nothing: the only write is `Session._persist_summary`, one
  transaction (summary + supersede + generation + count + calibration); every
  failure before or inside it leaves the session exactly as it was.
- One compaction at a time per session (`compact_lock`); three automatic
  failures in a row pause automatic compaction for the session.
- It always makes progress while anything is older than the kept tail: when the
  summarizer's window has no room for one call (a small window, a high
  calibration), the structural summary (ocw/context/structural.py, no model
  call, bounded to a third of what it replaces) is stored instead, and the
  finished message says so in one line. A model's summary that is not smaller
  than what it replaces is still refused (the guards of seed 004).
"""
from __future__ import annotations

import time

from ocw.context import events as ev
from ocw.context.engine import (MIN_SUMMARIZER_INPUT, CompactionResult, call_estimate, plan_compaction, prepare,
                                refit, summarize)
from ocw.context.graph import SUMMARY_NAME
from ocw.context.landing import landing_tail_room
from ocw.context.memory_model import events_of
from ocw.context.pins import apply_forgets, forgets
from ocw.context.render import render_blocks
from ocw.context.structural import structural_summary
from ocw.context.summary_text import build_memory, finish, memory_turns, summary_blocks
from ocw.conversation import hooks, stop
from ocw.conversation import summarizer as own_rules
from ocw.text.errors import CompactionInProgress, ContextOverflowError, OcwError
from ocw.text.i18n import text as i18n_text
from ocw.text.tokens import counting_once

AUTO_FAILURE_LIMIT = 3


def _default_provider(session):
    provider = getattr(session, "provider", None)
    if provider is None:
        from ocw.providers import make_provider

        provider = make_provider("offline", context_window=session.context_window)
    return provider


def summarizer_window(provider, session) -> int:
    """The smaller of the summarizer's own window (if it states one) and the session's."""
    own = getattr(provider, "context_window", None)
    return min(own, session.context_window) if own else session.context_window


def compact(session, *, keep_recent_tokens: int | None = None, trigger: str = "manual",
            provider=None, focus: str | None = None, incoming: int | None = None,
            own_summarizer: bool = False) -> CompactionResult:
    """`incoming` (calibrated tokens of the message about to be sent): given for an
    automatic compaction, it lands the session well under the line (landing.py).
    `own_summarizer`: `provider` is a summarizer of its own (Ocw.summary_model), planned
    with its own window and calibration (ocw/conversation/summarizer.py), not the chat's."""
    if keep_recent_tokens is not None and (
        not isinstance(keep_recent_tokens, int) or isinstance(keep_recent_tokens, bool) or keep_recent_tokens < 0
    ):
        raise OcwError(f"keep_recent_tokens must be a whole number ≥ 0, not {keep_recent_tokens!r}")
    if not session.compact_lock.acquire(blocking=False):
        raise CompactionInProgress(i18n_text("busy", getattr(session, "lang", None)))
    try:
        # Each long text tokenized once per compaction (each line's identifiers: once per kernel).
        with counting_once():
            return _compact_locked(session, keep_recent_tokens, trigger, provider, focus, incoming,
                                   own_summarizer and provider is not None)
    finally:
        session.compaction_running = False
        session.compact_lock.release()


def _unpruned(session, plan) -> dict[str, list]:
    """The folded tool results as the model first read them (capped, not the prune
    stubs): pruning runs before an automatic compaction, and a fact in a tool output
    must reach the memory before the output leaves the context. With no prune mark nothing
    is a stub: the plan's messages are what the model read, and nothing is read again."""
    if session.prune_mark() is None:
        return {}
    nodes = [n for n in (session._rows.get(m.get("id")) for m in plan.new_messages if m["role"] == "tool")
             if n is not None]
    contents = session._contents(nodes) if nodes else {}
    cap, enc = session.tool_result_cap, session.encoding.name
    return {nid: render_blocks(blocks, cap, enc) for nid, blocks in contents.items()}


def _sizing(session, provider, own: bool) -> tuple[int, float]:
    """The summarizer's window and calibration: its own when it is a summarizer of its own."""
    if own:
        return own_rules.window(session, provider), own_rules.calibration(session, provider)
    return summarizer_window(provider, session), session.calibration


def _compact_locked(session, keep_recent_tokens, trigger, provider, focus, incoming, own) -> CompactionResult:
    session.sync()
    # "X" of "X → Y" is the figure the ring showed just before (measured or calibrated).
    tokens_before = session.occupancy()["total"]
    head, generation = session.head, session.generation
    active = session.active_summary()
    max_tail = None
    if incoming is not None:  # an automatic compaction: land well under the line
        parts = session.occupancy_parts()
        max_tail = landing_tail_room(session.context_window, incoming=incoming,
                                     fixed=(parts["system"] + parts["tools"]) * session.calibration)
    # Read once: the plan, a wider fold and what was lost all read this history (a change to
    # the session meanwhile moves HEAD or the generation, and the one write then refuses).
    history = session.rendered_history()
    plan = plan_compaction(history, session.context_window, keep_recent_tokens,
                           session.calibration, first_turn=(active.cover_count if active else 0) + 1,
                           max_tail=max_tail)
    if not isinstance(plan, tuple) and keep_recent_tokens is None and plan.replaced_tokens < MIN_SUMMARIZER_INPUT:
        plan = _fold_enough(session, plan, active, history)
    if isinstance(plan, tuple):  # decided before any LLM call: no compaction_started, no summarizer call
        kind, reason = plan
        payload = {"no_op": True, "no_op_kind": kind, "reason": reason, "trigger": trigger,
                   "tokens_before": tokens_before, "tokens_after": tokens_before}
        session.events.emit(ev.COMPACTION_FINISHED, payload)
        return CompactionResult("no_op", trigger, tokens_before=tokens_before, tokens_after=tokens_before,
                                reason=reason, payload=payload)

    hook_errors: list[dict] = []
    if hooks.registered("pre_compact"):  # the plan, before any request: a hook may veto or add to the focus
        info = hooks.PreCompact(trigger, session.name, session.id,
                                [{"id": m.get("id"), "role": m["role"], "tokens": m.get("tokens", 0)}
                                 for m in plan.new_messages], plan.replaced_tokens, focus)
        hook_errors = hooks.run_pre(info)
        if info.vetoed is not None:
            payload = {"no_op": True, "no_op_kind": "vetoed", "reason": info.vetoed, "trigger": trigger,
                       "tokens_before": tokens_before, "tokens_after": tokens_before, "hook_errors": hook_errors}
            session.events.emit(ev.COMPACTION_FINISHED, payload)
            return CompactionResult("no_op", trigger, tokens_before=tokens_before, tokens_after=tokens_before,
                                    reason=info.vetoed, payload=payload)
        focus = info.focus
    provider = provider or _default_provider(session)

    def prepared(sizing: tuple[int, float]):
        window, calibration = sizing
        return prepare(plan, provider, window=window, calibration=calibration, encoding=session.encoding.name,
                       focus=focus)

    sizing = _sizing(session, provider, own)
    prep = prepared(sizing)
    session.compaction_running = True
    started, planned, stops = time.monotonic(), max(1, len(prep.chunks)), stop.count()
    session.events.emit(ev.COMPACTION_STARTED, {"trigger": trigger, "tokens_before": tokens_before,
                                                "calls": planned})

    def on_call(k: int, done: int, lines: int) -> None:
        stop.check(stops)  # the stop button, pressed while this runs off the main thread
        # "Compacting… k of n": n is the plan's chunk count at first, then the calls so far
        # plus the lines left at the pace so far (exact token counts can fit fewer lines).
        calls = planned if done == 0 else (k - 1) + -(-(lines - done) * (k - 1) // done)  # the first call: done 0
        session.events.emit(ev.COMPACTION_PROGRESS, {"call": k, "calls": max(calls, k), "trigger": trigger,
                                                     "elapsed": round(time.monotonic() - started, 1)})

    # No room for one call, or too little to fold for a model's summary to come out smaller
    # (a high calibration on a small window leaves a few dozen tokens older than the tail):
    # no model call at all, so %compact makes progress while anything is older than the tail.
    no_room = prep.in_budget < MIN_SUMMARIZER_INPUT
    small = keep_recent_tokens is None and plan.replaced_tokens < MIN_SUMMARIZER_INPUT  # an explicit keep asks the model
    structural = no_room or small
    early: list = []  # (read, memory) of the deterministic pass, when it ran beside the first count

    def memory_pass() -> None:
        read = _unpruned(session, plan)
        early.append((read, build_memory(prep, session.context_window, read=read)))

    try:
        if structural:
            text = structural_text(prep)
        else:
            try:
                # Unstructured (the offline model, a window too small for the ask), the memory
                # needs no answer: it is built while the summarizer's input is counted.
                text = summarize(provider, prep, on_call, None if prep.structured else memory_pass)[0]
            except ContextOverflowError as e:
                # The summarizer's server refused a call as too long: try once more, planned to what
                # it said. A summarizer of its own also keeps the window it stated (its own, one
                # write); the chat's model learns its window from the turn's own requests.
                if own and e.limit:
                    own_rules.learn_window(session, provider, e.limit, "summarizer overflow")
                sizing = refit(sizing, e, call_estimate(prep))  # against what the refused call was planned with
                if sizing is None:
                    raise
                prep = prepared(sizing)
                # Planned to what the server said, no call may fit: the structural summary, said so.
                no_room = structural = prep.in_budget < MIN_SUMMARIZER_INPUT
                text = structural_text(prep) if no_room else summarize(provider, prep, on_call)[0]
        stop.check(stops)  # pressed during the last call: still nothing saved
        if early:
            read, memory = early[0]
        else:
            read = _unpruned(session, plan)
            # A real model's structured memory, grounded, merged with the deterministic pass (latest
            # wins); an answer that did not parse adds nothing and is said in one line below.
            extra = events_of(prep.memory_answer, memory_turns(plan, read), plan.old_memory) \
                if prep.structured and not structural else ()
            memory = build_memory(prep, session.context_window, extra=extra, read=read)
        # What the user forgot stays forgotten, re-derived from the folded turns or not (context/pins.py).
        memory = apply_forgets(memory, forgets(session.metadata))
        text = summary_blocks(finish(prep, text, memory), memory)
        record = {"trigger": trigger, "before": tokens_before, "folded": len(plan.new_messages),
                  "focus": prep.focus or None, "lost": _lost(plan, text, memory, history),
                  "summarizer": own_rules.name_of(provider), "own_summarizer": own}
        summary_id = session._persist_summary(text, plan.boundary_id, head, generation,
                                              usage_samples=prep.usage_samples, record=record,
                                              summarizer_model=provider.model if own else None)
    except BaseException as e:  # KeyboardInterrupt included: nothing was persisted
        error = e.user_message() if isinstance(e, OcwError) else (str(e) or e.__class__.__name__)
        if trigger == "auto":
            session.auto_compact_failures += 1
        payload = {"error": error, "trigger": trigger, "hook_errors": hook_errors}
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
    if prep.focus:
        payload["focus"] = prep.focus
    if no_room:
        payload["structural_window"] = prep.window
    elif small:
        payload["structural_small"] = True
    elif prep.structured and prep.memory_answer is None:
        payload["memory_fallback"] = True
    if hooks.registered("post_compact"):
        hook_errors += hooks.run_post(hooks.PostCompact(
            trigger, session.name, session.id, summary_id, text[0]["text"], text[1]["text"] if len(text) > 1 else "",
            tokens_before, after["total"], len(plan.new_messages)))
    payload["hook_errors"] = hook_errors
    session.events.emit(ev.COMPACTION_FINISHED, payload)
    session._publish()
    return CompactionResult("succeeded", trigger, summarised_count=len(plan.new_messages),
                            tokens_before=tokens_before, tokens_after=after["total"], summary_id=summary_id,
                            summarizer_calls=prep.calls, payload=payload)


def _fold_enough(session, plan, active, history):
    """Too little older than the tail for any summary to come out smaller (a high
    calibration on a small window can leave a few dozen tokens there, and a summary
    node has framing of its own): fold just enough more of the tail that what is
    replaced reaches MIN_SUMMARIZER_INPUT, so %compact makes progress."""
    tail = [m for m in history if m.get("id") and m.get("name") != SUMMARY_NAME]
    kept = sum(m["tokens"] for m in tail) - sum(m["tokens"] for m in plan.new_messages)
    keep = max(0, kept - (MIN_SUMMARIZER_INPUT - plan.replaced_tokens))
    wider = plan_compaction(history, session.context_window, int(keep * session.calibration), session.calibration,
                            first_turn=plan.first_turn)
    return plan if isinstance(wider, tuple) else wider


def _lost(plan, blocks: list[dict], memory, history: list[dict]) -> dict:
    """What the folded turns had and the new context (new summary + kept turns) does not."""
    from ocw.context.lost import lost
    from ocw.context.render import block_text

    folded = {m.get("id") for m in plan.new_messages}
    last = max((i for i, m in enumerate(history) if m.get("id") in folded), default=-1)
    kept = "\n".join(block_text(m["content"]) for m in history[last + 1:])
    source = plan.old_summary_text + "\n" + "\n".join(block_text(m["content"]) for m in plan.new_messages)
    return lost(source, block_text(blocks) + "\n" + kept, plan.old_memory.items, memory.items)


def structural_text(prep) -> str:
    plan = prep.plan
    return structural_summary(plan.old_summary_text, plan.new_messages, plan.replaced_tokens,
                              prep.out_budget, prep.encoding)


def auto_compact_paused(session) -> bool:
    return session.auto_compact_failures >= AUTO_FAILURE_LIMIT
