"""Anthropic Messages API (``POST {base_url}/v1/messages``), streaming and not.

ocw's neutral block format is close to Anthropic's, so conversion is mostly
filtering: empty text blocks are dropped (the API rejects them), thinking
blocks travel back only with their ``signature`` (the API rejects unsigned
ones), consecutive same-role messages are merged, tool_result blocks go first in
their user message, and the conversation must open with a user message.

Usage: Anthropic's ``input_tokens`` excludes prompt-cache reads and writes. ocw's
``Usage.input_tokens`` means "the whole prompt" (it feeds the occupancy ring),
so we add ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` back
and report the cache reads as ``cached_tokens``.
"""
from __future__ import annotations

import json
from typing import Any

from ocw.text.errors import AuthError
from ocw.text.secrets import mask_credentials
from ocw.providers.base import Reply, StreamCallback, Usage
from ocw.providers.http import HTTPProvider, request_id_of
from ocw.providers.openai import parse_arguments

MESSAGES_PATH = "/v1/messages"

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
CONTINUE_TEXT = "(continued)"  # stands in for a user turn the API insists on


def _wire_block(b: dict) -> dict | None:
    t = b.get("type")
    if t == "text":
        return {"type": "text", "text": b["text"]} if b.get("text") else None
    if t == "thinking":
        if not b.get("signature"):
            return None
        return {"type": "thinking", "thinking": b.get("thinking", ""), "signature": b["signature"]}
    if t == "tool_use":
        inp = b.get("input")
        return {"type": "tool_use", "id": b.get("id"), "name": b.get("name"), "input": inp if isinstance(inp, dict) else {}}
    if t == "tool_result":
        c = b.get("content", "")
        out = {"type": "tool_result", "tool_use_id": b.get("tool_use_id"), "content": c if isinstance(c, list) else str(c)}
        if b.get("is_error"):
            out["is_error"] = True
        return out
    return None  # unknown block kinds are ocw-internal


def to_wire(messages: list[dict], system: str | None) -> tuple[str | None, list[dict]]:
    """ocw messages → (system, Anthropic ``messages``)."""
    sys_parts = [system] if system else []
    wire: list[dict] = []
    for m in messages:
        role = m.get("role", "user")
        content = m.get("content", [])
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if role == "system":
            sys_parts.extend(b.get("text", "") for b in content if b.get("type") == "text")
            continue
        role = "assistant" if role == "assistant" else "user"
        blocks = [w for w in (_wire_block(b) for b in content) if w is not None]
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    for m in wire:  # tool results must lead their user message
        if m["role"] == "user":
            m["content"].sort(key=lambda b: b["type"] != "tool_result")
    if not wire or wire[0]["role"] != "user":
        wire.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUE_TEXT}]})
    return ("\n\n".join(p for p in sys_parts if p) or None), wire


def to_wire_tools(tools: list[dict] | None) -> list[dict] | None:
    if not tools:
        return None
    return [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "input_schema": t.get("input_schema") or {"type": "object", "properties": {}},
        }
        for t in tools
    ]


def _apply_usage(usage: Usage, u: Any) -> None:
    """Fold an Anthropic usage object into ocw's Usage (see module doc)."""
    if not isinstance(u, dict):
        return
    if u.get("input_tokens") is not None:
        read = u.get("cache_read_input_tokens") or 0
        made = u.get("cache_creation_input_tokens") or 0
        usage.input_tokens = int(u["input_tokens"]) + int(read) + int(made)
        usage.cached_tokens = int(read)
    if u.get("output_tokens") is not None:
        usage.output_tokens = int(u["output_tokens"])


def _ocw_block(b: dict) -> dict | None:
    t = b.get("type")
    if t == "text":
        return {"type": "text", "text": b.get("text", "")}
    if t == "thinking":
        out = {"type": "thinking", "thinking": b.get("thinking", "")}
        if b.get("signature"):
            out["signature"] = b["signature"]
        return out
    if t == "tool_use":
        return {"type": "tool_use", "id": b.get("id"), "name": b.get("name"), "input": b.get("input") or {}}
    return None  # redacted_thinking, server tool blocks: not part of ocw's format


class AnthropicProvider(HTTPProvider):
    """base_url is the host (``https://api.anthropic.com``); the path adds ``/v1``."""

    name = "anthropic"
    default_base_url = "https://api.anthropic.com"

    def __init__(self, model: str = "claude-sonnet-4-5", *, default_max_tokens: int = DEFAULT_MAX_TOKENS, **kw):
        super().__init__(model, **kw)
        self.default_max_tokens = default_max_tokens

    def _models_url(self) -> str:
        return self.base_url + "/v1/models"

    def _path_hint(self) -> str:
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else None
        if root:
            return (f"for provider anthropic the base URL is the server's root without /v1 (ocw adds "
                    f"{MESSAGES_PATH}): set OCW_BASE_URL={mask_credentials(root)}, then check with %ocw doctor")
        return f"the server does not speak the Anthropic wire at {MESSAGES_PATH}; check OCW_BASE_URL and --provider, then %ocw doctor"

    def _headers(self) -> dict[str, str]:
        key = self._key.get()
        if not key and self.host.endswith("anthropic.com"):
            raise AuthError("anthropic: no API key; set ANTHROPIC_API_KEY", hint="or %config Ocw.api_key; then check with %ocw doctor")
        h = {"anthropic-version": API_VERSION}
        if key:
            h["x-api-key"] = key
        return h

    def _payload(self, messages, system, tools, max_tokens, stream: bool) -> dict:
        sys_text, wire = to_wire(messages, system)
        p: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(max_tokens or self.default_max_tokens),
            "messages": wire,
        }
        if sys_text:
            p["system"] = sys_text
        wt = to_wire_tools(tools)
        if wt:
            p["tools"] = wt
        if stream:
            p["stream"] = True
        return p

    def stream(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        on_event: StreamCallback | None = None,
    ) -> Reply:
        emit = on_event or (lambda kind, data: None)
        payload = self._payload(messages, system, tools, max_tokens, stream=True)
        blocks: dict[int, dict] = {}
        partial: dict[int, list[str]] = {}
        usage = Usage()
        stop = None
        model = None
        done = False
        seen = 0  # events of any kind: zero means the server said nothing at all
        with self._open_stream(MESSAGES_PATH, payload) as (events, response):
            rid = request_id_of(response.headers)
            for ev in events:
                seen += 1
                if done:
                    continue  # drain, so the connection returns to the pool
                if ev.event == "ping":
                    continue
                doc = self._parse_data(ev, response)
                kind = doc.get("type") or ev.event
                if kind == "error" or ev.event == "error":
                    raise self._payload_error(doc, response, ev.data)
                if kind == "message_start":
                    msg = doc.get("message") or {}
                    model = msg.get("model")
                    _apply_usage(usage, msg.get("usage"))
                elif kind == "content_block_start":
                    i = doc.get("index", len(blocks))
                    blocks[i] = dict(doc.get("content_block") or {})
                    partial[i] = []
                elif kind == "content_block_delta":
                    i = doc.get("index", 0)
                    b = blocks.get(i)
                    d = doc.get("delta") or {}
                    if b is None:
                        raise self._error(f"delta for unknown block {i}", response=response, body=ev.data)
                    dt = d.get("type")
                    if dt == "text_delta":
                        b["text"] = b.get("text", "") + d.get("text", "")
                        emit("text", d.get("text", ""))
                    elif dt == "thinking_delta":
                        b["thinking"] = b.get("thinking", "") + d.get("thinking", "")
                        emit("thinking", d.get("thinking", ""))
                    elif dt == "signature_delta":
                        b["signature"] = b.get("signature", "") + d.get("signature", "")
                    elif dt == "input_json_delta":
                        partial[i].append(d.get("partial_json", ""))
                elif kind == "content_block_stop":
                    i = doc.get("index", 0)
                    b = blocks.get(i)
                    if b is not None and b.get("type") == "tool_use":
                        raw = "".join(partial.get(i, []))
                        b["input"] = parse_arguments(raw) if raw else (b.get("input") or {})
                        emit("tool_use", _ocw_block(b))
                elif kind == "message_delta":
                    stop = (doc.get("delta") or {}).get("stop_reason") or stop
                    _apply_usage(usage, doc.get("usage"))
                elif kind == "message_stop":
                    done = True
                # unknown event types are ignored (the API's versioning policy)
            if not done and seen:
                raise self._error("stream ended without message_stop", response=response)
        content = [c for c in (_ocw_block(blocks[i]) for i in sorted(blocks)) if c is not None] if seen else []
        if not seen or not any((c.get("type") == "text" and c.get("text")) or c.get("type") == "tool_use"
                               for c in content):
            # No event at all, or an empty reply (no text, no tool call): asked once
            # unstreamed, so a refusal behind a gateway is seen; the empty stream's usage is not kept.
            return self._resend_unstreamed(MESSAGES_PATH, self._payload(messages, system, tools, max_tokens, stream=False), emit)
        return Reply(content=content, usage=usage, stop_reason=stop, model=model or self.model, request_id=rid)

    def complete(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        tools: list[dict] | None = None,
    ) -> Reply:
        payload = self._payload(messages, system, tools, max_tokens, stream=False)
        doc, response = self._post_json(MESSAGES_PATH, payload)
        return self._reply_from_json(doc, response)

    def _reply_from_json(self, doc: dict, response) -> Reply:
        if doc.get("type") == "error":
            raise self._payload_error(doc, response, json.dumps(doc))
        if not isinstance(doc.get("content"), list):
            raise self._error("response has no content list", response=response, body=json.dumps(doc))
        usage = Usage()
        _apply_usage(usage, doc.get("usage"))
        content = [c for c in (_ocw_block(b) for b in doc["content"] if isinstance(b, dict)) if c is not None]
        return Reply(
            content=content,
            usage=usage,
            stop_reason=doc.get("stop_reason"),
            model=doc.get("model") or self.model,
            request_id=request_id_of(response.headers),
        )
