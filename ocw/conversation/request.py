"""What a turn sends: the outgoing request, its size, and its recovery when the server
refuses it as too long (DESIGN.md §4, reactive compaction).

Why the request is sized here, apart from the turn's storing: every size below is in
the model's own tokens (estimates × the session's calibration, or, for the retry of a
refusal that stated the prompt's size, that refusal's own measure), so the automatic
compaction, the snip and the retry all judge one figure — the one the ring shows.
A retry is sent at most once per turn and never identical to the request refused.

`Requesting` is mixed into `Turn` (ocw/conversation/turn.py): it reads the turn's
session, provider, threshold, language and callbacks, and calls its `_compact`,
`_prune` and `_on_stream_event`.
"""
from __future__ import annotations

from ocw.context import calibration as cal_rules
from ocw.context.cut import default_tail_budget
from ocw.context.graph import SUMMARY_NAME
from ocw.context.render import normalize_content
from ocw.context.snip import snip
from ocw.text.errors import ContextOverflowError
from ocw.text.i18n import text as i18n_text
from ocw.text.prompts import SUMMARY_PREFIX, SYSTEM_NOTE_PREFIX
from ocw.text.tokens import count_message, render_block


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


def learn_window(session, tokens: int, source: str, *, lang: str, reported: bool = False) -> str | None:
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


class Requesting:
    """The request side of a `Turn`: build what is sent, size it, send it, recover once."""

    def _outgoing(self, pending: list[tuple], limit: int | None) -> tuple[str, list[dict]]:
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
