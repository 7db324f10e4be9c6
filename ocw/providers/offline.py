"""The built-in offline model: no key, no network, deterministic.

Why it exists (DESIGN.md §7): everything — the ring, `%compact`, reactive
compaction, tools — must run on a laptop with no key and no network, and the
tests need a model whose answers are the same on every run. So this model
never pretends: every answer starts with "(offline model)". It
- answers a chat message with a digest of it (length, first sentence, keywords);
- answers a summary request (system prompt starting with SUMMARY_MARKER) with
  a real extractive summary within ``max_tokens``, keeping identifiers;
- calls a tool when the user names one, and reports a tool's result;
- raises ContextOverflowError when the prompt exceeds its context window, as
  a real model would, so reactive compaction can be exercised offline.

Usage is counted with ocw's own tokenizer, so "measured" figures are exact.
"""
from __future__ import annotations

import json
import re

from ocw.text.errors import ContextOverflowError
from ocw.text.tokens import count_message, count_text, encoding_for_model, render_block, truncate_to_tokens
from ocw.providers.base import Reply, StreamCallback, Usage
from ocw.providers.offline_reading import PREFIX, keywords, sentences
from ocw.providers.offline_summary import summarize as extractive_summary
from ocw.text.prompts import FOCUS_CLOSE, FOCUS_OPEN, SUMMARY_MARKER, SUMMARY_PREFIX, SYSTEM_NOTE_PREFIX

DEFAULT_CONTEXT_WINDOW = 8192
DEFAULT_SUMMARY_TOKENS = 1024


# -- text helpers -----------------------------------------------------------
def _blocks(m: dict) -> list[dict]:
    c = m.get("content", [])
    return [{"type": "text", "text": c}] if isinstance(c, str) else list(c)


def _text_of(blocks: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text" and b.get("text"))


def _is_context_block(block: dict) -> bool:
    """A block ocw put before the user's words: the rolling summary or a system note.
    Consecutive user-role messages travel merged into one (the summary renders as a
    user message), so after a compaction that folded everything the last message
    starts with the summary; the question is what follows it."""
    text = block.get("text", "") if block.get("type") == "text" else ""
    return text.startswith((SUMMARY_PREFIX, SYSTEM_NOTE_PREFIX))


def _latest_user_blocks(blocks: list[dict]) -> list[dict]:
    """The blocks the user wrote in the latest message (all of them if nothing else is left)."""
    own = [b for b in blocks if not _is_context_block(b)]
    return own or blocks


def _chunks(text: str, words: int = 3) -> list[str]:
    parts = re.findall(r"\S+\s*|\s+", text)
    return ["".join(parts[i : i + words]) for i in range(0, len(parts), words)] or [text]


# -- the model ----------------------------------------------------------------
class OfflineProvider:
    """A deterministic stand-in model that says plainly it is offline."""

    name = "offline"
    offline = True

    def __init__(self, model: str = "ocw-offline", *, context_window: int | None = None):
        self.model = model
        self.context_window = context_window or DEFAULT_CONTEXT_WINDOW
        self.encoding = encoding_for_model(model).name

    def __repr__(self) -> str:
        return f"OfflineProvider(model={self.model!r}, context_window={self.context_window})"

    def close(self) -> None:
        pass

    def probe_window(self, timeout: float = 2.0) -> tuple[int, str] | None:
        """No server to ask: the offline model's window is the configured one."""
        return None

    def prompt_tokens(self, messages: list[dict], system: str | None = None, tools: list[dict] | None = None) -> int:
        """What a request costs: the system prompt, the tool definitions (as real
        providers bill them) and every message, all by ocw.text.tokens rules — so that
        its usage equals ocw's own estimate and the calibration stays 1.0."""
        n = count_message("system", [{"type": "text", "text": system}], self.encoding) if system else 0
        if tools:
            n += count_text(json.dumps(tools, sort_keys=True, ensure_ascii=False), self.encoding)
        for m in messages:
            n += count_message(m.get("role", "user"), _blocks(m), self.encoding)
        return n

    # -- Provider API -------------------------------------------------------
    def stream(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        on_event: StreamCallback | None = None,
    ) -> Reply:
        reply = self._respond(messages, system, tools, max_tokens)
        if on_event is not None:
            for block in reply.content:
                if block["type"] == "text":
                    for piece in _chunks(block["text"]):
                        on_event("text", piece)
                elif block["type"] == "tool_use":
                    on_event("tool_use", block)
        return reply

    def complete(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        tools: list[dict] | None = None,
    ) -> Reply:
        return self._respond(messages, system, tools, max_tokens)

    # -- answers ------------------------------------------------------------
    def _respond(self, messages, system, tools, max_tokens) -> Reply:
        used = self.prompt_tokens(messages, system, tools)
        if used > self.context_window:
            body = f"prompt is too long: {used} tokens > {self.context_window} maximum"
            raise ContextOverflowError(f"offline: {body}", status=400, body=body,
                                       limit=self.context_window, prompt_tokens=used)
        stop = "end_turn"
        if (system or "").startswith(SUMMARY_MARKER):
            content = [{"type": "text", "text": self.summarize(messages, max_tokens or DEFAULT_SUMMARY_TOKENS,
                                                               focus=_focus_of(system))}]
        else:
            last = next((m for m in reversed(messages) if m.get("role") in ("user", "tool")), None)
            blocks = _blocks(last) if last else []
            results = [b for b in blocks if b.get("type") == "tool_result"]
            asked = _text_of(_latest_user_blocks(blocks))
            call = self._tool_call(asked, tools, messages) if tools and not results else None
            if results:
                content = [{"type": "text", "text": self._tool_result_reply(results)}]
            elif call is not None:
                content = [{"type": "text", "text": f"{PREFIX}Calling `{call['name']}`."}, call]
                stop = "tool_use"
            else:
                content = [{"type": "text", "text": self._digest(asked)}]
            if max_tokens and content[0]["type"] == "text":
                text = content[0]["text"]
                cut = truncate_to_tokens(text, max_tokens, self.encoding)
                if cut != text:
                    content, stop = [{"type": "text", "text": cut}], "max_tokens"
        out = sum(count_text(render_block(b), self.encoding) for b in content)
        # Like a real chat template, the prompt ends with the assistant's header
        # (the "generation prompt"), so input + output is the context after the reply.
        used += count_message("assistant", [], self.encoding)
        return Reply(content=content, usage=Usage(used, out, 0), stop_reason=stop, model=self.model)

    def _digest(self, text: str) -> str:
        text = text.strip()
        if not text:
            return f"{PREFIX}I received no text to answer. No real model is connected; set a provider to chat."
        first = sentences(text)[0] if sentences(text) else text
        first = truncate_to_tokens(first, 40, self.encoding)
        kws = keywords(text)
        parts = [
            f"{PREFIX}No real model is connected, so here is a digest of your message.",
            f"It is {count_text(text, self.encoding)} tokens long and begins \u201c{first}\u201d",
        ]
        if kws:
            parts.append("\u2014 keywords: " + ", ".join(kws) + ".")
        return " ".join(parts)

    @staticmethod
    def _tool_result_reply(results: list[dict]) -> str:
        texts = []
        for b in results:
            c = b.get("content", "")
            if isinstance(c, list):
                c = _text_of(c)
            texts.append(("error: " if b.get("is_error") else "") + str(c))
        joined = " | ".join(texts).strip()
        short = joined[:200] + ("…" if len(joined) > 200 else "")
        return f"{PREFIX}The tool returned: {short}"

    def _tool_call(self, text: str, tools: list[dict], messages: list[dict]) -> dict | None:
        """A tool_use block if the user names a tool: earliest mention wins."""
        best = None
        for t in tools:
            name = t.get("name", "")
            m = re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) if name else None
            if m and (best is None or m.start() < best[0].start()):
                best = (m, name)
        if best is None:
            return None
        m, name = best
        after = text[m.end() :]
        args: dict = {}
        # `name(k=v, ...)` or `name with k=v, k2="any text; even (this)."`: a quoted
        # value may hold anything, a bare one ends at , ; ) a space or a sentence end.
        opener = re.match(r"`?\s*\(|`?\s+with\s+", after)
        pos = opener.end() if opener else None
        while pos is not None:
            pair = _ARG.match(after, pos)
            if pair is None:
                break
            args[pair.group(1)] = _value(pair.group(2))
            pos = _ARG_SEP.match(after, pair.end()).end()
        n = 1 + sum(1 for msg in messages for b in _blocks(msg) if b.get("type") == "tool_use")
        return {"type": "tool_use", "id": f"toolu_offline_{n}", "name": name, "input": args}

    # -- summaries ------------------------------------------------------------
    def summarize(self, messages: list[dict], budget: int, focus: str | None = None) -> str:
        """An extractive summary of the request's text and tool results, never over
        ``budget`` tokens (ocw/providers/offline_summary.py says how it chooses, offline_reading.py how it reads)."""
        texts = []
        for m in messages:
            for b in _blocks(m):
                if b.get("type") == "text":
                    texts.append(b.get("text", ""))
                elif b.get("type") == "tool_result":
                    texts.append(render_block(b))
        return extractive_summary(texts, budget, self.encoding, focus)


def _focus_of(system: str | None) -> str | None:
    """The user's focus in a summary request's system prompt (between its tags)."""
    text = system or ""
    start = text.find(FOCUS_OPEN)
    end = text.find(FOCUS_CLOSE, start + 1)
    return text[start + len(FOCUS_OPEN):end] if start >= 0 and end > start else None


_ARG_SEP = re.compile(r"\s*(?:,|;|\band\b)?\s*")
_ARG = re.compile(r"""\s*(\w+)\s*[=:]\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^,;\s)]+?)(?=[,;\s)]|\.(?:\s|$)|$)""")


def _value(v: str):
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        if v[0] == '"':
            try:
                return json.loads(v)  # unescapes \" and \n
            except ValueError:
                pass
        return v[1:-1]
    try:
        return json.loads(v)
    except ValueError:
        return v
