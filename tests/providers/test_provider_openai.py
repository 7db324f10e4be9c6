"""OpenAI-compatible provider against the loopback reference server, plus the
shared HTTP policy (error mapping, Retry-After, backoff) in ocw.providers.http."""
from __future__ import annotations

import email.utils
import json
import time

import httpx
import pytest
from refserver import pool_connections, user

import ocw.providers.http as http
from ocw.text.errors import AuthError, BadRequest, ContextOverflowError, MalformedResponse, ProviderConnectionError, ProviderTimeout, RateLimitError, ServerError
from ocw.providers import OpenAIProvider, make_provider
from ocw.providers.openai import parse_arguments, to_wire_messages, to_wire_tools
from ocw.text.tokens import count_text

TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


@pytest.fixture
def sleeps(monkeypatch):
    """Backoff sleeps, recorded instead of slept."""
    calls: list[float] = []
    monkeypatch.setattr(http, "_sleep", calls.append)
    return calls


@pytest.fixture
def provider(refserver):
    p = OpenAIProvider(model="gpt-4o-mini", base_url=refserver.openai_url, api_key="sk-test-key", timeout=5)
    yield p
    p.close()


def events_into(store: list):
    return lambda kind, data: store.append((kind, data))


# -- conversion ------------------------------------------------------------------
def test_messages_convert_to_chat_completions_form():
    msgs = [
        user("first"),
        user("second"),  # merged with the one before
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "private"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "a.txt"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "file body", "is_error": False},
            {"type": "text", "text": "and now?"},
        ]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "only thoughts"}]},
    ]
    wire = to_wire_messages(msgs, "be brief")
    assert wire == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first\n\nsecond"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "file body"},
        {"role": "user", "content": "and now?"},
    ]
    assert "private" not in json.dumps(wire)


def test_tool_call_with_raw_arguments_goes_back_verbatim_and_errors_are_marked():
    msgs = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {"_raw": "{bad"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "boom", "is_error": True}]},
    ]
    wire = to_wire_messages(msgs, None)
    assert wire[0] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}
    assert wire[1] == {"role": "tool", "tool_call_id": "c", "content": "Error: boom"}


def test_tools_and_arguments():
    assert to_wire_tools(TOOLS) == [{"type": "function", "function": {
        "name": "read_file", "description": "Read a file", "parameters": TOOLS[0]["input_schema"]}}]
    assert to_wire_tools(None) is None
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("") == {}
    assert parse_arguments('{"a": ') == {"_raw": '{"a": '}
    assert parse_arguments("[1, 2]") == {"_raw": "[1, 2]"}


def test_max_tokens_field_depends_on_host():
    assert OpenAIProvider(base_url="https://api.openai.com/v1").max_tokens_field == "max_completion_tokens"
    assert OpenAIProvider(base_url="http://localhost:11434/v1").max_tokens_field == "max_tokens"


# -- HTTP policy (shared with Anthropic) --------------------------------------------
@pytest.mark.parametrize(
    "status, body, cls",
    [
        (413, "", ContextOverflowError),
        (400, '{"error": {"code": "context_length_exceeded", "message": "x"}}', ContextOverflowError),
        (400, '{"error": {"message": "This model\'s maximum context length is 10 tokens"}}', ContextOverflowError),
        (400, '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9 > 8"}}', ContextOverflowError),
        (400, '{"error": {"message": "unknown parameter"}}', BadRequest),
        (404, "no such model", BadRequest),
        (422, "unprocessable", BadRequest),
        (401, "", AuthError),
        (403, "", AuthError),
        (429, "", RateLimitError),
        (408, "", ProviderTimeout),
        (500, "", ServerError),
        (503, "", ServerError),
        (529, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', ServerError),
    ],
)
def test_status_mapping(status, body, cls):
    err = http.error_for_status(status, body, {"x-request-id": "req_9"}, provider="p")
    assert type(err) is cls
    assert (err.status, err.request_id, err.body) == (status, "req_9", body)
    assert "req_9" in str(err)


def test_retry_after_parsing():
    assert http.parse_retry_after("3") == 3.0
    assert http.parse_retry_after("0.5") == 0.5
    assert http.parse_retry_after(None) is None
    assert http.parse_retry_after("soon") is None
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert http.parse_retry_after(date, now=1_000_000) == pytest.approx(30)
    assert http.parse_retry_after(email.utils.formatdate(1_000_000, usegmt=True), now=1_000_100) == 0.0
    err = http.error_for_status(429, "", {"retry-after": "7"})
    assert isinstance(err, RateLimitError) and err.retry_after == 7.0


def test_backoff_grows_with_jitter_and_is_capped():
    for attempt in range(8):
        ceiling = min(http.BACKOFF_CAP, http.BACKOFF_BASE * 2**attempt)
        values = {http.backoff_delay(attempt) for _ in range(20)}
        assert all(ceiling / 2 <= v <= ceiling for v in values)
        assert len(values) > 1  # jitter


# -- streaming ---------------------------------------------------------------------
def test_streamed_reply_with_usage(refserver, provider):
    refserver.script(text="Hello there, general Kenobi.", cached_tokens=2)
    events: list = []
    reply = provider.stream([user("hi"), {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
                             user("tell me")], system="sys", on_event=events_into(events))
    assert reply.text == "Hello there, general Kenobi."
    assert [k for k, _ in events] == ["text"] * len(events) and len(events) > 1
    assert "".join(d for _, d in events) == reply.text
    rec = refserver.requests[-1]
    assert rec.path == "/v1/chat/completions" and rec.auth
    assert rec.body["stream"] is True and rec.body["stream_options"] == {"include_usage": True}
    assert rec.body["messages"][0] == {"role": "system", "content": "sys"}
    assert reply.usage.input_tokens == rec.prompt_tokens == count_text("sys\nhi\nyo\ntell me")
    assert reply.usage.output_tokens == count_text(reply.text)
    assert reply.usage.cached_tokens == 2
    assert reply.stop_reason == "end_turn"
    assert reply.request_id == rec.request_id
    assert reply.model == "gpt-4o-mini"


def test_streamed_tool_calls_are_assembled(refserver, provider):
    refserver.script(
        text="Reading.",
        thinking="I should read it",
        tool_calls=[
            {"name": "read_file", "input": {"path": "notes/a b.txt", "lines": [1, 2]}},
            {"name": "read_file", "args": '{"path": "oops'},  # bad JSON from the model
        ],
    )
    events: list = []
    reply = provider.stream([user("read")], tools=TOOLS, on_event=events_into(events))
    assert refserver.requests[-1].body["tools"][0]["function"]["name"] == "read_file"
    assert reply.stop_reason == "tool_use"
    assert [b["type"] for b in reply.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert reply.content[0]["thinking"] == "I should read it"
    a, b = reply.tool_uses
    assert a == {"type": "tool_use", "id": "call_ref_1", "name": "read_file", "input": {"path": "notes/a b.txt", "lines": [1, 2]}}
    assert b["input"] == {"_raw": '{"path": "oops'} and b["id"] == "call_ref_2"
    assert [d for k, d in events if k == "tool_use"] == [a, b]
    assert "".join(d for k, d in events if k == "thinking") == "I should read it"


def test_finish_reason_length_maps_to_max_tokens(refserver, provider):
    refserver.script(text="cut", stop_reason="length")
    assert provider.stream([user("x")], max_tokens=5).stop_reason == "max_tokens"
    assert refserver.requests[-1].body["max_tokens"] == 5


@pytest.mark.parametrize("kw", [{"overflow": True}, {"status": 413}])
def test_overflow_is_typed_and_not_retried(refserver, provider, sleeps, kw):
    refserver.script(**kw)
    with pytest.raises(ContextOverflowError) as ei:
        provider.stream([user("x")])
    assert len(refserver.requests) == 1 and sleeps == []
    assert ei.value.status == kw.get("status", 400)
    assert ei.value.request_id == "req_0001"
    if kw.get("overflow"):
        assert "context_length_exceeded" in ei.value.body


def test_overflow_above_threshold_counts_prompt_tokens(refserver, provider):
    refserver.overflow_above = 20
    assert provider.stream([user("short")]).text == "echo: short"
    with pytest.raises(ContextOverflowError, match="maximum context length is 20 tokens"):
        provider.stream([user("word " * 50)])
    assert refserver.requests[-1].prompt_tokens > 20 and refserver.requests[-1].status == 400


def test_429_then_success_honors_retry_after(refserver, provider, sleeps):
    refserver.script(status=429, retry_after=3)
    refserver.script(text="finally")
    assert provider.stream([user("x")]).text == "finally"
    assert sleeps == [3.0]
    assert [r.status for r in refserver.requests] == [429, 200]


def test_retry_after_as_http_date(refserver, provider, sleeps):
    refserver.script(status=429, retry_after=email.utils.formatdate(time.time() + 20, usegmt=True))
    provider.stream([user("x")])
    assert len(sleeps) == 1 and 17 <= sleeps[0] <= 20


def test_retry_after_beyond_the_bound_is_raised_not_slept(refserver, provider, sleeps):
    refserver.script(status=429, retry_after=3600)
    with pytest.raises(RateLimitError) as ei:
        provider.stream([user("x")])
    assert ei.value.retry_after == 3600 and sleeps == [] and len(refserver.requests) == 1


def test_server_errors_exhaust_retries(refserver, provider, sleeps):
    refserver.script(status=500, times=3)
    with pytest.raises(ServerError) as ei:
        provider.stream([user("x")])
    assert len(refserver.requests) == provider.max_retries + 1 == 3
    assert len(sleeps) == 2 and all(0 < s <= http.BACKOFF_CAP for s in sleeps)
    assert ei.value.status == 500 and ei.value.request_id == "req_0003"


def test_auth_error_is_not_retried(refserver, provider, sleeps):
    refserver.script(status=401)
    with pytest.raises(AuthError):
        provider.complete([user("x")])
    assert len(refserver.requests) == 1 and sleeps == []


def test_connect_errors_are_retried_then_raised(sleeps):
    with socket_port() as port:
        pass  # the port is free again: nothing listens there
    p = OpenAIProvider(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=2)
    with pytest.raises(ProviderConnectionError):
        p.stream([user("x")])
    assert len(sleeps) == 2
    p.close()


def test_dropped_stream_raises_and_returns_no_reply(refserver, provider, sleeps):
    refserver.script(text="one two three four five six", drop_after_chunks=3)
    events: list = []
    reply = None
    with pytest.raises((ProviderConnectionError, MalformedResponse)) as ei:
        reply = provider.stream([user("x")], on_event=events_into(events))
    assert reply is None
    assert events, "some text arrived before the drop"
    assert len(refserver.requests) == 1 and sleeps == []  # never retried midway
    assert ei.value.request_id == "req_0001"


def test_stream_without_done_is_malformed(refserver, provider):
    refserver.script(text="one two three", end_after_chunks=2)
    with pytest.raises(MalformedResponse, match="DONE"):
        provider.stream([user("x")])


def test_malformed_frame(refserver, provider):
    refserver.script(text="hello", malformed=True)
    with pytest.raises(MalformedResponse) as ei:
        provider.stream([user("x")])
    assert "half" in ei.value.body


def test_error_object_mid_stream_is_typed(refserver, provider):
    refserver.script(text="a b c d", stream_error={"type": "server_error", "message": "upstream died"})
    with pytest.raises(ServerError, match="upstream died"):
        provider.stream([user("x")])


def test_json_instead_of_a_stream(refserver, provider):
    refserver.script(status=200, body={"error": {"message": "engine overloaded", "type": "server_error"}})
    with pytest.raises(ServerError, match="engine overloaded"):
        provider.stream([user("x")])
    refserver.script(status=200, body={"choices": []})
    with pytest.raises(MalformedResponse, match="expected an event stream"):
        provider.stream([user("x")])


def test_retry_after_ms_and_retry_after_on_503(refserver, provider, sleeps):
    refserver.script(status=503, retry_after=4)
    refserver.script(status=429, body={"error": {"message": "slow down"}}, retry_after="bogus")
    assert provider.stream([user("x")]).text == "echo: x"
    assert sleeps[0] == 4.0 and 0 < sleeps[1] <= 2 * http.BACKOFF_BASE  # unparsable: plain backoff
    assert http.retry_after_of({"retry-after-ms": "250", "retry-after": "9"}) == 0.25


def test_slow_first_byte_times_out(refserver):
    p = OpenAIProvider(base_url=refserver.openai_url, api_key="k", timeout=0.3, max_retries=0)
    refserver.script(delay=3)
    t0 = time.monotonic()
    with pytest.raises(ProviderTimeout):
        p.stream([user("x")])
    assert time.monotonic() - t0 < 2
    p.close()


def test_interrupt_closes_everything(refserver, provider):
    refserver.script(text=" ".join(f"w{i}" for i in range(200)), chunk_delay=0.01)
    client = provider.client
    seen: list = []

    def on_event(kind, data):
        seen.append(data)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        provider.stream([user("x")], on_event=on_event)
    assert len(seen) == 3
    assert pool_connections(client) == [] and client.is_closed
    assert refserver.wait_closed(2.0), f"{refserver.open_connections} connection(s) left open"
    assert provider.stream([user("again")]).text == "echo: again"  # usable afterwards


def test_complete_is_not_streamed(refserver, provider):
    refserver.script(text="summary text", cached_tokens=1)
    reply = provider.complete([user("summarize")], system="S", max_tokens=50)
    rec = refserver.requests[-1]
    assert rec.body["stream"] is False and "stream_options" not in rec.body
    assert reply.text == "summary text" and reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens == rec.prompt_tokens and reply.usage.output_tokens == count_text("summary text")
    assert reply.usage.cached_tokens == 1 and reply.request_id == rec.request_id
    refserver.script(tool_calls=[{"name": "read_file", "input": {"path": "x"}}])
    reply = provider.complete([user("x")], tools=TOOLS)
    assert reply.tool_uses[0]["input"] == {"path": "x"} and reply.stop_reason == "tool_use"


def test_keep_alive_reuses_one_connection(refserver, provider):
    for i in range(3):
        provider.stream([user(f"m{i}")])
    assert len(pool_connections(provider.client)) == 1


def test_make_provider_openai(monkeypatch, refserver):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    p = make_provider("openai", model="m", base_url=refserver.openai_url, timeout=3, max_retries=1)
    assert isinstance(p, OpenAIProvider) and p.max_retries == 1 and p.model == "m"
    p.stream([user("x")])
    assert refserver.requests[-1].auth
    p.close()
    assert p._client is None
    with pytest.raises(ValueError):
        make_provider("nope")


class socket_port:
    """A port that was free a moment ago (for the connect-error test)."""

    def __enter__(self):
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc):
        self.s.close()


def test_httpx_is_the_transport():
    assert isinstance(OpenAIProvider(base_url="http://127.0.0.1:1/v1").client, httpx.Client)


def test_refserver_answers_summary_requests_from_their_own_queue(refserver, provider):
    from ocw.providers import SUMMARY_MARKER

    refserver.script(text="conversation reply")
    refserver.summary_text = "Summary: the user asked twice."
    assert provider.complete([user("old turns")], system=SUMMARY_MARKER + " sum up").text == "Summary: the user asked twice."
    refserver.script_summary(status=500)
    with pytest.raises(ServerError):
        OpenAIProvider(base_url=refserver.openai_url, max_retries=0).complete([user("x")], system=SUMMARY_MARKER)
    assert provider.stream([user("hi")]).text == "conversation reply"  # untouched by the summaries
    assert [r.is_summary for r in refserver.requests] == [True, True, False]
    assert len(refserver.summary_requests()) == 2
    refserver.summary_text = None  # then summary requests share the main queue
    refserver.script(text="from the main queue")
    assert provider.complete([user("x")], system=SUMMARY_MARKER).text == "from the main queue"
    refserver.script(text="never used")
    refserver.clear_scripts()
    assert refserver.pending == 0


def test_complete_returns_the_servers_reply_unstreamed(refserver, provider):
    refserver.script(text="a whole answer")
    reply = provider.complete([user("x")])
    assert reply.text == "a whole answer"
    assert refserver.requests[-1].body["stream"] is False


def test_complete_given_a_200_carrying_an_error_object_raises_that_error(refserver, provider, sleeps):
    """Some OpenAI-compatible servers answer 200 with {"error": …}: its message, typed — not
    "no choices" (which would hide what the server said)."""
    refserver.script(status=200, body={"error": {"message": "engine overloaded", "type": "server_error"}}, times=3)
    with pytest.raises(ServerError, match="engine overloaded"):
        provider.complete([user("x")])


@pytest.mark.parametrize("suffix, hint", [
    ("", "an OpenAI-compatible base URL usually ends in /v1 (ocw adds /chat/completions): try OCW_BASE_URL={root}/v1"),
    ("/v1", "the server does not speak the OpenAI wire at /chat/completions; check OCW_BASE_URL and --provider"),
])
def test_a_404_naming_no_model_says_what_to_try_with_the_base_url_it_has(refserver, sleeps, suffix, hint):
    root = refserver.openai_url.removesuffix("/v1")
    p = OpenAIProvider(model="m", base_url=root + suffix, api_key="sk-test-key", timeout=5)
    try:
        refserver.script(status=404, body={"error": {"message": "Not Found"}})
        with pytest.raises(BadRequest) as ei:
            p.complete([user("x")])
        assert ei.value.hint.startswith(hint.format(root=root)), ei.value.hint
        assert f"HTTP 404: the server has no {root + suffix}/chat/completions" in str(ei.value)
    finally:
        p.close()
