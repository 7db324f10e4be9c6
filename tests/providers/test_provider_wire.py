"""Provider wire details against the loopback server taught the real servers' ways:
overflow with the stated numbers on both wire formats, the empty stream and its
non-streamed re-send, the stale keep-alive connection, what is and is not retried
(counted in requests), Retry-After at its bound, tool-call content, stream usage."""
from __future__ import annotations

import socket
import threading

import pytest
from refserver import user

import ocw.providers.http as http
from ocw.text.errors import BadRequest, ContextOverflowError, MalformedResponse, ProviderConnectionError, ProviderTimeout, RateLimitError, ServerError
from ocw.providers import AnthropicProvider, OpenAIProvider

LONG = "hello world " * 1100  # ~2200 tokens for ocw's estimate


@pytest.fixture
def sleeps(monkeypatch):
    calls: list[float] = []
    monkeypatch.setattr(http, "_sleep", calls.append)
    return calls


@pytest.fixture(params=["openai", "anthropic"])
def wire(request, refserver):
    """(provider, wire name) for each wire format, against the refserver."""
    if request.param == "openai":
        p = OpenAIProvider("ref-model", base_url=refserver.openai_url, api_key="x", timeout=5)
    else:
        p = AnthropicProvider("ref-model", base_url=refserver.anthropic_url, api_key="x", timeout=5)
    yield p, request.param
    p.close()


def collect():
    events: list = []
    return events, lambda kind, data: events.append((kind, data))


TOOL_CALL_SESSION = [
    user("call f"),
    {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "42"}]},
]
TOOLS = [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}}]


# -- overflow with the numbers the server stated ---------------------------------------
def test_llama_server_overflow_states_window_and_prompt(refserver, wire, sleeps):
    p, _ = wire
    refserver.like_llama_server(2048)
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user(LONG)])
    rec = refserver.requests[-1]
    assert len(refserver.requests) == 1 and sleeps == [] and rec.status == 400
    assert ei.value.limit == 2048 and ei.value.prompt_tokens == rec.prompt_tokens > 2048
    assert "exceeds the available context size (2048 tokens)" in str(ei.value)  # key "x" masks nothing
    assert "<redacted>" not in str(ei.value) and "<redacted>" not in ei.value.body


def test_llama_cpp_python_empty_stream_is_resent_unstreamed_and_raises_its_400(refserver, wire, sleeps):
    p, _ = wire
    refserver.like_llama_cpp_python(2048)
    events, on_event = collect()
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user(LONG)], max_tokens=64, on_event=on_event)
    first, second = refserver.requests
    assert first.stream and first.status == 200  # the empty stream
    assert not second.stream and second.status == 400  # the same request, unstreamed
    assert {k: v for k, v in second.body.items() if k not in ("stream", "stream_options")} == \
        {k: v for k, v in first.body.items() if k not in ("stream", "stream_options")}
    assert refserver.dropped == 1  # the re-send met the dropped connection and went again on a fresh one
    assert (ei.value.limit, ei.value.prompt_tokens) == (2048, first.prompt_tokens)
    assert "(%d in the messages, 64 in the completion)" % first.prompt_tokens in str(ei.value)
    assert events == [] and sleeps == []


def test_empty_stream_then_a_reply_is_emitted_once_with_its_usage(refserver, wire):
    p, _ = wire
    refserver.stream_usage = False
    refserver.script(empty_stream=True)
    refserver.script(text="the answer is 42", thinking="let me think")
    events, on_event = collect()
    reply = p.stream([user("q")], on_event=on_event)
    assert reply.text == "the answer is 42"
    second = refserver.requests[1]
    assert len(refserver.requests) == 2 and not second.stream
    assert reply.usage.input_tokens == second.prompt_tokens and reply.usage.output_tokens > 0
    assert events == [("thinking", "let me think"), ("text", "the answer is 42")]  # once each, as a stream would


def test_empty_stream_then_a_tool_call_is_emitted_as_a_stream_would(refserver, wire):
    p, _ = wire
    refserver.script(empty_stream=True)
    refserver.script(tool_calls=[{"name": "f", "input": {"a": 1}}])
    events, on_event = collect()
    reply = p.stream([user("q")], tools=TOOLS, on_event=on_event)
    assert [b["input"] for b in reply.tool_uses] == [{"a": 1}]
    assert [d for k, d in events if k == "tool_use"] == reply.tool_uses
    assert len(refserver.requests) == 2


def test_an_empty_streamed_reply_is_asked_once_unstreamed(refserver, wire, sleeps):
    """Issue 23: a gateway (LiteLLM) turns llama-cpp-python's empty overflow stream into a
    complete stream with no text. Asked once unstreamed, the refusal is seen with its numbers."""
    p, _ = wire
    refserver.script(text="")  # a well-formed stream with an empty reply
    refserver.script(overflow=True)
    refserver.model_window = 2048
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user("q")])
    first, second = refserver.requests
    assert first.stream and first.status == 200 and not second.stream and second.status == 400
    assert ei.value.limit == 2048 and sleeps == []


def test_an_empty_streamed_reply_then_an_answer_is_taken_and_a_nonempty_one_is_not_resent(refserver, wire):
    p, _ = wire
    refserver.script(text="")
    refserver.script(text="the unstreamed answer")
    assert p.stream([user("q")]).text == "the unstreamed answer" and len(refserver.requests) == 2
    refserver.script(text="x")  # one character is a reply: never asked twice
    assert p.stream([user("q")]).text == "x" and len(refserver.requests) == 3
    refserver.script(text="still empty")
    refserver.script(text="")  # only once: an empty unstreamed reply is the turn's to report
    refserver.clear_scripts()
    refserver.script(text="")
    refserver.script(text="")
    assert p.stream([user("q")]).text == "" and len(refserver.requests) == 5


def test_stream_with_events_but_no_end_stays_an_error_and_is_not_resent(refserver, wire):
    p, name = wire
    refserver.script(text="one two three", end_after_chunks=2)
    with pytest.raises(MalformedResponse, match="DONE" if name == "openai" else "message_stop"):
        p.stream([user("x")])
    assert len(refserver.requests) == 1


def test_streamed_reply_without_usage_keeps_usage_unknown(refserver, wire):
    p, _ = wire
    refserver.stream_usage = False
    reply = p.stream([user("hi")])
    assert reply.text == "echo: hi" and reply.usage.input_tokens is None and reply.usage.context_tokens is None
    assert p.complete([user("hi")]).usage.input_tokens == refserver.requests[-1].prompt_tokens > 0


def test_usage_scale_reports_what_a_local_tokenizer_counts(refserver, wire):
    p, _ = wire
    p.stream([user("the quick brown fox jumps over the lazy dog " * 20)])
    plain = refserver.requests[-1].prompt_tokens
    refserver.usage_scale = 1.9
    reply = p.stream([user("the quick brown fox jumps over the lazy dog " * 20)])
    assert reply.usage.input_tokens == refserver.requests[-1].prompt_tokens == round(plain * 1.9)


# -- the stale keep-alive connection -----------------------------------------------------
@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
@pytest.mark.parametrize("method", ["stream", "complete"])
def test_request_on_a_connection_the_server_dropped_is_sent_once_more_on_a_fresh_one(
        refserver, wire, sleeps, reset, method):
    p, _ = wire
    refserver.drop_with_reset = reset  # "Connection reset by peer" / "Server disconnected without sending a response"
    refserver.script(text="first", then_drop=True)
    assert getattr(p, method)([user("a")]).text == "first"
    assert getattr(p, method)([user("b")]).text == "echo: b"
    assert refserver.dropped == 1  # "b" met the dropped connection once...
    assert [r.status for r in refserver.requests] == [200, 200]  # ...and was answered on a fresh one
    assert sleeps == []  # not a backoff retry


def test_after_the_empty_stream_the_next_request_succeeds(refserver, wire, sleeps):
    p, _ = wire
    refserver.script(empty_stream=True)
    refserver.script(text="from the re-send")
    assert p.stream([user("a")]).text == "from the re-send"
    assert p.stream([user("b")]).text == "echo: b"
    assert refserver.dropped == 1 and [r.stream for r in refserver.requests] == [True, False, True]
    assert sleeps == []


def test_stale_connection_retry_happens_once_and_only_on_a_reused_connection(refserver, wire, sleeps):
    p, _ = wire
    p.max_retries = 5
    refserver.script(empty_stream=True)
    refserver.script(text="r")
    p.stream([user("a")])  # leaves a healthy fresh connection
    # Now make every connection die at its next request: the reused one, then the fresh one.
    orig = refserver._handle

    def drop_all(h):
        h.drop_next = True
        return refserver._drop_request(h)

    refserver._handle = drop_all
    try:
        with pytest.raises(ProviderConnectionError):
            p.stream([user("b")])
    finally:
        refserver._handle = orig
    assert refserver.dropped == 1 + 2  # the reused connection, then one fresh connection: no more
    assert sleeps == []  # not a backoff retry


def test_stale_connection_retry_is_bounded_even_when_the_transport_reports_no_connections(
        refserver, wire, sleeps, monkeypatch):
    """Were httpx's trace silent (a custom transport), every connection would look
    reused: still only one extra send, never a loop."""
    p, _ = wire
    monkeypatch.setattr(http._ConnectionTrace, "__call__", lambda self, event, info: None)
    orig = refserver._handle

    def drop_five_then_answer(h):
        if refserver.dropped < 5:
            return refserver._drop_request(h)
        return orig(h)

    refserver._handle = drop_five_then_answer
    with pytest.raises(ProviderConnectionError):
        p.complete([user("a")])
    assert refserver.dropped == 2 and refserver.requests == []


def test_a_fresh_connection_that_is_reset_is_not_retried(refserver, wire, sleeps):
    p, _ = wire
    p.max_retries = 5
    refserver._handle = lambda h: refserver._drop_request(h)
    with pytest.raises(ProviderConnectionError):
        p.complete([user("a")])
    assert refserver.dropped == 1 and sleeps == []


# -- what is retried, counted in requests ------------------------------------------------
@pytest.mark.parametrize("status", [400, 404, 422])
def test_4xx_is_sent_exactly_once(refserver, wire, sleeps, status):
    p, _ = wire
    p.max_retries = 3
    refserver.script(status=status, times=4)
    with pytest.raises(BadRequest) as ei:
        p.stream([user("x")])
    assert len(refserver.requests) == 1 and sleeps == [] and ei.value.status == status


@pytest.mark.parametrize("status, cls", [(500, ServerError), (503, ServerError), (429, RateLimitError),
                                         (408, ProviderTimeout), (409, ServerError)])
def test_retryable_statuses_are_sent_max_retries_plus_one_times(refserver, wire, sleeps, status, cls):
    p, _ = wire
    p.max_retries = 2
    refserver.script(status=status, times=3)
    with pytest.raises(cls):
        p.complete([user("x")])
    assert len(refserver.requests) == 3 and len(sleeps) == 2



def test_a_413_rate_limit_on_tokens_per_minute_is_sent_once(refserver, wire, sleeps):
    """Groq's 413 "Request too large ... tokens per minute": a rate limit, not an overflow,
    and the request alone is over the per-minute limit, so sending it again cannot help."""
    p, _ = wire
    p.max_retries = 3
    body = {"error": {"message": "Request too large for model `llama3` on tokens per minute (TPM): Limit 6000, "
                                 "Requested 9000, please reduce your message size and try again.",
                      "type": "tokens", "code": "rate_limit_exceeded"}}
    refserver.script(status=413, body=body, retry_after=1, times=4)
    with pytest.raises(RateLimitError) as ei:
        p.stream([user("x")])
    assert ei.value.status == 413 and "tokens per minute" in str(ei.value)
    assert len(refserver.requests) == 1 and sleeps == []

def test_500_saying_the_request_is_invalid_is_sent_once(refserver, sleeps):
    """llama-cpp-python answers a null tool-call content with 500; were it ever sent,
    it must not be sent again (ocw itself sends "")."""
    refserver.reject_null_content = True
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="x", max_retries=3)
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}
    with pytest.raises(BadRequest) as ei:
        p._post_json("/chat/completions", body)
    assert ei.value.status == 500 and "validation errors" in str(ei.value)
    assert len(refserver.requests) == 1 and sleeps == []
    p.close()


def test_tool_call_message_goes_out_with_empty_content_and_is_accepted(refserver, sleeps):
    refserver.like_llama_cpp_python(2048)
    p = OpenAIProvider("m", base_url=refserver.openai_url, api_key="x")
    reply = p.stream(TOOL_CALL_SESSION, tools=TOOLS)
    assert reply.text == "echo: 42"
    sent = refserver.requests[-1].body["messages"][1]
    assert sent["role"] == "assistant" and sent["content"] == "" and sent["tool_calls"][0]["id"] == "c1"
    assert len(refserver.requests) == 1 and refserver.requests[-1].status == 200
    p.close()


def test_anthropic_tool_call_message_has_no_empty_text_block(refserver):
    p = AnthropicProvider("m", base_url=refserver.anthropic_url, api_key="x")
    p.stream(TOOL_CALL_SESSION, tools=TOOLS)
    sent = refserver.requests[-1].body["messages"][1]
    assert sent == {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]}
    p.close()


# -- Retry-After at its bound (60 s) ----------------------------------------------------
@pytest.mark.parametrize("seconds, slept", [(59, [59.0]), (60, [60.0]), (61, [])])
def test_retry_after_is_honored_up_to_60_seconds(refserver, wire, sleeps, seconds, slept):
    p, _ = wire
    refserver.script(status=429, retry_after=seconds)
    refserver.script(text="after the wait")
    if slept:
        assert p.stream([user("x")]).text == "after the wait"
        assert len(refserver.requests) == 2
    else:
        with pytest.raises(RateLimitError) as ei:
            p.stream([user("x")])
        assert ei.value.retry_after == 61 and len(refserver.requests) == 1
    assert sleeps == slept


# -- connect failures --------------------------------------------------------------------
@pytest.fixture
def unanswered_port():
    """A port whose listen backlog is full: a new connection's SYN is dropped, so
    connecting times out (a real ConnectTimeout, no mock)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(c)
    threading.Event().wait(0.1)
    yield port
    for c in fillers:
        c.close()
    srv.close()


def test_connect_timeout_is_retried(unanswered_port, sleeps):
    p = OpenAIProvider(base_url=f"http://127.0.0.1:{unanswered_port}/v1", api_key="k", timeout=0.3, max_retries=2)
    attempts: list = []
    orig = p.client.send
    p.client.send = lambda *a, **k: attempts.append(1) or orig(*a, **k)
    with pytest.raises(ProviderTimeout, match="timed out connecting"):
        p.stream([user("x")])
    assert len(attempts) == 3 and len(sleeps) == 2
    p.close()


# -- overflow inside a 200 stream ---------------------------------------------------------
@pytest.mark.parametrize("err, limit, prompt", [
    ({"type": "invalid_request_error", "message": "prompt is too long: 3000 tokens > 2048 maximum"}, 2048, 3000),
    ({"type": "request_too_large", "message": "Request too large"}, None, None),
    ({"type": "exceed_context_size_error", "message": "request (2108 tokens) exceeds the available context size "
      "(2048 tokens), try increasing it"}, 2048, 2108),
])
def test_overflow_inside_a_stream_carries_the_stated_numbers(refserver, wire, sleeps, err, limit, prompt):
    p, _ = wire
    refserver.script(text="a b c", stream_error=err)
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user("x")])
    assert (ei.value.limit, ei.value.prompt_tokens) == (limit, prompt)
    assert len(refserver.requests) == 1 and sleeps == []


def test_rate_limit_inside_a_stream_saying_too_many_tokens_is_not_overflow(refserver, wire):
    p, _ = wire
    refserver.script(text="a b", stream_error={"type": "rate_limit_error", "message": "too many tokens per minute"})
    with pytest.raises(RateLimitError):
        p.stream([user("x")])


def test_context_size_after_a_request_is_input_plus_output_and_unknown_without_input():
    """DESIGN.md §3: what the ring shows after a reply. A reply whose output count is missing
    counts its input alone (not input + 1); no input count: unknown, not a guess."""
    from ocw.providers.base import Usage

    assert Usage(input_tokens=1_000, output_tokens=234).context_tokens == 1_234
    assert Usage(input_tokens=1_000, output_tokens=None).context_tokens == 1_000
    assert Usage(input_tokens=1_000, output_tokens=0).context_tokens == 1_000
    assert Usage(input_tokens=None, output_tokens=50).context_tokens is None


# -- make_provider (ocw/providers/__init__.py): the defaults a notebook's provider is built with ----------
@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_make_provider_retries_a_503_twice_by_default_so_the_server_sees_three_requests(refserver, sleeps, name):
    from ocw.providers import make_provider

    url = refserver.openai_url if name == "openai" else refserver.anthropic_url
    p = make_provider(name, base_url=url, api_key="x")
    try:
        refserver.script(status=503, times=4)
        with pytest.raises(ServerError):
            p.complete([user("x")])
        assert len(refserver.requests) == 3 and len(sleeps) == 2  # max_retries = 2, not 1 or 3
        assert p.timeout == 60.0 and p.client.timeout.read == 60.0  # the read timeout: 60 s
    finally:
        p.close()


@pytest.mark.parametrize("name, default", [("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-5"),
                                           ("offline", "ocw-offline")])
def test_make_provider_asks_for_the_model_named_else_the_providers_default(refserver, name, default):
    from ocw.providers import make_provider

    assert make_provider(name, api_key="x").model == default
    p = make_provider(name, model="my-model", api_key="x")
    assert p.model == "my-model"
    p.close()


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_make_provider_leaves_the_window_unstated_unless_given(name):
    """A provider's `context_window` is the window the notebook stated for it: None when
    none was (the summarizer then plans with the session's), the number when one was;
    the offline model, which has a window of its own, takes its 8,192 when none is stated."""
    from ocw.providers import make_provider

    p = make_provider(name, api_key="x")
    q = make_provider(name, api_key="x", context_window=32_768)
    assert p.context_window is None and q.context_window == 32_768
    p.close()
    q.close()
    assert make_provider("offline").context_window == 8192
    assert make_provider("offline", context_window=4096).context_window == 4096


def test_warm_up_imports_the_providers_module_and_builds_the_tls_context_and_sends_nothing():
    """In a fresh interpreter (the modules a warm-up loads must not be loaded before it)."""
    import subprocess
    import sys

    code = ("import sys, ocw.providers as p, ocw.providers.http as h\n"
            "assert 'ocw.providers.anthropic' not in sys.modules and h._ssl_ctx is None\n"
            "p.warm_up('anthropic')\n"
            "print('ocw.providers.anthropic' in sys.modules, h._ssl_ctx is not None)\n"
            "p.warm_up('offline')\n"
            "print('ocw.providers.offline' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]


def test_warm_up_of_the_offline_model_builds_no_tls_context():
    import subprocess
    import sys

    code = ("import ocw.providers as p, ocw.providers.http as h\n"
            "p.warm_up('offline')\n"
            "print(h._ssl_ctx is None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


@pytest.mark.parametrize("method", ["stream", "complete", "probe_window"])
def test_every_provider_keeps_the_protocols_parameters_and_defaults(method):
    """`Provider` (ocw/providers/base.py) is the contract a caller codes against — a
    custom provider, ocw's turn and summarizer: a call that leaves `system`, `tools`,
    `max_tokens`, `on_event` out means "none" (None) and a probe without `timeout` waits
    2.0 s. Every provider ocw ships accepts each of the Protocol's parameters by the same
    name and kind with the same default, so the Protocol says what a call actually gets."""
    import inspect

    from ocw.providers import OfflineProvider
    from ocw.providers.base import Provider

    expected = {"stream": {"system": None, "tools": None, "max_tokens": None, "on_event": None},
                "complete": {"system": None, "max_tokens": None},
                "probe_window": {"timeout": 2.0}}[method]
    contract = {n: p for n, p in inspect.signature(getattr(Provider, method)).parameters.items() if n != "self"}
    assert {n: p.default for n, p in contract.items() if p.default is not inspect.Parameter.empty} == expected
    for cls in (OpenAIProvider, AnthropicProvider, OfflineProvider):
        own = inspect.signature(getattr(cls, method)).parameters
        for name, p in contract.items():
            assert name in own, f"{cls.__name__}.{method} lacks {name}"
            assert (own[name].kind, own[name].default) == (p.kind, p.default), f"{cls.__name__}.{method}({name})"
