"""Every error path of ocw/providers/http.py, word for word, and its log lines.

An error reaches the user as one line (an OcwError becomes a UsageError): these
tests pin that line, the class, and what the error carries (status, request id,
body, the key scrubbed out), for each way a server can fail — not only the
class. Servers are real sockets on the loopback: tests/refserver.py where it can
produce the failure, else `RawServer` below, which answers each connection with
bytes written here (a body cut short, a body that stalls, a 200 that is not JSON,
an event stream of one frame and then nothing).
"""
from __future__ import annotations

import json
import logging
import socket
import threading

import httpx
import pytest
from refserver import user

import ocw.providers.http as http
from ocw.text.errors import BadRequest, MalformedResponse, ProviderConnectionError, ProviderTimeout, RateLimitError, ServerError
from ocw.providers import AnthropicProvider, OpenAIProvider

KEY = "sk-test-0123456789abcdefghij"


class RawServer:
    """A loopback server: connection i reads one request, then gets `answers[i]`:
    ("close", bytes) sends the bytes and closes; ("stall", bytes) sends them and
    holds the connection open until the test ends."""

    def __init__(self, answers: list[tuple[str, bytes]]):
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _read_request(self, conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        return head + b"\r\n\r\n" + body

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            conn.settimeout(5)
            self.requests.append(self._read_request(conn))
            how, data = self.answers.pop(0) if self.answers else ("close", b"HTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n")
            conn.sendall(data)
            if how == "stall":
                self._held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self._held:
            c.close()
        self._sock.close()


def response(status: str, headers: dict[str, str], body: bytes, *, length: int | None = None) -> bytes:
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


def event_stream(first_chunk: bytes) -> bytes:
    """A chunked event stream whose first chunk is `first_chunk` (and no end)."""
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"x-request-id: rid-s\r\n\r\n" + f"{len(first_chunk):x}\r\n".encode() + first_chunk + b"\r\n")


@pytest.fixture
def raw():
    servers: list[RawServer] = []

    def make(*answers):
        s = RawServer(list(answers))
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def sleeps(monkeypatch):
    calls: list[float] = []
    monkeypatch.setattr(http, "_sleep", calls.append)
    return calls


def openai(url: str, **kw) -> OpenAIProvider:
    kw.setdefault("max_retries", 0)
    return OpenAIProvider("m", base_url=url + "/v1", api_key=KEY, **kw)


# -- a 200 that is not what was asked for --------------------------------------------------------
@pytest.mark.parametrize("body, line", [
    (b"<html>oops</html>", "openai: response is not JSON"),
    (b"[1, 2]", "openai: response is not a JSON object"),
])
def test_a_200_that_is_not_a_json_object(raw, body, line):
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json", "x-request-id": "rid-1"}, body)))
    p = openai(srv.url)
    with pytest.raises(MalformedResponse) as ei:
        p.complete([user("q")])
    assert str(ei.value) == line
    assert (ei.value.status, ei.value.request_id, ei.value.body) == (200, "rid-1", body.decode())
    assert len(srv.requests) == 1
    p.close()


def test_a_long_body_on_an_error_is_scrubbed_and_cut_to_8000_characters(raw):
    body = f"not json {KEY} ".encode() + b"z" * 9000
    srv = raw(("close", response("200 OK", {"Content-Type": "text/plain"}, body)))
    p = openai(srv.url)
    with pytest.raises(MalformedResponse) as ei:
        p.complete([user("q")])
    assert len(ei.value.body) == 8000 and ei.value.body.startswith("not json <redacted> zzz") and KEY not in ei.value.body
    p.close()


def test_invalid_utf8_in_a_reply_becomes_a_replacement_character(raw):
    doc = b'{"choices":[{"message":{"role":"assistant","content":"caf\xe9 au lait"},"finish_reason":"stop"}]}'
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json"}, doc)))
    p = openai(srv.url)
    assert p.complete([user("q")]).text == "caf\ufffd au lait"
    p.close()


def test_a_body_cut_short_is_a_dropped_connection(raw):
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json", "x-request-id": "rid-2"},
                                 b'{"choices":', length=500)))
    p = openai(srv.url)
    with pytest.raises(ProviderConnectionError) as ei:
        p.complete([user("q")])
    assert str(ei.value).startswith("openai: connection dropped: ")
    assert (ei.value.status, ei.value.request_id) == (200, "rid-2")
    p.close()


def test_a_body_that_stalls_is_a_timeout(raw):
    srv = raw(("stall", response("200 OK", {"Content-Type": "application/json", "x-request-id": "rid-3"},
                                 b'{"choices":', length=500)))
    p = openai(srv.url, timeout=0.5)
    with pytest.raises(ProviderTimeout) as ei:
        p.complete([user("q")])
    assert str(ei.value) == "openai: timed out reading the response"
    assert (ei.value.status, ei.value.request_id) == (200, "rid-3")
    p.close()


# -- JSON where an event stream was asked for ----------------------------------------------------
def test_a_json_error_instead_of_a_stream_is_typed_and_scrubbed(raw):
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}})
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json", "x-request-id": "rid-4"}, body.encode())))
    p = openai(srv.url)
    with pytest.raises(BadRequest) as ei:
        p.stream([user("q")])
    assert str(ei.value) == ("openai: error in stream: invalid_request_error: Incorrect API key provided: <redacted> "
                             "(request id rid-4)")
    assert (ei.value.status, ei.value.request_id) == (200, "rid-4")
    assert ei.value.body == body.replace(KEY, "<redacted>")
    p.close()


def test_json_without_an_error_instead_of_a_stream(raw):
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json", "x-request-id": "rid-5"}, b'{"ok": true}')))
    p = openai(srv.url)
    with pytest.raises(MalformedResponse) as ei:
        p.stream([user("q")])
    assert str(ei.value) == "openai: expected an event stream, got JSON"
    assert (ei.value.status, ei.value.request_id, ei.value.body) == (200, "rid-5", '{"ok": true}')
    p.close()


def test_invalid_utf8_in_json_instead_of_a_stream_is_still_read(raw):
    body = b'{"error": {"message": "mod\xe8le absent", "type": "not_found_error"}}'
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json"}, body)))
    p = openai(srv.url)
    with pytest.raises(BadRequest) as ei:
        p.stream([user("q")])
    assert str(ei.value) == "openai: error in stream: not_found_error: mod\ufffdle absent"
    p.close()


def test_json_instead_of_a_stream_cut_short(raw):
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json", "x-request-id": "rid-6"},
                                 b'{"error":', length=300)))
    p = openai(srv.url)
    with pytest.raises(ProviderConnectionError) as ei:
        p.stream([user("q")])
    assert str(ei.value).startswith("openai: could not read the response: ")
    assert (ei.value.status, ei.value.request_id) == (200, "rid-6")
    p.close()


# -- an event stream that goes wrong -------------------------------------------------------------
@pytest.mark.parametrize("frame, line, data", [
    (b"data: {not json\n\n", "openai: unparsable stream frame", "{not json"),
    (b"data: [1, 2]\n\n", "openai: stream frame is not a JSON object", "[1, 2]"),
])
def test_a_frame_that_is_not_a_json_object(raw, frame, line, data):
    srv = raw(("close", event_stream(frame) + b"0\r\n\r\n"))
    p = openai(srv.url)
    with pytest.raises(MalformedResponse) as ei:
        p.stream([user("q")])
    assert str(ei.value) == line
    assert (ei.value.status, ei.value.request_id, ei.value.body) == (200, "rid-s", data)
    p.close()


def test_a_stream_that_stalls_is_a_timeout(raw):
    srv = raw(("stall", event_stream(b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n')))
    p = openai(srv.url, timeout=0.5)
    seen: list = []
    with pytest.raises(ProviderTimeout) as ei:
        p.stream([user("q")], on_event=lambda k, d: seen.append((k, d)))
    assert str(ei.value) == "openai: the stream stalled (read timeout)"
    assert (ei.value.status, ei.value.request_id) == (200, "rid-s")
    assert seen == [("text", "hi")]
    p.close()


def test_a_stream_that_breaks_off(raw):
    srv = raw(("close", event_stream(b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n')))
    p = openai(srv.url)
    with pytest.raises(ProviderConnectionError) as ei:
        p.stream([user("q")])
    assert str(ei.value).startswith("openai: the stream broke off: ")
    assert (ei.value.status, ei.value.request_id) == (200, "rid-s")
    p.close()


def test_an_error_event_without_an_error_member_is_read_whole(raw):
    frame = f'event: error\ndata: {{"type": "server_error", "message": "busy, key {KEY}"}}\n\n'.encode()
    srv = raw(("close", event_stream(frame) + b"0\r\n\r\n"))
    p = openai(srv.url)
    with pytest.raises(ServerError) as ei:
        p.stream([user("q")])
    assert str(ei.value) == "openai: error in stream: server_error: busy, key <redacted> (request id rid-s)"
    assert (ei.value.status, ei.value.request_id) == (200, "rid-s")
    assert KEY not in ei.value.body and "<redacted>" in ei.value.body
    p.close()


def test_an_anthropic_error_event_is_read_from_its_error_member(raw):
    frame = b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"request-id: req_ant\r\n\r\n")
    srv = raw(("close", head + f"{len(frame):x}\r\n".encode() + frame + b"\r\n0\r\n\r\n"))
    p = AnthropicProvider("m", base_url=srv.url, api_key=KEY, max_retries=0)
    with pytest.raises(ServerError) as ei:
        p.stream([user("q")])
    assert str(ei.value) == "anthropic: error in stream: overloaded_error: Overloaded (request id req_ant)"
    assert (ei.value.status, ei.value.request_id) == (200, "req_ant")
    p.close()


def test_empty_blocks_of_an_unstreamed_re_send_are_not_emitted(raw):
    """The stream said nothing; the re-send's reply has empty thinking and text blocks
    before its tool call (Anthropic sends such blocks): only the call is emitted."""
    empty = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    doc = {"type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
           "content": [{"type": "thinking", "thinking": "", "signature": "s"}, {"type": "text", "text": ""},
                       {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
           "usage": {"input_tokens": 5, "output_tokens": 3}}
    srv = raw(("close", empty), ("close", response("200 OK", {"Content-Type": "application/json"},
                                                   json.dumps(doc).encode())))
    p = AnthropicProvider("m", base_url=srv.url, api_key=KEY, max_retries=0)
    seen: list = []
    reply = p.stream([user("q")], on_event=lambda k, d: seen.append((k, d)))
    assert seen == [("tool_use", {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}})]
    assert [b["type"] for b in reply.content] == ["thinking", "text", "tool_use"] and len(srv.requests) == 2
    p.close()


# -- sending: statuses, connections, URLs ----------------------------------------------------
def test_a_300_is_not_a_success(refserver, sleeps):
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="k", max_retries=2)
    refserver.script(status=300)
    with pytest.raises(BadRequest) as ei:
        p.stream([user("q")])
    assert str(ei.value) == "openai: HTTP 300: HTTP 300 (request id req_0001)"
    assert ei.value.status == 300 and len(refserver.requests) == 1 and sleeps == []
    p.close()


@pytest.mark.parametrize("status", [501, 505, 599])
def test_every_5xx_is_retried(refserver, sleeps, status):
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="k", max_retries=2)
    refserver.script(status=status, times=3)
    with pytest.raises(ServerError) as ei:
        p.complete([user("q")])
    assert ei.value.status == status and len(refserver.requests) == 3 and len(sleeps) == 2
    p.close()


def test_no_answer_within_the_timeout(refserver, sleeps):
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="k", timeout=0.3, max_retries=2)
    refserver.script(delay=3)
    with pytest.raises(ProviderTimeout) as ei:
        p.stream([user("q")])
    url = refserver.openai_url + "/chat/completions"
    assert str(ei.value) == f"openai: no answer from {url} within 0.3 s"
    assert ei.value.status is None and len(refserver.requests) == 1 and sleeps == []  # a read timeout: not retried
    p.close()


def test_a_refused_connection_is_retried_then_named(sleeps):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    p = OpenAIProvider("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=2)
    with pytest.raises(ProviderConnectionError) as ei:
        p.complete([user("q")])
    assert str(ei.value).startswith(f"openai: cannot connect to http://127.0.0.1:{port}/v1/chat/completions: ")
    assert ei.value.status is None and len(sleeps) == 2
    p.close()


def test_a_reset_on_a_fresh_connection_is_named(refserver, sleeps):
    refserver._handle = lambda h: refserver._drop_request(h)
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="k", max_retries=3)
    with pytest.raises(ProviderConnectionError) as ei:
        p.complete([user("q")])
    assert str(ei.value).startswith(f"openai: connection to {refserver.openai_url}/chat/completions failed: ")
    assert refserver.dropped == 1 and sleeps == []
    p.close()


def test_an_unsupported_scheme_is_a_connection_error_not_retried(sleeps):
    p = OpenAIProvider("m", base_url="ftp://127.0.0.1:9/v1", api_key="k", max_retries=2)
    with pytest.raises(ProviderConnectionError) as ei:
        p.complete([user("q")])
    assert str(ei.value).startswith("openai: connection to ftp://127.0.0.1:9/v1/chat/completions failed: ")
    assert sleeps == []
    p.close()


def test_an_invalid_base_url_is_a_bad_request(sleeps):
    p = OpenAIProvider("m", base_url="http://[::1/v1", api_key="k", max_retries=2)
    with pytest.raises(BadRequest) as ei:
        p.complete([user("q")])
    assert str(ei.value) == "openai: invalid base URL 'http://[::1/v1': Invalid port: ':1'"
    assert ei.value.status is None and sleeps == []
    p.close()


# -- what the log says --------------------------------------------------------------------------
def ocw_log(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ocw.providers"]


@pytest.mark.parametrize("method, streamed", [("stream", True), ("complete", False)])
def test_each_attempt_and_each_retry_is_logged(refserver, sleeps, caplog, method, streamed):
    caplog.set_level(logging.DEBUG, logger="ocw.providers")
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="k", max_retries=2)
    refserver.script(status=429, retry_after=2)
    refserver.script(text="ok")
    assert getattr(p, method)([user("q")]).text == "ok"
    url = refserver.openai_url + "/chat/completions"
    assert ocw_log(caplog) == [
        f"openai POST {url} (attempt 1, stream={streamed})",
        "openai: RateLimitError; retry 1/2 in 2.00 s",
        f"openai POST {url} (attempt 2, stream={streamed})",
    ]
    assert sleeps == [2.0]
    p.close()


def test_a_re_send_on_a_fresh_connection_is_logged(refserver, sleeps, caplog):
    caplog.set_level(logging.INFO, logger="ocw.providers")
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="k")
    refserver.script(text="first", then_drop=True)
    p.complete([user("a")])
    p.complete([user("b")])
    assert ocw_log(caplog) == ["openai: the reused connection was closed by the server (RemoteProtocolError); "
                               "sending again on a fresh one"]
    p.close()


def test_an_unstreamed_re_send_is_logged(refserver, caplog):
    caplog.set_level(logging.INFO, logger="ocw.providers")
    p = AnthropicProvider("m", base_url=refserver.anthropic_url, api_key="k")
    refserver.script(empty_stream=True)
    refserver.script(text="the answer")
    assert p.stream([user("q")]).text == "the answer"
    # The server (like llama-cpp-python) also let the connection go: the re-send says so too.
    assert ocw_log(caplog) == ["anthropic: the stream brought no reply (no event, or no text and no tool call); "
                               "asking once more without streaming",
                               "anthropic: the reused connection was closed by the server (RemoteProtocolError); "
                               "sending again on a fresh one"]
    p.close()


def test_a_probe_that_fails_is_logged_and_is_none(caplog):
    caplog.set_level(logging.DEBUG, logger="ocw.providers")
    p = http.HTTPProvider("m", base_url="http://127.0.0.1:9")  # the base class knows no model list
    assert p.probe_window() is None
    assert ocw_log(caplog) == ["http: window probe failed: NotImplementedError"]


# -- the probe through the provider --------------------------------------------------------------
def test_the_probe_asks_the_servers_own_endpoints_within_its_timeout(refserver):
    refserver.like_llama_server(4096)
    p = OpenAIProvider("ref-model", base_url=refserver.openai_url, api_key="k")
    asked: list = []
    fetch = p._probe_fetch

    def spy(method, url, body, timeout):
        asked.append((method, url, body, timeout))
        return fetch(method, url, body, timeout)

    p._probe_fetch = spy
    assert p.probe_window() == (4096, "llama.cpp /v1/models")
    assert [(m, u, b) for m, u, b, _ in asked] == [("GET", refserver.openai_url + "/models", None)]
    assert 0 < asked[0][3] <= 2.0  # the default overall bound: 2 s
    assert [(r.method, r.path) for r in refserver.probes] == [("GET", "/v1/models")]
    assert p.probe_window(timeout=0.5) == (4096, "llama.cpp /v1/models") and asked[-1][3] <= 0.5
    p.close()


def test_the_probe_sends_the_providers_headers_and_reads_only_a_200_object(raw):
    srv = raw(("close", response("201 Created", {"Content-Type": "application/json"},
                                 b'{"data":[{"id":"m","meta":{"n_ctx":1000}}]}')),
              ("close", response("200 OK", {"Content-Type": "application/json"}, b'[{"id":"m"}]')),
              ("close", response("200 OK", {"Content-Type": "application/json"},
                                 b'{"data":[{"id":"m","meta":{"n_ctx":3000}}]}')))
    p = openai(srv.url)
    assert p._probe_fetch("GET", srv.url + "/v1/models", None, 2.0) is None  # a 201 is not the answer
    assert p._probe_fetch("GET", srv.url + "/v1/models", None, 2.0) is None  # a list is not an object
    assert p._probe_fetch("POST", srv.url + "/api/show", {"model": "m"}, 2.0) == {"data": [{"id": "m", "meta": {"n_ctx": 3000}}]}
    last = srv.requests[-1].decode()
    assert last.startswith("POST /api/show HTTP/1.1") and f"Bearer {KEY}" in last and last.endswith('{"model":"m"}')
    p.close()


# -- small parts -----------------------------------------------------------------------------------
def test_backoff_bounds_with_the_jitter_at_its_ends(monkeypatch):
    monkeypatch.setattr(http.random, "random", lambda: 1.0)
    assert [http.backoff_delay(a) for a in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]  # capped at 8 s
    monkeypatch.setattr(http.random, "random", lambda: 0.0)
    assert [http.backoff_delay(a) for a in range(6)] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0]


def test_the_real_sleep_sleeps():
    assert http._sleep(0.0) is None


def test_a_client_that_fails_to_close_after_an_interrupt_is_dropped_quietly():
    class Unclosable:
        def close(self):
            raise OSError("socket already gone")

    p = OpenAIProvider("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    p._client = Unclosable()
    p._discard_client()  # must not raise: it runs while a KeyboardInterrupt propagates
    assert p._client is None


def test_a_unix_socket_connection_counts_as_new():
    trace = http._ConnectionTrace()
    assert trace.new_connection is False
    trace("connection.send_request_headers.started", {})
    assert trace.new_connection is False
    trace("connection.connect_unix_socket.started", {})
    assert trace.new_connection is True
    tcp = http._ConnectionTrace()
    tcp("connection.connect_tcp.complete", {})
    assert tcp.new_connection is True


# -- the error body itself ---------------------------------------------------------------------
def test_an_error_body_that_stalls_is_a_timeout(raw):
    srv = raw(("stall", response("500 Internal Server Error", {"x-request-id": "rid-7"}, b'{"error":', length=400)))
    p = openai(srv.url, timeout=0.5, max_retries=2)
    with pytest.raises(ProviderTimeout) as ei:
        p.complete([user("q")])
    assert str(ei.value) == "openai: timed out reading an error body"
    assert (ei.value.status, ei.value.request_id) == (500, "rid-7") and len(srv.requests) == 1
    p.close()


def test_an_error_body_cut_short_leaves_the_status_alone(raw, sleeps):
    srv = raw(("close", response("503 Service Unavailable", {"x-request-id": "rid-8"}, b'{"error":', length=400)))
    p = openai(srv.url)
    with pytest.raises(ServerError) as ei:
        p.complete([user("q")])
    assert str(ei.value) == "openai: HTTP 503 (request id rid-8)"
    assert (ei.value.status, ei.value.body) == (503, "")
    p.close()


def test_an_error_body_in_bad_utf8_with_the_key_in_it(raw):
    body = f'{{"error": {{"message": "cl\xe9 refus\xe9e: {KEY}"}}}}'.encode("latin-1")
    srv = raw(("close", response("400 Bad Request", {"Content-Type": "application/json"}, body)))
    p = openai(srv.url)
    with pytest.raises(BadRequest) as ei:
        p.complete([user("q")])
    assert str(ei.value) == "openai: HTTP 400: cl\ufffd refus\ufffde: <redacted>"
    assert KEY not in ei.value.body and ei.value.body.endswith('<redacted>"}}')
    p.close()


# -- construction ------------------------------------------------------------------------------------
def test_provider_defaults_and_the_base_url_without_its_trailing_slash():
    p = OpenAIProvider("m", base_url="http://127.0.0.1:9/v1/", api_key="k", context_window=4096)
    assert p.base_url == "http://127.0.0.1:9/v1" and p.timeout == 60.0 and p.max_retries == 2
    assert p.context_window == 4096 and p.model == "m"
    assert OpenAIProvider("m", base_url="http://h/v1///", api_key="k").base_url == "http://h/v1"
    assert OpenAIProvider("m", base_url="http://h/XX/", api_key="k").base_url == "http://h/XX"  # only slashes go
    assert OpenAIProvider("m", base_url="http://h/v1", api_key="k", max_retries=-3).max_retries == 0
    assert OpenAIProvider("m", base_url="http://h/v1", api_key="k").context_window is None


def test_one_verified_tls_context_per_process(monkeypatch):
    import ssl

    monkeypatch.setattr(http, "_ssl_ctx", None)  # as in a fresh process
    ctx = http._ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert http._ssl_context() is ctx


def test_the_probe_asks_for_its_own_model_in_a_list_of_several(raw):
    listing = {"object": "list", "data": [{"id": "m1", "owned_by": "llamacpp", "meta": {"n_ctx": 1000}},
                                          {"id": "m2", "owned_by": "llamacpp", "meta": {"n_ctx": 2000}}]}
    srv = raw(("close", response("200 OK", {"Content-Type": "application/json"}, json.dumps(listing).encode())))
    p = OpenAIProvider("m2", base_url=srv.url + "/v1", api_key=KEY)
    assert p.probe_window() == (2000, "llama.cpp /v1/models")
    p.close()


def test_each_probe_request_is_bounded_by_what_is_left_of_the_probes_timeout(refserver):
    refserver.like_llama_server(4096)
    p = OpenAIProvider("ref-model", base_url=refserver.openai_url, api_key="k", timeout=60)
    sent: list = []
    request = p.client.request

    def spy(*a, **kw):
        sent.append(kw.get("timeout"))
        return request(*a, **kw)

    p.client.request = spy
    assert p.probe_window(timeout=0.5) == (4096, "llama.cpp /v1/models")
    assert len(sent) == 1 and sent[0] is not None and 0 < sent[0] <= 0.5  # not the client's 60 s
    p.close()


# -- a 404 on the path, or a refusal for a missing key, said in the user's terms (issue 24) --
def test_anthropic_with_the_openai_style_local_url_and_no_key_says_the_path_not_the_model(refserver):
    """OCW_BASE_URL set for llama-server's OpenAI wire (…/v1), provider anthropic, no key:
    the server answers 404 for /v1/v1/messages. The message names the path, says no key is
    set and the server did not ask for one, and the hint gives the right base URL."""
    p = AnthropicProvider("m", base_url=refserver.openai_url, api_key=None)
    with pytest.raises(BadRequest) as ei:
        p.complete([user("hi")])
    msg = ei.value.user_message()
    assert msg == (f"anthropic: HTTP 404: the server has no {refserver.url}/v1/v1/messages; no API key is set "
                   "(ANTHROPIC_API_KEY) and the server did not ask for one — for provider anthropic the base URL is "
                   f"the server's root without /v1 (ocw adds /v1/messages): set OCW_BASE_URL={refserver.url}, "
                   "then check with %ocw doctor")
    assert "check the model name" not in msg and "\n" not in msg and ei.value.status == 404
    p.close()
    p = AnthropicProvider("m", base_url=refserver.anthropic_url, api_key=None)  # the hint's URL works, keyless
    assert p.complete([user("hi")]).content == [{"type": "text", "text": "echo: hi"}]
    p.close()


def test_a_404_that_names_the_model_keeps_the_model_hint_and_a_keyed_404_says_nothing_of_keys(refserver):
    refserver.script(status=404)  # "The model does not exist."
    p = OpenAIProvider("nope", base_url=refserver.openai_url, api_key="sk-test-0000000000000000")
    with pytest.raises(BadRequest) as ei:
        p.complete([user("hi")])
    assert "The model does not exist." in str(ei.value) and "check the model name" in ei.value.hint
    p.close()
    p = OpenAIProvider("m", base_url=refserver.url, api_key="sk-test-0000000000000000")  # no /v1
    with pytest.raises(BadRequest) as ei:
        p.complete([user("hi")])
    assert str(ei.value) == f"openai: HTTP 404: the server has no {refserver.url}/chat/completions"
    # what the server said is kept, not replaced: its request id and body, and its own error as the cause
    assert ei.value.request_id == "req_0002" and json.loads(ei.value.body)["error"]["message"] == "bad path or body"
    assert isinstance(ei.value.__cause__, BadRequest) and ei.value.__cause__.request_id == "req_0002"
    assert str(ei.value.__cause__) == "openai: HTTP 404: bad path or body (request id req_0002)"
    assert ei.value.hint.startswith(f"an OpenAI-compatible base URL usually ends in /v1 (ocw adds /chat/completions): "
                                    f"try OCW_BASE_URL={refserver.url}/v1")
    p.close()


@pytest.mark.parametrize("status", [401, 403])
def test_a_local_server_that_refuses_for_a_key_is_told_to_need_one(refserver, status):
    from ocw.text.errors import AuthError

    refserver.script(status=status)
    p = AnthropicProvider("m", base_url=refserver.anthropic_url, api_key=None)
    with pytest.raises(AuthError) as ei:
        p.complete([user("hi")])
    assert ei.value.hint == (f"the server at {refserver.url} needs an API key and none is set: set ANTHROPIC_API_KEY "
                             "or %config Ocw.api_key")
    assert "check the model name" not in ei.value.user_message()
    p.close()
    refserver.script(status=status)  # with a key set, the usual hint: check the key
    p = AnthropicProvider("m", base_url=refserver.anthropic_url, api_key="sk-ant-test-000000000000")
    with pytest.raises(AuthError) as ei:
        p.complete([user("hi")])
    assert "none is set" not in ei.value.hint and "API key" in ei.value.hint
    p.close()


def test_served_model_asks_with_a_two_second_bound_by_default():
    """`%ocw doctor` and the model guess wait at most 2 s for a server's model list (a local
    server that hangs must not hold a cell); the bound reaches the request itself."""
    p = OpenAIProvider("m", base_url="http://127.0.0.1:9/v1", api_key=None)
    sent = []
    p._probe_fetch = lambda method, url, body, timeout: sent.append((method, url, timeout)) or {
        "data": [{"id": "served"}]}
    assert p.served_model() == "served"
    assert sent == [("GET", "http://127.0.0.1:9/v1/models", 2.0)]
    assert p.served_model(timeout=0.5) == "served" and sent[-1][2] == 0.5
    p.close()
