"""A reference server on loopback that speaks both providers' wire formats.

Why a real server and not a mocked transport: the failures that matter
(a torn SSE frame, a dropped connection, a slow first byte, a socket left open
after Ctrl-C) only happen on a real socket. This server speaks
``POST /v1/chat/completions`` (OpenAI, base_url ``{url}/v1``) and
``POST /v1/messages`` (Anthropic, base_url ``{url}``), streaming and not, as the
public docs describe them, and it records every request.

Usage::

    def test_x(refserver):
        p = OpenAIProvider(base_url=refserver.openai_url, api_key="k")
        refserver.script(text="hi")                      # next reply
        refserver.script(status=429, retry_after=1)      # then a rate limit
        refserver.script(tool_calls=[{"name": "f", "input": {"a": 1}}])
        refserver.script(drop_after_chunks=2)            # connection dies mid-stream
        refserver.script(end_after_chunks=2)             # body ends early, cleanly
        refserver.script(stream_error="overloaded_error")  # error event mid-stream
        refserver.script(malformed=True) / (delay=2.0) / (chunk_delay=0.05)
        refserver.script(status=500, times=3)            # three 500s in a row
        refserver.overflow_above = 3000                  # prompt tokens, every request
            # (counted by count_text over the concatenated texts: no per-message framing,
            #  so it reads a little lower than ocw's own estimate)
        refserver.summary_text = "short summary"         # summary requests: this reply, no script used
        refserver.script_summary(status=500)             # the next summary request only
        refserver.clear_scripts()                        # drop everything queued
        refserver.requests[-1].body / .system / .is_summary / .prompt_tokens
        refserver.summary_requests()                     # requests made for compaction
        refserver.open_connections                       # sockets still open

Scripted replies are consumed one per request, FIFO; without one the reply is
``"echo: <last user text>"``. A summary request (system prompt starting with
SUMMARY_MARKER) takes a ``script_summary`` item first, else ``summary_text`` if
set, and only then the shared queue. ``overflow_above`` is checked first and
consumes nothing. A scripted ``overflow=True`` states the window and the prompt
size only when the server has a window (``model_window`` or
``overflow_above``); otherwise it uses the real wordings that state no numbers
(OpenAI "Your input exceeds the context window of this model.", Anthropic
"Input is too long for requested model.").

What the real local servers do, learned from ../shared/realserver/README.md
and observed on them (each is a knob, off by default so the other tests see
the plain OpenAI / Anthropic behaviour; ``like_llama_server(2048)`` and
``like_llama_cpp_python(2048)`` set the ones each server shows):

    refserver.overflow_style = "llama.cpp"
        # overflow → 400 {"error": {"code": 400, "message": "request (P tokens)
        # exceeds the available context size (N tokens), try increasing it",
        # "type": "exceed_context_size_error", "n_prompt_tokens": P, "n_ctx": N}},
        # on both wire formats, streamed or not (llama-server)
    refserver.overflow_style = "llama-cpp-python"
        # overflow, streamed → 200 text/event-stream whose body ends cleanly with
        # no event at all; not streamed → 400 "This model's maximum context length
        # is N tokens. However, you requested M tokens (P in the messages, C in the
        # completion)..." code context_length_exceeded (llama-cpp-python)
    refserver.script(empty_stream=True)
        # one such empty stream without an overflow (the re-send then takes the
        # next script: a reply)
        # After every empty stream the server drops that kept-alive connection:
        # the next request arriving on it is read and never answered (closed
        # with a reset, or with a plain close if drop_with_reset = False).
        # refserver.dropped counts those requests; they are not in .requests.
    refserver.script(text="hi", then_drop=True)
        # answer, then drop the next request on that connection the same way
    refserver.reported_window = 2048
        # GET /props → {"default_generation_settings": {"n_ctx": 2048}, ...} and
        # GET /v1/models → data[0].meta.n_ctx = 2048, owned_by "llamacpp" (llama-server);
        # None: /props is a 404 and the list names no window.
        # Window probes (GET /props, GET /v1/models, POST /api/show, GET /api/ps,
        # GET /api/v0/models) are recorded in refserver.probes, never in .requests.
    refserver.stream_usage = False
        # no usage in streams, even when asked (llama-cpp-python); non-streamed
        # replies keep theirs
    refserver.usage_scale = 1.9
        # the server counts tokens ~1.9x ocw's cl100k estimate, like a local
        # model's tokenizer: usage, prompt_tokens and the overflow check all use it
    refserver.reject_null_content = True
        # an assistant message with tool_calls and "content": null → HTTP 500,
        # "7 validation errors: ... Input should be a valid string"
        # (llama-cpp-python); "content": "" is accepted
    refserver.script(echo_key_header=True)
        # the reply carries the request's key in an "x-echo-key" header (a
        # careless proxy), to prove it never reaches a log line
"""
from __future__ import annotations

import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ocw.providers.base import SUMMARY_MARKER
from ocw.text.tokens import count_text

AUTH_HEADERS = ("authorization", "x-api-key", "api-key", "proxy-authorization")
PROBE_PATHS = ("/props", "/v1/models", "/api/show", "/api/ps", "/api/v0/models")
CREATED = 1700000000
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    500: "api_error", 529: "overloaded_error",
}
OPENAI_ERRORS = {  # status: (type, code, message)
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: {masked}."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Country not supported."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist."),
    413: ("invalid_request_error", "request_too_large", "Request too large."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
}


@dataclass
class Script:
    """One scripted reply (fields combine: e.g. text plus drop_after_chunks)."""

    text: str | None = None
    thinking: str | None = None
    tool_calls: list[dict] | None = None  # [{"name", "input", "id"?}]
    status: int | None = None  # an HTTP error instead of a reply
    retry_after: float | str | None = None  # Retry-After header value
    body: str | dict | None = None  # override the error body
    overflow: bool = False  # one context-length 400 in the endpoint's own words
    stream_error: str | dict | None = None  # error event mid-stream: a type or {"type", "message"}
    drop_after_chunks: int | None = None  # close the socket after N frames, no terminator
    end_after_chunks: int | None = None  # end the body cleanly after N frames (no final event)
    malformed: bool = False  # a frame that is not JSON after the first one
    delay: float = 0.0  # seconds before the first byte (status line)
    chunk_delay: float = 0.0  # seconds between frames
    stop_reason: str | None = None  # wire value, e.g. "length" / "max_tokens"
    cached_tokens: int = 0
    cache_created: int = 0  # Anthropic: prompt tokens written to the cache (left out of its input_tokens)
    empty_stream: bool = False  # 200 event-stream with no event at all, then the connection is dropped
    then_drop: bool = False  # answer normally, then drop this connection's next request (a server that let it go)
    echo_key_header: bool = False  # the reply echoes the request's key in an x-echo-key header


@dataclass
class Recorded:
    """One request as the server saw it; auth header values are never stored."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    auth: bool  # whether an auth header was present
    prompt_tokens: int = 0
    status: int | None = None  # what the server answered
    request_id: str | None = None

    @property
    def kind(self) -> str:
        return "anthropic" if self.path.endswith("/messages") else "openai"

    @property
    def json(self) -> Any:  # alias: the parsed JSON body
        return self.body

    @property
    def stream(self) -> bool:
        return bool(isinstance(self.body, dict) and self.body.get("stream"))

    @property
    def messages(self) -> list[dict]:
        return (self.body or {}).get("messages", []) if isinstance(self.body, dict) else []

    @property
    def text(self) -> str:
        """Every message's text, one message a line: what the model read (pins, seeds, …)."""
        return "\n".join(_text(m.get("content")) for m in self.messages)

    @property
    def system(self) -> str:
        """The system prompt, whichever wire format carried it."""
        if not isinstance(self.body, dict):
            return ""
        if self.kind == "anthropic":
            s = self.body.get("system") or ""
            return s if isinstance(s, str) else "".join(b.get("text", "") for b in s)
        return "\n".join(_text(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer"))

    @property
    def is_summary(self) -> bool:
        return self.system.startswith(SUMMARY_MARKER)


def _text(content: Any) -> str:
    """All text in a wire content value (string or list of parts/blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            if part.get("type") in ("text", "thinking"):
                out.append(part.get("text") or part.get("thinking") or "")
            elif part.get("type") == "tool_use":
                out.append(json.dumps(part.get("input", {}), sort_keys=True))
            elif part.get("type") == "tool_result":
                out.append(_text(part.get("content")))
    return "\n".join(out)


def prompt_text(body: dict, kind: str) -> str:
    """Everything the model would read, flattened; the server counts its tokens."""
    parts = [_text(body.get("system"))] if kind == "anthropic" else []
    for m in body.get("messages") or []:
        parts.append(_text(m.get("content")))
        for tc in m.get("tool_calls") or []:
            parts.append((tc.get("function") or {}).get("arguments", ""))
    return "\n".join(p for p in parts if p)


# llama-cpp-python's answer to an assistant message with tool_calls and "content": null
# (pydantic tries each message type in turn; the one that matters is the string_type line).
_NULL_CONTENT_500 = {"error": {"message": "7 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 1, "
                     "'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\"}\n  "
                     "{'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', "
                     "'content'), 'msg': 'Input should be a valid string', 'input': None}",
                     "type": "internal_server_error", "param": None, "code": None}}


def _null_tool_call_content(body: dict) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls") and "content" in m
               and m["content"] is None for m in body.get("messages") or [])


def _pieces(text: str, words: int = 2) -> list[str]:
    parts = re.findall(r"\S+\s*|\s+", text)
    return ["".join(parts[i : i + words]) for i in range(0, len(parts), words)]


def _split3(s: str) -> list[str]:
    n = max(1, len(s) // 3)
    return [p for p in (s[:n], s[n : 2 * n], s[2 * n :]) if p]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ocw-refserver/1"
    timeout = 15  # an abandoned keep-alive socket frees its thread after this

    def setup(self) -> None:
        super().setup()
        # Frames go out as many small writes: without this, Nagle + delayed ACK add 40 ms each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.ref._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.ref._closed(self.connection)

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    drop_next = False  # set after an empty stream: the next request on this connection is dropped

    def do_GET(self) -> None:
        self._serve(self.server.ref._handle_probe)

    def do_POST(self) -> None:
        probe = self.path.split("?")[0] in PROBE_PATHS
        self._serve(self.server.ref._handle_probe if probe else self.server.ref._handle)

    def _serve(self, handle) -> None:
        try:
            if self.drop_next:
                return self.server.ref._drop_request(self)
            handle(self)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout, OSError):
            self.close_connection = True  # the client went away: that is its right

    # -- writing helpers ------------------------------------------------------
    def _json(self, status: int, doc: Any, headers: dict) -> None:
        data = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, headers: dict) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _frame(self, data: bytes) -> None:
        """One SSE frame sent as two HTTP chunks split mid-frame (maybe mid-character)."""
        cut = len(data) // 2
        self._chunk(data[:cut])
        self._chunk(data[cut:])

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self, reset: bool = False) -> None:
        """Close the connection now; ``reset``: with an RST ("Connection reset by peer")."""
        self.close_connection = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class RefServer:
    """The server object tests talk to (see module doc)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[Recorded] = []
        self.overflow_above: int | None = None  # prompt tokens; None: never
        self.model_window: int | None = None  # "M maximum" in overflow messages
        self.summary_text: str | None = None  # set: compaction's summary requests get it, scripts stay queued
        # What the real local servers do (see the module doc); off by default.
        self.overflow_style: str = "openai"  # | "llama.cpp" | "llama-cpp-python"
        self.reported_window: int | None = None  # GET /props and /v1/models state it
        self.stream_usage: bool = True
        self.usage_scale: float = 1.0
        self.reject_null_content: bool = False
        self.drop_with_reset: bool = True
        self.probes: list[Recorded] = []  # window probes (PROBE_PATHS), apart from .requests
        self.dropped = 0  # requests that arrived on a dropped connection, never answered
        self._scripts: list[Script] = []
        self._summary_scripts: list[Script] = []  # script_summary(): summary requests only
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer((host, 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.ref = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.host, self.port = self._httpd.server_address[:2]

    # -- lifecycle ------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    def start(self) -> "RefServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> "RefServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- behaving like a real server (module doc) -------------------------------
    def like_llama_server(self, window: int = 2048) -> "RefServer":
        """llama.cpp's llama-server with ``-c window -np 1``."""
        self.overflow_style, self.overflow_above, self.reported_window = "llama.cpp", window, window
        return self

    def like_llama_cpp_python(self, window: int = 2048) -> "RefServer":
        """The llama-cpp-python server with ``--n_ctx window``."""
        self.overflow_style, self.overflow_above = "llama-cpp-python", window
        self.stream_usage, self.reject_null_content = False, True
        return self

    # -- scripting and inspection ---------------------------------------------
    def script(self, times: int = 1, **kw: Any) -> Script:
        """Queue a reply for the next request (``times`` copies of it)."""
        item = Script(**kw)
        with self._lock:
            self._scripts.extend([item] * times)
        return item

    def script_summary(self, times: int = 1, **kw: Any) -> Script:
        """Queue a reply for the next summary request only (e.g. ``status=500``)."""
        item = Script(**kw)
        with self._lock:
            self._summary_scripts.extend([item] * times)
        return item

    def clear_scripts(self) -> None:
        with self._lock:
            self._scripts.clear()
            self._summary_scripts.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._scripts)

    def summary_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.is_summary]

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def wait_closed(self, timeout: float = 2.0) -> bool:
        """Poll until no connection is open (a client closes asynchronously)."""
        deadline = time.monotonic() + timeout
        while self.open_connections and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.open_connections == 0

    def _opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.discard(conn)

    # -- request handling -----------------------------------------------------
    def _drop_request(self, h: _Handler) -> None:
        """A request on a connection the server had given up on: read, never answered."""
        h.rfile.read(int(h.headers.get("content-length") or 0))
        with self._lock:
            self.dropped += 1
        h._drop(reset=self.drop_with_reset)

    def _handle_probe(self, h: _Handler) -> None:
        """The endpoints a window probe asks (a GET, or Ollama's POST /api/show)."""
        path = h.path.split("?")[0]
        h.rfile.read(int(h.headers.get("content-length") or 0))
        rec = Recorded(h.command, path, None, {k.lower(): v for k, v in h.headers.items() if k.lower() not in AUTH_HEADERS},
                       any(h.headers.get(k) for k in AUTH_HEADERS), status=200)
        with self._lock:
            self.probes.append(rec)
        n = self.reported_window
        if path == "/props" and n:
            return h._json(200, {"default_generation_settings": {"n_ctx": n}, "total_slots": 1,
                                 "model_alias": "ref-model", "build_info": "ocw-refserver"}, {})
        if path == "/v1/models":
            entry: dict[str, Any] = {"id": "ref-model", "object": "model", "created": CREATED,
                                     "owned_by": "llamacpp" if n else "ocw-refserver"}
            if n:
                entry["meta"] = {"n_ctx": n, "n_ctx_train": n, "n_vocab": 1759}
            return h._json(200, {"object": "list", "data": [entry]}, {})
        rec.status = 404
        h._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}}, {})

    def _handle(self, h: _Handler) -> None:
        raw = h.rfile.read(int(h.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in h.headers.items()}
        auth_value = next((headers[k] for k in AUTH_HEADERS if headers.get(k)), "")
        auth_value = auth_value.split(" ", 1)[-1] if auth_value.lower().startswith("bearer ") else auth_value
        kept = {k: v for k, v in headers.items() if k not in AUTH_HEADERS}
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            rec = Recorded("POST", h.path, body, kept, bool(auth_value))
            self.requests.append(rec)
            rec.request_id = f"req_{len(self.requests):04d}"
        kind = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}.get(h.path.split("?")[0])
        rid_header = {"request-id" if kind == "anthropic" else "x-request-id": rec.request_id}
        if kind is None or not isinstance(body, dict):
            rec.status = 404 if kind is None else 400
            return h._json(rec.status, {"error": {"message": "bad path or body", "type": "invalid_request_error"}}, rid_header)
        rec.prompt_tokens = round(count_text(prompt_text(body, kind)) * self.usage_scale)
        if self.reject_null_content and kind == "openai" and _null_tool_call_content(body):
            rec.status = 500
            return h._json(500, _NULL_CONTENT_500, rid_header)
        limit = self.overflow_above
        if limit is not None and rec.prompt_tokens > limit:
            sc = Script(overflow=True)
        elif rec.is_summary and (self._summary_scripts or self.summary_text is not None):
            with self._lock:
                sc = self._summary_scripts.pop(0) if self._summary_scripts else Script(text=self.summary_text)
        else:
            with self._lock:
                sc = self._scripts.pop(0) if self._scripts else Script()
        if sc.delay:
            self._stop.wait(sc.delay)
        if (sc.empty_stream or (sc.overflow and self.overflow_style == "llama-cpp-python")) and body.get("stream"):
            rec.status = 200  # what llama-cpp-python answers when its stream generator raises
            h._start_stream(rid_header)
            h._end_stream()
            h.drop_next = True
            return
        if sc.overflow or sc.status:
            status, doc = self._error_doc(kind, sc, rec, auth_value)
            extra = dict(rid_header)
            if sc.retry_after is not None:
                extra["retry-after"] = sc.retry_after
            rec.status = status
            return h._json(status, doc, extra)
        rec.status = 200
        reply = self._reply(body, kind, sc, rec)
        if sc.echo_key_header:
            rid_header = dict(rid_header, **{"x-echo-key": auth_value})
        if body.get("stream"):
            h._start_stream(rid_header)
            frames = self._openai_frames(body, reply) if kind == "openai" else self._anthropic_frames(reply)
            self._send_frames(h, frames, sc, kind)
        else:
            h._json(200, self._openai_doc(reply) if kind == "openai" else self._anthropic_doc(reply), rid_header)
        h.drop_next = sc.then_drop

    def _error_doc(self, kind: str, sc: Script, rec: Recorded, key: str) -> tuple[int, Any]:
        if sc.overflow:
            stated = self.model_window or self.overflow_above  # None: this server states no window
            window = stated or max(1, rec.prompt_tokens - 1)
            p = rec.prompt_tokens
            if self.overflow_style == "llama.cpp":
                return 400, {"error": {"code": 400, "message": f"request ({p} tokens) exceeds the available context "
                                       f"size ({window} tokens), try increasing it", "type": "exceed_context_size_error",
                                       "n_prompt_tokens": p, "n_ctx": window}}
            if self.overflow_style == "llama-cpp-python":
                c = int(rec.body.get("max_tokens") or 4096)
                return 400, {"error": {"message": f"This model's maximum context length is {window} tokens. However, "
                                       f"you requested {p + c} tokens ({p} in the messages, {c} in the completion). "
                                       "Please reduce the length of the messages or completion.",
                                       "type": "invalid_request_error", "param": "messages",
                                       "code": "context_length_exceeded"}}
            if kind == "openai":
                msg = (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                       f"{rec.prompt_tokens} tokens. Please reduce the length of the messages." if stated else
                       "Your input exceeds the context window of this model. Please adjust your input and try again.")
                return 400, {"error": {"message": msg, "type": "invalid_request_error", "param": "messages",
                                       "code": "context_length_exceeded"}}
            msg = (f"prompt is too long: {rec.prompt_tokens} tokens > {window} maximum" if stated else
                   "Input is too long for requested model.")
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": msg}}
        status = int(sc.status or 500)
        if sc.body is not None:
            return status, sc.body
        masked = (key[:3] + "*" * max(0, len(key) - 7) + key[-4:]) if len(key) > 8 else "***"
        if kind == "openai":
            etype, code, msg = OPENAI_ERRORS.get(status, ("invalid_request_error", None, f"HTTP {status}"))
            return status, {"error": {"message": msg.format(masked=masked), "type": etype, "param": None, "code": code}}
        etype = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return status, {"type": "error", "error": {"type": etype, "message": etype.replace("_", " ")}}

    def _reply(self, body: dict, kind: str, sc: Script, rec: Recorded) -> dict:
        text = sc.text
        if text is None and not sc.tool_calls:
            last = next((m for m in reversed(body.get("messages") or []) if m.get("role") in ("user", "tool")), {})
            text = "echo: " + _text(last.get("content"))[:500]
        calls = []
        for i, tc in enumerate(sc.tool_calls or []):
            prefix = "toolu_ref_" if kind == "anthropic" else "call_ref_"
            calls.append({"id": tc.get("id") or f"{prefix}{i + 1}", "name": tc["name"],
                          "args": tc["args"] if isinstance(tc.get("args"), str) else json.dumps(tc.get("input", {}))})
        out_tokens = round(count_text((sc.thinking or "") + (text or "") + "".join(c["args"] for c in calls))
                           * self.usage_scale)
        if kind == "openai":
            stop = sc.stop_reason or ("tool_calls" if calls else "stop")
        else:
            stop = sc.stop_reason or ("tool_use" if calls else "end_turn")
        return {"model": body.get("model", "ref-model"), "text": text, "thinking": sc.thinking, "calls": calls,
                "stop": stop, "input": rec.prompt_tokens, "output": out_tokens, "cached": sc.cached_tokens,
                "created": sc.cache_created,
                "id": rec.request_id.replace("req_", "")}

    # -- OpenAI wire ----------------------------------------------------------
    @staticmethod
    def _openai_usage(r: dict) -> dict:
        return {"prompt_tokens": r["input"], "completion_tokens": r["output"],
                "total_tokens": r["input"] + r["output"], "prompt_tokens_details": {"cached_tokens": r["cached"]},
                "completion_tokens_details": {"reasoning_tokens": 0}}

    def _openai_frames(self, body: dict, r: dict) -> list[bytes]:
        base = {"id": f"chatcmpl-{r['id']}", "object": "chat.completion.chunk", "created": CREATED,
                "model": r["model"], "system_fingerprint": None}
        usage_on = bool((body.get("stream_options") or {}).get("include_usage")) and self.stream_usage

        def chunk(delta: dict, finish: str | None = None) -> dict:
            c = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])
            if usage_on:
                c["usage"] = None
            return c

        docs = [chunk({"role": "assistant", "content": "", "refusal": None})]
        docs += [chunk({"reasoning_content": p}) for p in _pieces(r["thinking"] or "")]
        docs += [chunk({"content": p}) for p in _pieces(r["text"] or "")]
        for i, c in enumerate(r["calls"]):
            docs.append(chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                               "function": {"name": c["name"], "arguments": ""}}]}))
            docs += [chunk({"tool_calls": [{"index": i, "function": {"arguments": a}}]}) for a in _split3(c["args"])]
        docs.append(chunk({}, r["stop"]))
        if usage_on:
            docs.append(dict(base, choices=[], usage=self._openai_usage(r)))
        return [f"data: {json.dumps(d)}\n\n".encode() for d in docs] + [b"data: [DONE]\n\n"]

    def _openai_doc(self, r: dict) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": r["text"], "refusal": None}
        if r["thinking"]:
            msg["reasoning_content"] = r["thinking"]
        if r["calls"]:
            msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["args"]}} for c in r["calls"]]
        return {"id": f"chatcmpl-{r['id']}", "object": "chat.completion", "created": CREATED, "model": r["model"],
                "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": r["stop"]}],
                "usage": self._openai_usage(r), "system_fingerprint": None}

    # -- Anthropic wire -------------------------------------------------------
    @staticmethod
    def _anthropic_usage(r: dict, output: int) -> dict:
        return {"input_tokens": r["input"] - r["cached"] - r["created"], "cache_creation_input_tokens": r["created"],
                "cache_read_input_tokens": r["cached"], "output_tokens": output}

    def _anthropic_blocks(self, r: dict) -> list[dict]:
        blocks = []
        if r["thinking"]:
            blocks.append({"type": "thinking", "thinking": r["thinking"], "signature": "sig-ref"})
        if r["text"]:
            blocks.append({"type": "text", "text": r["text"]})
        for c in r["calls"]:
            try:
                inp = json.loads(c["args"])
            except ValueError:
                inp = {}
            blocks.append({"type": "tool_use", "id": c["id"], "name": c["name"], "input": inp, "_args": c["args"]})
        return blocks

    def _anthropic_frames(self, r: dict) -> list[bytes]:
        def ev(name: str, doc: dict) -> bytes:
            return f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()

        msg = {"id": f"msg_{r['id']}", "type": "message", "role": "assistant", "model": r["model"], "content": [],
               "stop_reason": None, "stop_sequence": None}
        if self.stream_usage:
            msg["usage"] = self._anthropic_usage(r, 1)
        frames = [ev("message_start", {"type": "message_start", "message": msg}), ev("ping", {"type": "ping"})]
        for i, b in enumerate(self._anthropic_blocks(r)):
            t = b["type"]
            start = {"tool_use": {"type": "tool_use", "id": b.get("id"), "name": b.get("name"), "input": {}},
                     "thinking": {"type": "thinking", "thinking": ""}, "text": {"type": "text", "text": ""}}[t]
            frames.append(ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
            if t == "text":
                deltas = [{"type": "text_delta", "text": p} for p in _pieces(b["text"])]
            elif t == "thinking":
                deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(b["thinking"])]
                deltas.append({"type": "signature_delta", "signature": b["signature"]})
            else:
                deltas = [{"type": "input_json_delta", "partial_json": ""}]
                deltas += [{"type": "input_json_delta", "partial_json": p} for p in _split3(b["_args"])]
            frames += [ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
            frames.append(ev("content_block_stop", {"type": "content_block_stop", "index": i}))
        delta = {"type": "message_delta", "delta": {"stop_reason": r["stop"], "stop_sequence": None}}
        if self.stream_usage:
            delta["usage"] = {"output_tokens": r["output"]}
        frames.append(ev("message_delta", delta))
        frames.append(ev("message_stop", {"type": "message_stop"}))
        return frames

    def _anthropic_doc(self, r: dict) -> dict:
        content = [{k: v for k, v in b.items() if k != "_args"} for b in self._anthropic_blocks(r)]
        return {"id": f"msg_{r['id']}", "type": "message", "role": "assistant", "model": r["model"],
                "content": content, "stop_reason": r["stop"], "stop_sequence": None,
                "usage": self._anthropic_usage(r, r["output"])}

    # -- streaming faults -----------------------------------------------------
    def _send_frames(self, h: _Handler, frames: list[bytes], sc: Script, kind: str) -> None:
        if sc.malformed:
            frames.insert(1, b'data: {"choices": [{"delta": {"content": "half\n\n')
        if sc.stream_error is not None:
            err = sc.stream_error if isinstance(sc.stream_error, dict) else {"type": sc.stream_error}
            err = {"type": err.get("type", "api_error"), "message": err.get("message") or "stream error"}
            if kind == "anthropic":
                frame = f"event: error\ndata: {json.dumps({'type': 'error', 'error': err})}\n\n".encode()
            else:
                frame = f"data: {json.dumps({'error': dict(err, code=None)})}\n\n".encode()
            frames = frames[:2] + [frame]  # the error replaces the rest of the reply
        for n, frame in enumerate(frames):
            if sc.drop_after_chunks is not None and n >= sc.drop_after_chunks:
                return h._drop()
            if sc.end_after_chunks is not None and n >= sc.end_after_chunks:
                break
            if sc.chunk_delay and n:
                if self._stop.wait(sc.chunk_delay):
                    return h._drop()
            h._frame(frame)
        h._end_stream()


@pytest.fixture
def refserver(monkeypatch):
    """A running RefServer for one test; loopback bypasses any proxy settings."""
    for var in ("NO_PROXY", "no_proxy"):
        cur = os.environ.get(var, "")
        monkeypatch.setenv(var, ",".join(x for x in (cur, "127.0.0.1", "localhost") if x))
    server = RefServer().start()
    try:
        yield server
    finally:
        server.stop()


# -- small helpers for provider tests ------------------------------------------
def user(text: str) -> dict:
    """An ocw user message with one text block."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def pool_connections(client) -> list:
    """The sockets an httpx.Client still holds (httpx internals: tests only)."""
    if client is None:
        return []
    pool = getattr(client._transport, "_pool", None)
    return list(getattr(pool, "connections", []))
