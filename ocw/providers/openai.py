"""OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama, LM Studio, OpenRouter).

Why chat completions and not the newer Responses API: it is the one wire
format every compatible server speaks. We ask for
``stream_options.include_usage`` because the final usage chunk is the
"measured" occupancy sample the ring and the compaction count rely on
(DESIGN.md §3, §5).

ocw's neutral messages (see base.py) are converted here: tool_use blocks become
the assistant's ``tool_calls``, tool_result blocks become ``role: tool``
messages placed right after that assistant message (the API requires it),
thinking blocks are dropped (no compatible server accepts them back). An
assistant message that only calls tools carries ``"content": ""``, never null
(the spec allows null, llama-cpp-python's validation rejects it with a 500).
"""
from __future__ import annotations

import json
from typing import Any

from ocw.text.errors import AuthError
from ocw.text.secrets import mask_credentials
from ocw.providers.base import Reply, StreamCallback, Usage
from ocw.providers.http import HTTPProvider, request_id_of

CHAT_PATH = "/chat/completions"

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def _merge_same_role(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in messages:
        role = m.get("role", "user")
        content = m.get("content", [])
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if out and out[-1]["role"] == role:
            out[-1]["content"] = out[-1]["content"] + list(content)
        else:
            out.append({"role": role, "content": list(content)})
    return out


def _tool_result_text(block: dict) -> str:
    c = block.get("content", "")
    if isinstance(c, list):
        c = "\n".join(b.get("text", "") for b in c if isinstance(b, dict))
    c = str(c)
    return f"Error: {c}" if block.get("is_error") else c


def to_wire_messages(messages: list[dict], system: str | None) -> list[dict]:
    """ocw messages → chat completions ``messages``."""
    wire: list[dict] = []
    sys_parts = [system] if system else []
    merged = _merge_same_role(messages)
    for m in merged:
        if m["role"] == "system":  # a stray system message joins the system prompt
            sys_parts.extend(b.get("text", "") for b in m["content"] if b.get("type") == "text")
    if sys_parts:
        wire.append({"role": "system", "content": "\n\n".join(sys_parts)})
    for m in merged:
        role, blocks = m["role"], m["content"]
        if role == "system":
            continue
        if role == "assistant":
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = []
            for b in blocks:
                if b.get("type") != "tool_use":
                    continue
                inp = b.get("input") or {}
                raw = inp.get("_raw") if isinstance(inp, dict) and set(inp) == {"_raw"} else None
                args = raw if isinstance(raw, str) else json.dumps(inp, ensure_ascii=False)
                calls.append({"id": b.get("id"), "type": "function", "function": {"name": b.get("name"), "arguments": args}})
            if not text and not calls:
                continue  # e.g. a thinking-only message
            # "" and never null: llama-cpp-python answers 500 to a null content.
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                msg["tool_calls"] = calls
            wire.append(msg)
            continue
        # user (and "tool"): results first, as role=tool messages, then the text
        for b in blocks:
            if b.get("type") == "tool_result":
                wire.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _tool_result_text(b)})
        text = "\n\n".join(b.get("text", "") for b in blocks if b.get("type") == "text" and b.get("text"))
        if text:
            wire.append({"role": "user", "content": text})
    return wire


def to_wire_tools(tools: list[dict] | None) -> list[dict] | None:
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def parse_arguments(raw: str) -> dict:
    """The model's argument string as a dict; bad JSON is kept as ``{"_raw": ...}``
    so the session can hand the model an error instead of crashing the turn."""
    if not raw or not raw.strip():
        return {}
    try:
        val = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return val if isinstance(val, dict) else {"_raw": raw}


def _usage(u: dict | None) -> Usage:
    if not isinstance(u, dict):
        return Usage()
    details = u.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=u.get("prompt_tokens"),
        output_tokens=u.get("completion_tokens"),
        cached_tokens=details.get("cached_tokens") if isinstance(details, dict) else None,
    )


class OpenAIProvider(HTTPProvider):
    """``POST {base_url}/chat/completions``; base_url includes ``/v1``."""

    name = "openai"
    default_base_url = "https://api.openai.com/v1"

    def __init__(self, model: str = "gpt-4o-mini", *, max_tokens_field: str | None = None, **kw):
        super().__init__(model, **kw)
        # OpenAI's newer models reject `max_tokens`; most compatible servers only know it.
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if self.host.endswith("openai.com") else "max_tokens"
        )

    def _models_url(self) -> str:
        return self.base_url + "/models"

    def _path_hint(self) -> str:
        if not self.base_url.endswith("/v1"):
            return (f"an OpenAI-compatible base URL usually ends in /v1 (ocw adds /chat/completions): try "
                    f"OCW_BASE_URL={mask_credentials(self.base_url)}/v1, then check with %ocw doctor")
        return "the server does not speak the OpenAI wire at /chat/completions; check OCW_BASE_URL and --provider, then %ocw doctor"

    def _api_root(self) -> str:
        """base_url without its trailing ``/v1`` (llama.cpp's /props, Ollama's /api/*)."""
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def _headers(self) -> dict[str, str]:
        key = self._key.get()
        if not key and self.host.endswith("openai.com"):
            raise AuthError("openai: no API key; set OPENAI_API_KEY", hint="or %config Ocw.api_key; then check with %ocw doctor")
        return {"authorization": f"Bearer {key}"} if key else {}

    def _payload(self, messages, system, tools, max_tokens, stream: bool) -> dict:
        p: dict[str, Any] = {"model": self.model, "messages": to_wire_messages(messages, system), "stream": stream}
        if stream:
            p["stream_options"] = {"include_usage": True}
        wt = to_wire_tools(tools)
        if wt:
            p["tools"] = wt
        if max_tokens:
            p[self.max_tokens_field] = int(max_tokens)
        return p

    # -- streaming ----------------------------------------------------------
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
        text: list[str] = []
        thinking: list[str] = []
        calls: dict[int, dict] = {}
        finish = None
        usage = Usage()
        model = None
        done = False
        seen = 0  # events of any kind: zero means the server said nothing at all
        with self._open_stream(CHAT_PATH, payload) as (events, response):
            rid = request_id_of(response.headers)
            for ev in events:
                seen += 1
                if done:
                    continue  # read to the end so the connection can be reused
                if ev.data.strip() == "[DONE]":
                    done = True
                    continue
                if ev.event == "error":
                    raise self._payload_error(self._parse_data(ev, response), response, ev.data)
                chunk = self._parse_data(ev, response)
                if "error" in chunk:
                    raise self._payload_error(chunk, response, ev.data)
                model = chunk.get("model") or model
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                for choice in chunk.get("choices") or []:
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue
                    delta = choice.get("delta") or {}
                    r = delta.get("reasoning_content") or delta.get("reasoning")
                    if isinstance(r, str) and r:
                        thinking.append(r)
                        emit("thinking", r)
                    c = delta.get("content")
                    if isinstance(c, str) and c:
                        text.append(c)
                        emit("text", c)
                    for tc in delta.get("tool_calls") or []:
                        slot = calls.setdefault(tc.get("index", len(calls)), {"id": None, "name": "", "args": []})
                        fn = tc.get("function") or {}
                        slot["id"] = tc.get("id") or slot["id"]
                        if fn.get("name") and not slot["name"]:
                            slot["name"] = fn["name"]
                        if fn.get("arguments"):
                            slot["args"].append(fn["arguments"])
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
            if not done and seen:
                raise self._error("stream ended without [DONE]", response=response, body="".join(text)[-2000:])
        if not seen or (not text and not calls):
            # No event at all, or an empty reply (a gateway turns llama-cpp-python's empty
            # overflow stream into a "stop" chunk with no text): asked once unstreamed, so a
            # refusal behind any gateway is seen. The empty stream's usage is not kept.
            return self._resend_unstreamed(CHAT_PATH, self._payload(messages, system, tools, max_tokens, stream=False), emit)
        content: list[dict] = []
        if thinking:
            content.append({"type": "thinking", "thinking": "".join(thinking)})
        if text:
            content.append({"type": "text", "text": "".join(text)})
        for i in sorted(calls):
            slot = calls[i]
            block = {
                "type": "tool_use",
                "id": slot["id"] or f"call_{i}",
                "name": slot["name"],
                "input": parse_arguments("".join(slot["args"])),
            }
            content.append(block)
            emit("tool_use", block)
        stop = STOP_REASONS.get(finish, finish) if finish else ("tool_use" if calls else None)
        return Reply(content=content, usage=usage, stop_reason=stop, model=model or self.model, request_id=rid)

    # -- non-streaming ----------------------------------------------------
    def complete(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        tools: list[dict] | None = None,
    ) -> Reply:
        payload = self._payload(messages, system, tools, max_tokens, stream=False)
        doc, response = self._post_json(CHAT_PATH, payload)
        return self._reply_from_json(doc, response)

    def _reply_from_json(self, doc: dict, response) -> Reply:
        if "error" in doc:
            raise self._payload_error(doc, response, json.dumps(doc))
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0].get("message"), dict):
            raise self._error("response has no choices[0].message", response=response, body=json.dumps(doc))
        msg = choices[0]["message"]
        content: list[dict] = []
        r = msg.get("reasoning_content") or msg.get("reasoning")
        if isinstance(r, str) and r:
            content.append({"type": "thinking", "thinking": r})
        if isinstance(msg.get("content"), str) and msg["content"]:
            content.append({"type": "text", "text": msg["content"]})
        for i, tc in enumerate(msg.get("tool_calls") or []):
            fn = tc.get("function") or {}
            content.append(
                {
                    "type": "tool_use",
                    "id": tc.get("id") or f"call_{i}",
                    "name": fn.get("name", ""),
                    "input": parse_arguments(fn.get("arguments") or ""),
                }
            )
        finish = choices[0].get("finish_reason")
        return Reply(
            content=content,
            usage=_usage(doc.get("usage")),
            stop_reason=STOP_REASONS.get(finish, finish),
            model=doc.get("model") or self.model,
            request_id=request_id_of(response.headers),
        )
