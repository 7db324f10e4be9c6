"""The provider interface the session and the compaction engine use.

Messages are ocw's neutral form, close to Anthropic's:

    {"role": "user" | "assistant", "content": [block, ...]}

with blocks

    {"type": "text", "text": str}
    {"type": "thinking", "thinking": str}
    {"type": "tool_use", "id": str, "name": str, "input": dict}
    {"type": "tool_result", "tool_use_id": str, "content": str, "is_error": bool}

(tool_result blocks travel in user messages). Each provider converts this form to
its wire format; consecutive messages of the same role are merged there.

Tool definitions are `{"name", "description", "input_schema"}` (JSON schema).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable


from ocw.text.prompts import FOCUS_CLOSE, FOCUS_OPEN, SUMMARY_MARKER  # noqa: F401  (what a summarizer reads)


@dataclass
class Usage:
    """What the provider reported for one request."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None

    @property
    def context_tokens(self) -> int | None:
        """Size of the context after the request: input plus output (DESIGN.md §3)."""
        if self.input_tokens is None:
            return None
        return self.input_tokens + (self.output_tokens or 0)


@dataclass
class Reply:
    content: list[dict] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None  # "end_turn" | "tool_use" | "max_tokens" | ...
    model: str | None = None
    request_id: str | None = None

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict]:
        return [b for b in self.content if b.get("type") == "tool_use"]


# on_event(kind, data): kind is "text" (data: str delta), "thinking" (str delta),
# "tool_use" (data: the finished tool_use block).
StreamCallback = Callable[[str, Any], None]


@runtime_checkable
class Provider(Protocol):
    name: str  # "offline" | "openai" | "anthropic"
    model: str
    offline: bool

    def stream(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        on_event: StreamCallback | None = None,
    ) -> Reply:
        """Stream one reply; call on_event for each delta; return the whole message.

        Raises an ocw.text.errors.ProviderError subclass on failure. A KeyboardInterrupt
        during the stream closes the response at once and propagates.
        """
        ...

    def complete(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> Reply:
        """One non-streaming request (used for summaries)."""
        ...

    def probe_window(self, timeout: float = 2.0) -> tuple[int, str] | None:
        """(context window in tokens, source label) as the server reports it from its
        own endpoint, e.g. (2048, "llama.cpp /props"); None when it has none. Never
        raises; never contacts the official hosts; bounded by ``timeout``."""
        ...

    def close(self) -> None:
        ...
