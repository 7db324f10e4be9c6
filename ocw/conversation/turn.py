"""One agent turn: prepare → maybe compact → request (stream) → persist → refresh.

What a turn stores, and why:
- Nothing until the first reply is complete. The user message and the reply
  are appended together in one transaction, so a failed request, an overflow
  that cannot be recovered, or the stop button mid-stream leaves the session
  exactly as it was (the partial text stays visible in the cell only).
- In a tool loop each finished step is stored as it completes: the assistant's
  tool calls together with their results, so the branch never holds a call
  without its result, and compaction between steps sees real history.
- The provider's usage is recorded against the HEAD the request produced.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from ocw.context import calibration as cal_rules
from ocw.context.cut import default_tail_budget
from ocw.conversation.compaction import auto_compact_paused
from ocw.context.engine import CompactionResult
from ocw.context.snip import snip
from ocw.text import checks
from ocw.text.checks import repaired
from ocw.text.errors import ContextOverflowError, EmptyReply, OcwError, StoreError
from ocw.context.graph import SUMMARY_NAME
from ocw.text.i18n import text as i18n_text
from ocw.context.render import normalize_content
from ocw.store.ids import new_id
from ocw.conversation.toolbox import no_tools_result
from ocw.text.prompts import SUMMARY_PREFIX, SYSTEM_NOTE_PREFIX
from ocw.text.tokens import count_message, render_block

log = logging.getLogger("ocw")
REACTIVE_MODES = ("auto", "ask", "off")  # what a refusal as too long does (Ocw.reactive_compact)


@dataclass(frozen=True)
class Unsaved:
    """A turn the model answered and the store did not take: its messages, the HEAD
    they go under, the usage sample. Attached to the StoreError as `unsaved`; the
    notebook keeps it for `%ocw retry-save`, which writes it only while HEAD is
    still there (so nothing lands on a branch it was not an answer to)."""

    session_id: str
    head: str | None
    messages: list
    usage: int | None
    basis: tuple | None = None  # what the usage sample was measured on (Session.append_many's `basis`)


@dataclass
class TurnResult:
    text: str = ""
    node_ids: list[str] = field(default_factory=list)
    usage: object = None
    compactions: list[CompactionResult] = field(default_factory=list)
    snipped: int = 0
    retried_after_overflow: bool = False
    tool_steps: int = 0
    step_limit_reached: bool = False
    interrupted: bool = False


def to_provider_messages(history: list[dict]) -> tuple[str, list[dict]]:
    """Rendered history → (system prompt, provider messages). The summary travels
    as a user message; a tool-role message carries its results as a user message;
    a system note in mid-conversation becomes user text (Anthropic allows no other)."""
    system_parts: list[str] = []
    out: list[dict] = []
    for i, m in enumerate(history):
        role, content = m["role"], m["content"]
        if role == "system" and i == 0 and "id" not in m:
            system_parts.append("\n".join(b.get("text", "") for b in content))
            continue
        if role == "llm" and m.get("name") == SUMMARY_NAME:
            text = SUMMARY_PREFIX + "\n".join(b.get("text", "") for b in content)
            role, content = "user", [{"type": "text", "text": text}]
        elif role == "system":
            role, content = "user", [{"type": "text", "text": SYSTEM_NOTE_PREFIX + "\n".join(b.get("text", "") for b in content)}]
        elif role in ("tool", "llm"):
            role = "user"
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "content": out[-1]["content"] + list(content)}
        else:
            out.append({"role": role, "content": list(content)})
    return "\n\n".join(p for p in system_parts if p), out


def learn_window(session, tokens: int, source: str, *, reported: bool = False, lang: str = "en") -> str | None:
    """Tell the session a window the server reported or stated; returns the one-time
    system line announcing it when the window ocw plans with changed, else None."""
    before = session.context_window
    if not session.learn_window(tokens, source, reported=reported):
        return None
    return i18n_text("window_learned", lang, window=f"{session.context_window:,}", source=source,
                     before=f"{before:,}")


def unpaired_tool_blocks_as_text(history: list[dict]) -> list[dict]:
    """A tool call must be answered by the next message and a result must answer a
    call of the message before it, or the provider rejects the request (OpenAI:
    "messages with role 'tool' must be a response to a preceding message with
    'tool_calls'"). ocw stores them in pairs, but HEAD moved by %branch/%rewind, or
    an old session, can leave one alone: it then travels as plain text."""
    def uses(m):
        return {b["id"] for b in m["content"] if b.get("type") == "tool_use"} if m["role"] == "assistant" else set()

    def answers(m):
        return {b["tool_use_id"] for b in m["content"] if b.get("type") == "tool_result"} if m["role"] != "assistant" else set()

    out = []
    for i, m in enumerate(history):
        prev = history[i - 1] if i else None
        nxt = history[i + 1] if i + 1 < len(history) else None
        called = uses(prev) if prev else set()
        answered = answers(nxt) if nxt else set()
        blocks, changed = [], False
        for b in m["content"]:
            t = b.get("type")
            if t == "tool_result" and b.get("tool_use_id") not in called:
                b, changed = {"type": "text", "text": f"[result of an earlier tool call] {b.get('content', '')}"}, True
            elif t == "tool_use" and m["role"] == "assistant" and b.get("id") not in answered:
                b, changed = {"type": "text", "text": f"[called {render_block(b)}; no result]"}, True
            blocks.append(b)
        out.append({**m, "content": blocks} if changed else m)
    return out


class Turn:
    """Runs one `%%chat` cell against a session and a provider."""

    def __init__(self, session, provider, *, threshold: float = 0.8, lang: str = "en",
                 tools=None, max_steps: int = 8, max_output_tokens: int | None = None, prune: bool = True,
                 reactive_compact: str = "auto", summarizer=None,
                 on_text: Callable[[str], None] | None = None,
                 on_system: Callable[[str], None] | None = None,
                 on_tool: Callable[[dict, dict], None] | None = None):
        self.session = session
        self.provider = provider
        self.threshold = threshold
        self.lang = lang
        self.tools = tools  # a ToolRegistry or None
        self.max_steps = max_steps
        self.max_output_tokens = max_output_tokens
        self.prune = prune
        checks.choice(reactive_compact, "reactive_compact", REACTIVE_MODES)
        self.reactive_compact = reactive_compact
        self.summarizer = summarizer  # a summarizer of its own (Ocw.summary_model), or None: the chat model
        # The factor a retry is sized with when the refusal stated the prompt's size: the
        # refused request's own measure, used for its retry only and never learned (a
        # refused request is no sample of the model's tokenizer; DESIGN.md §3, issue 23).
        self._retry_factor: float | None = None
        self.on_text = on_text or (lambda s: None)
        self.on_system = on_system or (lambda s: None)
        self.on_tool = on_tool or (lambda call, result: None)
        self.result = TurnResult()
        self._overflow_retry_used = False
        self._ids_in_use: set[str] = set()  # tool_use ids the model can see (kept unique)

    # -- prepare --------------------------------------------------------------------
    def _compact(self, trigger: str, keep_recent_tokens: int | None = None,
                 incoming: int | None = None) -> CompactionResult | None:
        s = self.session
        if trigger == "auto" and auto_compact_paused(s):
            return None
        unsubscribe = s.events.subscribe(self._relay_compaction_event)
        try:
            res = s.compact(keep_recent_tokens=keep_recent_tokens, trigger=trigger,
                            provider=self.summarizer or self.provider, incoming=incoming,
                            own_summarizer=self.summarizer is not None)
        finally:
            unsubscribe()
        self.result.compactions.append(res)
        if trigger == "auto" and res.outcome == "failed" and auto_compact_paused(s):
            self.on_system(i18n_text("auto_paused", self.lang))
        return res

    def _prune(self) -> bool:
        """Stub old tool results (ocw/conversation/pruning.py); says so in one line. Returns whether it did."""
        if not self.prune:
            return False
        done = self.session.prune_tool_output()
        if done:
            n = done["results"]
            self.on_system(i18n_text("pruned", self.lang, n=n, s="s" if n != 1 else "",
                                     before=f"{done['before']:,}", after=f"{done['after']:,}"))
        return bool(done)

    def _relay_compaction_event(self, name: str, payload: dict) -> None:
        # Progress is shown in place (ocw/notebook/progress.py), not as a line per step.
        if name.startswith("compaction_") and name != "compaction_progress":
            from ocw.text.i18n import system_message

            self.on_system(system_message(name, payload, self.lang))

    def _outgoing(self, pending: list[tuple], limit: int | None = None) -> tuple[str, list[dict]]:
        """Rendered history plus the not-yet-stored messages of this turn, snipped to
        `limit` calibrated tokens (default: the threshold's share of the window) if
        compaction could not bring it under."""
        s = self.session
        history = s.rendered_history()
        self._basis = s.usage_basis()  # the context this request is built on (its sample's)
        parts = s.occupancy_parts()
        if history and history[0]["role"] == "system" and "id" not in history[0]:
            history[0] = {**history[0], "tokens": parts["system"]}
        enc = s.encoding.name
        for role, content in pending:
            blocks = normalize_content(content)
            history.append({"role": role, "content": blocks, "tokens": count_message(role, blocks, enc)})
        if limit is None:
            limit = int(s.context_window * (self.threshold or 1.0))
        # snip counts estimated tokens; the limit is in the model's (calibrated) ones.
        budget = int(limit / self._factor()) - parts["tools"]
        full = sum(m.get("tokens", 0) for m in history)
        history, dropped = snip(history, max(1, budget))
        self._snipped_now = bool(dropped)
        self._left_out = (dropped, full - sum(m.get("tokens", 0) for m in history))  # messages, estimated tokens
        self._sent_estimate = parts["tools"] + sum(m.get("tokens", 0) for m in history)
        # What no snip can leave out: the newest message, the system prompt, the tools and the pins.
        self._newest_estimate = (history[-1].get("tokens", 0) + parts["system"] + parts["tools"]
                                 + parts.get("pins", 0)) if history else 0
        if dropped:
            self.result.snipped += dropped
            # Say "after compaction" only when one did shrink the context this turn.
            compacted = any(c.outcome == "succeeded" for c in self.result.compactions)
            self.on_system(i18n_text("snipped" if compacted else "snipped_uncompacted", self.lang,
                                     n=dropped, s="s" if dropped != 1 else ""))
        history = unpaired_tool_blocks_as_text(history)
        self._ids_in_use |= {b["id"] for m in history for b in m["content"] if b.get("type") == "tool_use"}
        return to_provider_messages(history)

    def _factor(self) -> float:
        """Calibrated tokens per estimated one for this request: the session's calibration,
        or, for the retry of a refusal that stated the prompt's size, that larger measure."""
        return max(self.session.calibration, self._retry_factor or 0.0)

    def _message_size(self, pending: list[tuple]) -> int:
        """The new messages with the system prompt, tool definitions and pins, in calibrated
        tokens: what any request of this turn carries however much history is left out."""
        s = self.session
        parts = s.occupancy_parts()
        enc = s.encoding.name
        own = sum(count_message(r, normalize_content(c), enc) for r, c in pending)
        return int((own + parts["system"] + parts["tools"] + parts.get("pins", 0)) * self._factor())

    def _pending_size(self, pending: list[tuple]) -> int:
        """The new messages alone, in calibrated tokens."""
        enc = self.session.encoding.name
        return int(sum(count_message(r, normalize_content(c), enc) for r, c in pending) * self.session.calibration)

    def _budget_ratio(self, pending: list[tuple]) -> float:
        """The turn budget (DESIGN.md §4): rendered history plus the new messages, over
        the window, in calibrated tokens — the figures the ring shows."""
        s = self.session
        enc = s.encoding.name
        extra = sum(count_message(r, normalize_content(c), enc) for r, c in pending)
        return (s.occupancy(as_sent=False)["total"] + extra * s.calibration) / s.context_window

    # -- request ----------------------------------------------------------------------
    def _request(self, pending: list[tuple]):
        s = self.session
        # The definitions count in the budget (the `tools` category): set them first.
        tool_defs = self.tools.definitions() if self.tools else None
        s.tool_definitions = tool_defs or []
        # Refused first (issue 23): a message no window can take is said before any
        # compaction or summarizer call, which could not help and would change the session.
        size = self._message_size(pending) if pending else 0
        if size > s.context_window:
            raise self._too_big(size)
        if self.threshold and self._budget_ratio(pending) >= self.threshold:
            # Old tool output goes first (no LLM call); a summary only if that is not enough.
            if not self._prune() or self._budget_ratio(pending) >= self.threshold:
                # Landing well under the line counts the message being sent (landing.py).
                self._compact("auto", incoming=self._pending_size(pending))
        failed = None  # the request the provider refused as too long
        limit = None  # what the retry must fit, in calibrated tokens
        while True:
            system, messages = self._outgoing(pending, limit)
            if failed is not None and ((system, messages) == failed or self._newest_too_big(limit)):
                raise self._cannot_fit(limit)  # never send an identical (or hopeless) request twice
            try:
                return self.provider.stream(
                    messages, system=system or None, tools=tool_defs or None,
                    max_tokens=self.max_output_tokens, on_event=self._on_stream_event,
                )
            except ContextOverflowError as e:
                if failed is not None:
                    raise self._still_too_long(e) from None
                failed = (system, messages)
                self.result.retried_after_overflow = True
                limit = self._recover_from_overflow(e)

    def _recover_from_overflow(self, err: ContextOverflowError) -> int:
        """Reactive compaction (DESIGN.md §4): learn what the server said, compact
        harder than the automatic pass did, and return the size (calibrated tokens)
        the retry must fit: 80 % of the window the server stated, or, when it stated
        none, half the request that failed."""
        s = self.session
        sent = getattr(self, "_sent_estimate", 0)
        stated = getattr(err, "prompt_tokens", None)
        if cal_rules.positive_int(stated) and sent:
            ratio = stated / sent  # this retry's measure only: a refused request calibrates nothing
            if cal_rules.CALIBRATION_MIN <= ratio <= cal_rules.CALIBRATION_MAX:
                self._retry_factor = ratio
                s.note_usage(stated, sent, refused=True)  # later usage far below it is unverified
        if getattr(err, "limit", None):
            self._learn_window(err.limit, i18n_text("source_overflow", self.lang))
            limit = int(s.context_window * 0.8)
        else:
            failed_size = stated or int(sent * self._factor())
            limit = max(1, min(int(s.context_window * 0.8), failed_size // 2))
        if self._newest_too_big(limit):  # before any compaction: it could not help
            raise self._cannot_fit(limit)
        keep = min(default_tail_budget(s.context_window), limit // 4)
        if self.reactive_compact != "auto":
            key = "refused_" + self.reactive_compact
            raise ContextOverflowError(i18n_text(key, self.lang, window=f"{s.context_window:,}"),
                                       hint=i18n_text(key + "_hint", self.lang, keep=f"{max(1, keep)}"))
        self._compact("reactive", keep_recent_tokens=keep)
        return limit

    def _learn_window(self, tokens: int, source: str) -> None:
        note = learn_window(self.session, tokens, source, lang=self.lang)
        if note:
            self.on_system(note)

    def _newest_too_big(self, limit: int | None) -> bool:
        """The message being sent (with the system prompt and tools) alone exceeds what
        the retry must fit: no compaction or snip can help."""
        return limit is not None and int(getattr(self, "_newest_estimate", 0) * self._factor()) > limit

    def _too_big(self, size: int) -> ContextOverflowError:
        return ContextOverflowError(
            i18n_text("message_too_big", self.lang, tokens=f"{size:,}", window=f"{self.session.context_window:,}"),
            hint=i18n_text("message_too_big_hint", self.lang))

    def _cannot_fit(self, limit: int | None) -> ContextOverflowError:
        if self._newest_too_big(limit):
            return self._too_big(int(getattr(self, "_newest_estimate", 0) * self._factor()))
        return self._still_too_long(None)

    def _still_too_long(self, err) -> ContextOverflowError:
        s = self.session
        return ContextOverflowError(
            i18n_text("still_too_long", self.lang, window=f"{s.context_window:,}"),
            hint=i18n_text("still_too_long_hint", self.lang, keep=f"{max(1, s.context_window // 8)}"))

    def _on_stream_event(self, kind: str, data) -> None:
        if kind == "text":
            data = repaired(data)
            self.result.text += data
            self.on_text(data)

    # -- the turn -------------------------------------------------------------------------
    def run(self, user_content) -> TurnResult:
        s = self.session
        s.sync()
        pending: list[tuple] = [("user", user_content)]
        steps = 0
        try:
            while True:
                reply = self._request(pending)
                steps += 1
                calls = reply.tool_uses
                if not calls and not reply.text.strip():  # nothing to show, nothing to store
                    raise EmptyReply("the provider returned an empty reply (no text, no tool call)")
                assistant = reply.content
                if not calls:
                    # One write: the turn and its usage sample (DESIGN.md §3: measured
                    # against the HEAD this request produced).
                    turn_msgs = [*pending, ("assistant", repaired(assistant))]
                    usage, basis = self._usage_to_record(reply), getattr(self, "_basis", None)
                    head = s.head
                    try:
                        ids = s.append_many(turn_msgs, usage=usage, basis=basis)
                    except StoreError as e:
                        # The reply is on screen and not stored (a full disk, a lock wait that
                        # ran out, a dropped connection): kept, so it can be stored again.
                        e.unsaved = Unsaved(s.id, head, turn_msgs, usage, basis)
                        raise
                    self.result.node_ids += ids
                    if self._snipped_now:  # the figures show what was sent, and "N left out" (sent_parts)
                        n, tokens = self._left_out
                        s.left_out = {"head": s.head, "generation": s.generation, "messages": n, "tokens": tokens}
                        s._publish()
                    self._note_missing_usage(reply)
                    break
                self._unique_ids(calls)
                results = []
                for call in calls:
                    res = repaired(self.tools.run(call) if self.tools else no_tools_result(call))
                    results.append(res)
                    self.on_tool(call, res)
                # The calls and their results land together: never one without the other.
                # No usage sample here: the request measured the calls, not the results
                # that now end the branch, so it would understate the next step's budget.
                ids = s.append_many([*pending, ("assistant", repaired(assistant)), ("tool", results)])
                self.result.node_ids += ids
                pending = []
                self.result.tool_steps = steps
                if steps >= self.max_steps:
                    self.result.step_limit_reached = True
                    self.on_system(i18n_text("step_limit", self.lang, n=steps, limit=self.max_steps,
                                             s="s" if steps != 1 else ""))
                    break
        except KeyboardInterrupt as e:
            # The stop button: finished steps stay stored (call + results), the
            # interrupted one is not. The caller says which.
            self.result.interrupted = True
            e.turn_result = self.result
            raise
        except OcwError as e:
            # Finished tool steps stay stored; the error must say so, or running the
            # cell again would repeat the tools' side effects unawares.
            if self.result.tool_steps:
                n = self.result.tool_steps
                e.hint = (f"the {n} finished tool step{'s' if n != 1 else ''} of this turn "
                          f"{'are' if n != 1 else 'is'} kept (calls with their results); running this cell again "
                          "repeats them — to continue instead, ask again in a new %%chat cell (e.g. “continue”)")
                e.turn_result = self.result
            raise
        self.result.usage = reply.usage
        return self.result

    def _unique_ids(self, calls: list[dict]) -> None:
        """Give every call an id no other visible call has: some servers send none, or
        reuse call_0 every step, and a repeated id would pair a result with the wrong call."""
        for call in calls:
            cid = call.get("id")
            if not cid or cid in self._ids_in_use:
                call["id"] = new_id("call_")
            self._ids_in_use.add(call["id"])

    def _usage_to_record(self, reply) -> int | None:
        """The sample to store with the reply: input + output tokens, unless the request
        was snipped (it measured less than the branch now holds; recording it would
        make the next budget look small and automatic compaction never fire)."""
        used = reply.usage.context_tokens if reply.usage else None
        if used is None or getattr(self, "_snipped_now", False):
            return None
        s, measured, sent = self.session, reply.usage.input_tokens, getattr(self, "_sent_estimate", 0)
        if cal_rules.positive_int(measured) and sent and not cal_rules.usage_verified(s.metadata, s.model, measured, sent):
            try:  # cannot be right (a gateway's own count): neither calibration nor the measured basis
                s.note_usage(measured, sent)
            except OcwError as e:
                log.warning("ocw: could not note the unverified usage: %s", e)
            return None
        return used

    def _note_missing_usage(self, reply) -> None:
        """A server that sends no usage is said once per session. The reply is stored by
        now: nothing here may fail the cell."""
        s = self.session
        if (reply.usage and reply.usage.context_tokens is not None) or getattr(self.provider, "offline", False) \
                or s.metadata.get("no_usage_noted"):
            return
        try:
            s.set_metadata(no_usage_noted=True)
        except OcwError as e:
            log.warning("ocw: could not note the missing usage: %s", e)
        self.on_system(i18n_text("no_usage", self.lang))


def run_turn(session, user_content, provider, **kw) -> TurnResult:
    if isinstance(user_content, str) and not user_content.strip():
        raise OcwError("the message is empty", hint="write your message in the %%chat cell")
    return Turn(session, provider, **kw).run(user_content)
