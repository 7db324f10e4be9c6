"""Anthropic Messages provider against the loopback reference server."""
from __future__ import annotations

import time

import pytest
from refserver import pool_connections, user

import ocw.providers.http as http
from ocw.text.errors import AuthError, BadRequest, ContextOverflowError, MalformedResponse, ProviderConnectionError, ProviderTimeout, RateLimitError, ServerError
from ocw.providers import AnthropicProvider, make_provider
from ocw.providers.anthropic import CONTINUE_TEXT, to_wire, to_wire_tools
from ocw.text.tokens import count_text

TOOLS = [{"name": "list_variables", "description": "List kernel variables", "input_schema": {"type": "object", "properties": {}}}]


@pytest.fixture
def sleeps(monkeypatch):
    calls: list[float] = []
    monkeypatch.setattr(http, "_sleep", calls.append)
    return calls


@pytest.fixture
def provider(refserver):
    p = AnthropicProvider(model="claude-test", base_url=refserver.anthropic_url, api_key="sk-ant-test", timeout=5)
    yield p
    p.close()


def events_into(store: list):
    return lambda kind, data: store.append((kind, data))


# -- conversion ------------------------------------------------------------------
def test_messages_convert_to_anthropic_form():
    msgs = [
        {"role": "assistant", "content": [{"type": "text", "text": "I spoke first"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "unsigned, dropped"},
            {"type": "thinking", "thinking": "signed", "signature": "s1"},
            {"type": "text", "text": ""},
            {"type": "tool_use", "id": "t1", "name": "list_variables", "input": {}},
        ]},
        {"role": "user", "content": [{"type": "text", "text": "here you go"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x=1", "is_error": True}]},
        {"role": "system", "content": [{"type": "text", "text": "extra rule"}]},
    ]
    system, wire = to_wire(msgs, "base rule")
    assert system == "base rule\n\nextra rule"
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": CONTINUE_TEXT}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "I spoke first"},
            {"type": "thinking", "thinking": "signed", "signature": "s1"},
            {"type": "tool_use", "id": "t1", "name": "list_variables", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "x=1", "is_error": True},
            {"type": "text", "text": "here you go"},
        ]},
    ]
    assert to_wire_tools(TOOLS) == [{"name": "list_variables", "description": "List kernel variables",
                                     "input_schema": {"type": "object", "properties": {}}}]


# -- streaming -------------------------------------------------------------------
def test_streamed_reply_with_usage_and_headers(refserver, provider):
    refserver.script(text="Bonjour à tous, ça va ?", cached_tokens=3)
    events: list = []
    reply = provider.stream([user("salut")], system="Be kind.", on_event=events_into(events))
    rec = refserver.requests[-1]
    assert rec.path == "/v1/messages" and rec.auth
    assert rec.headers["anthropic-version"] == "2023-06-01"
    assert "x-api-key" not in rec.headers  # recorded only as "auth present"
    assert rec.body["stream"] is True and rec.body["max_tokens"] == 4096 and rec.body["system"] == "Be kind."
    assert reply.text == "Bonjour à tous, ça va ?"
    assert len(events) > 1 and "".join(d for _, d in events) == reply.text
    # the whole prompt: uncached input plus cache reads
    assert reply.usage.input_tokens == rec.prompt_tokens == count_text("Be kind.\nsalut")
    assert reply.usage.cached_tokens == 3
    assert reply.usage.output_tokens == count_text(reply.text)
    assert reply.stop_reason == "end_turn" and reply.request_id == rec.request_id == "req_0001"



def test_cache_writes_count_in_the_input_as_cache_reads_do(refserver, provider):
    """Anthropic's input_tokens leaves out the prompt tokens it read from and wrote to its
    cache; the ring reads the whole prompt: 12 + 3,000 read + 20,000 written = 23,012."""
    from ocw.providers.anthropic import _apply_usage
    from ocw.providers.base import Usage

    u = Usage()
    _apply_usage(u, {"input_tokens": 12, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 20000,
                     "output_tokens": 7})
    assert (u.input_tokens, u.cached_tokens, u.output_tokens) == (23_012, 3_000, 7)
    # The same on the wire, streamed and not: a prompt of over 23,012 tokens, most of it cached.
    prompt = "the nightly load of orders " * 5000
    for call in (provider.stream, provider.complete):
        refserver.script(text="ok", cached_tokens=3000, cache_created=20000)
        reply = call([user(prompt)], system="Be kind.")
        rec = refserver.requests[-1]
        assert rec.prompt_tokens > 23_012
        assert reply.usage.input_tokens == rec.prompt_tokens and reply.usage.cached_tokens == 3000



def test_a_local_server_is_asked_without_a_key_and_anthropic_com_never_is(refserver):
    """No key: a local proxy or server (which may need none) is asked, with no key header;
    api.anthropic.com is not asked at all — one line saying where to set the key."""
    local = AnthropicProvider(model="claude-test", base_url=refserver.anthropic_url, api_key="", timeout=5)
    try:
        refserver.script(text="fine")
        assert local.stream([user("hi")]).text == "fine"
        assert refserver.requests[-1].auth is False
    finally:
        local.close()
    remote = AnthropicProvider(model="claude-test", base_url="https://api.anthropic.com", api_key="", timeout=5)
    try:
        with pytest.raises(AuthError, match="anthropic: no API key; set ANTHROPIC_API_KEY"):
            remote.stream([user("hi")])
    finally:
        remote.close()


def test_streamed_tool_use_and_thinking(refserver, provider):
    refserver.script(text="Checking.", thinking="hmm", tool_calls=[{"name": "list_variables", "input": {"filter": "df*", "n": 3}}])
    events: list = []
    reply = provider.stream([user("what is defined?")], tools=TOOLS, max_tokens=100, on_event=events_into(events))
    assert refserver.requests[-1].body["tools"][0]["name"] == "list_variables"
    assert refserver.requests[-1].body["max_tokens"] == 100
    assert reply.stop_reason == "tool_use"
    assert reply.content[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig-ref"}
    assert reply.tool_uses == [{"type": "tool_use", "id": "toolu_ref_1", "name": "list_variables", "input": {"filter": "df*", "n": 3}}]
    assert [d for k, d in events if k == "tool_use"] == reply.tool_uses
    assert [k for k, _ in events][0] == "thinking"


def test_bad_tool_json_is_kept_raw(refserver, provider):
    refserver.script(tool_calls=[{"name": "list_variables", "args": '{"filter": '}])
    assert provider.stream([user("x")], tools=TOOLS).tool_uses[0]["input"] == {"_raw": '{"filter": '}


@pytest.mark.parametrize("kw, status", [({"overflow": True}, 400), ({"status": 413}, 413)])
def test_overflow_is_typed_and_not_retried(refserver, provider, sleeps, kw, status):
    refserver.script(**kw)
    with pytest.raises(ContextOverflowError) as ei:
        provider.stream([user("x")])
    assert ei.value.status == status and ei.value.request_id == "req_0001"
    assert len(refserver.requests) == 1 and sleeps == []


def test_overflow_above_uses_anthropic_words(refserver, provider):
    refserver.overflow_above = 10
    with pytest.raises(ContextOverflowError, match="prompt is too long") as ei:
        provider.complete([user("many words " * 20)])
    assert '"invalid_request_error"' in ei.value.body


@pytest.mark.parametrize(
    "error, cls",
    [
        ({"type": "invalid_request_error", "message": "prompt is too long: 300000 tokens > 200000 maximum"}, ContextOverflowError),
        ("overloaded_error", ServerError),
        ("api_error", ServerError),
        ("rate_limit_error", RateLimitError),
        ("invalid_request_error", BadRequest),
        ("authentication_error", AuthError),
    ],
)
def test_error_event_mid_stream_is_typed(refserver, provider, sleeps, error, cls):
    refserver.script(text="partial answer", stream_error=error)
    with pytest.raises(cls) as ei:
        provider.stream([user("x")])
    assert type(ei.value) is cls
    assert ei.value.request_id == "req_0001" and '"type": "error"' in ei.value.body
    assert len(refserver.requests) == 1 and sleeps == []  # a stream that started is never replayed


def test_429_then_success_honors_retry_after(refserver, provider, sleeps):
    refserver.script(status=429, retry_after="2")
    refserver.script(text="ok now")
    assert provider.stream([user("x")]).text == "ok now"
    assert sleeps == [2.0] and [r.status for r in refserver.requests] == [429, 200]


def test_overloaded_529_exhausts_retries(refserver, provider, sleeps):
    refserver.script(status=529, times=3)
    with pytest.raises(ServerError) as ei:
        provider.complete([user("x")])
    assert len(refserver.requests) == 3 and len(sleeps) == 2
    assert "overloaded" in ei.value.body


def test_dropped_stream_raises_and_returns_no_reply(refserver, provider):
    refserver.script(text="a b c d e f g h", drop_after_chunks=4)
    events: list = []
    reply = None
    with pytest.raises((ProviderConnectionError, MalformedResponse)):
        reply = provider.stream([user("x")], on_event=events_into(events))
    assert reply is None and events


def test_stream_without_message_stop_is_malformed(refserver, provider):
    refserver.script(text="a b c d", end_after_chunks=5)
    with pytest.raises(MalformedResponse, match="message_stop"):
        provider.stream([user("x")])


def test_malformed_frame(refserver, provider):
    refserver.script(text="hello", malformed=True)
    with pytest.raises(MalformedResponse):
        provider.stream([user("x")])


def test_slow_first_byte_times_out(refserver):
    p = AnthropicProvider(base_url=refserver.anthropic_url, api_key="k", timeout=0.3, max_retries=0)
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
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        provider.stream([user("x")], on_event=on_event)
    assert pool_connections(client) == [] and client.is_closed
    assert refserver.wait_closed(2.0), f"{refserver.open_connections} connection(s) left open"
    assert provider.stream([user("again")]).text == "echo: again"


def test_complete_is_not_streamed(refserver, provider):
    refserver.script(text="short summary", thinking="t")
    reply = provider.complete([user("sum up")], system="S", max_tokens=64)
    rec = refserver.requests[-1]
    assert "stream" not in rec.body and rec.body["max_tokens"] == 64
    assert reply.text == "short summary" and reply.stop_reason == "end_turn"
    assert reply.content[0]["type"] == "thinking"
    assert reply.usage.input_tokens == rec.prompt_tokens and reply.usage.output_tokens == count_text("tshort summary")


def test_make_provider_anthropic_reads_env(monkeypatch, refserver):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    p = make_provider("anthropic", base_url=refserver.anthropic_url)
    assert isinstance(p, AnthropicProvider) and p.base_url == refserver.anthropic_url
    p.stream([user("x")])
    assert refserver.requests[-1].auth
    p.close()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    q = make_provider("anthropic")
    assert q.base_url == "https://api.anthropic.com"
    with pytest.raises(AuthError, match="ANTHROPIC_API_KEY"):  # refused before any network
        q.stream([user("x")])


@pytest.mark.parametrize("suffix, hint", [
    ("/v1", "for provider anthropic the base URL is the server's root without /v1 (ocw adds /v1/messages): "
            "set OCW_BASE_URL={root},"),
    ("", "the server does not speak the Anthropic wire at /v1/messages; check OCW_BASE_URL and --provider"),
])
def test_a_404_naming_no_model_says_what_to_try_with_the_base_url_it_has(refserver, sleeps, suffix, hint):
    root = refserver.anthropic_url.removesuffix("/v1")
    p = AnthropicProvider(model="m", base_url=root + suffix, api_key="sk-ant-test", timeout=5)
    try:
        refserver.script(status=404, body={"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}})
        with pytest.raises(BadRequest) as ei:
            p.complete([user("x")])
        assert ei.value.hint.startswith(hint.format(root=root)), ei.value.hint
    finally:
        p.close()


@pytest.mark.parametrize("strip", ["event_lines", "data_types"])
def test_an_event_is_known_by_its_data_type_else_by_its_event_name(refserver, provider, monkeypatch, strip):
    """Each frame's kind is its data's `type`, else the SSE `event:` name. A relay that sends
    `data:` lines only (SSE then names every event "message") and one whose data leaves
    `type` out both give the same reply as Anthropic's own stream."""
    import json as _json

    frames_of = refserver._anthropic_frames

    def rewritten(r):
        out = []
        for f in frames_of(r):
            head, data = f.decode().split("\ndata: ", 1)
            doc = _json.loads(data)
            if strip == "event_lines":
                out.append(f"data: {_json.dumps(doc)}\n\n".encode())
            else:
                doc.pop("type", None)
                out.append(f"{head}\ndata: {_json.dumps(doc)}\n\n".encode())
        return out

    monkeypatch.setattr(refserver, "_anthropic_frames", rewritten)
    refserver.script(text="one two three four")
    events: list = []
    reply = provider.stream([user("count")], on_event=events_into(events))
    assert reply.text == "one two three four" and reply.stop_reason == "end_turn"
    assert "".join(d for k, d in events if k == "text") == "one two three four"


def test_an_error_object_sent_with_a_200_is_the_servers_typed_error(refserver, provider, sleeps, monkeypatch):
    """A non-streamed reply whose body is Anthropic's error object (a relay answering 200)
    raises the error it names, with the server's own words — not "no content list"."""
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded right now"}}
    monkeypatch.setattr(refserver, "_anthropic_doc", lambda r: err)
    refserver.script(text="unused")
    with pytest.raises(ServerError) as ei:
        provider.complete([user("sum up")])
    assert type(ei.value) is ServerError and "Overloaded right now" in str(ei.value)
    assert "no content list" not in str(ei.value)
