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
from ocw.context.engine import CompactionResult
from ocw.conversation import read_ahead
from ocw.conversation.compaction import auto_compact_paused
from ocw.conversation.request import Requesting
from ocw.conversation.toolbox import no_tools_result
from ocw.store.ids import new_id
from ocw.text import checks
from ocw.text.checks import repaired
from ocw.text.errors import EmptyReply, OcwError, StoreError
from ocw.text.i18n import text as i18n_text

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


class Turn(Requesting):
    """Runs one `%%chat` cell against a session and a provider (its request: `Requesting`)."""

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
        self._read_ahead()
        return self.result

    def _read_ahead(self) -> None:
        """The turn's messages, read for a later compaction while the user reads the reply
        (ocw/conversation/read_ahead.py). Nothing here may fail the turn: it is stored."""
        try:
            read_ahead.read_session(self.session, self.summarizer or self.provider, ids=self.result.node_ids)
        except Exception as e:
            log.debug("ocw: no read-ahead after this turn (%s)", type(e).__name__)

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
