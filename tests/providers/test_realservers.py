"""ocw's providers against the two real servers (tests/realservers.py starts them):
llama.cpp's llama-server (OpenAI and Anthropic wire formats) and the
llama-cpp-python server (OpenAI wire), both with the tiny 2,048-token model.

What each proves, in the servers' own behaviour (../shared/realserver/README.md):
an over-long prompt is a ContextOverflowError carrying the window (2048) and the
prompt size the server counted, on every wire format and through
llama-cpp-python's empty stream; the request after it succeeds; a tool-call
assistant message is accepted; the window probe; usage in and out of streams;
a one-letter dummy key leaves the server's words intact. Requests are counted
with a spy on httpx.Client.send (the real send still runs)."""
from __future__ import annotations

import json
import re

import httpx
import pytest
from refserver import user

import ocw.providers.http as http
from ocw.text.errors import ContextOverflowError
from ocw.providers import AnthropicProvider, OpenAIProvider
from ocw.text.tokens import count_text

LONG = "hello world " * 1100  # ~5,500 tokens for these servers, ~2,200 for ocw's estimate
TOOLS = [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}}]
TOOL_CALL_SESSION = [
    user("call f"),
    {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "42"}]},
]


@pytest.fixture
def sends(monkeypatch):
    """Every request the providers send: (method, path, streamed?, status or exception name)."""
    log: list[tuple] = []
    real = httpx.Client.send

    def spy(self, request, **kw):
        body = json.loads(request.content) if request.content else {}
        entry = [request.method, request.url.path, bool(body.get("stream")), None]
        log.append(entry)
        try:
            response = real(self, request, **kw)
        except httpx.HTTPError as exc:
            entry[3] = type(exc).__name__
            raise
        entry[3] = response.status_code
        return response

    monkeypatch.setattr(httpx.Client, "send", spy)
    monkeypatch.setattr(http, "_sleep", lambda s: None)
    return log


def providers(server, key="x"):
    """(label, provider) for every wire format the server speaks."""
    out = [("openai", OpenAIProvider(server.model, base_url=server.openai_url, api_key=key, timeout=60))]
    if server.anthropic_url:
        out.append(("anthropic", AnthropicProvider(server.model, base_url=server.anthropic_url, api_key=key,
                                                   timeout=60)))
    return out


# -- llama-server ------------------------------------------------------------------------
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_llama_server_overflow_states_2048_and_the_prompt_then_the_next_request_succeeds(llama_server, sends, wire):
    p = dict(providers(llama_server))[wire]
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user(LONG)], max_tokens=8)
    err = ei.value
    assert err.status == 400 and err.limit == 2048 and err.prompt_tokens > 2048
    said = re.search(r"request \((\d+) tokens\) exceeds the available context size \(2048 tokens\)", str(err))
    assert said and int(said.group(1)) == err.prompt_tokens  # key "x" masked nothing in the server's words
    assert json.loads(err.body)["error"]["n_prompt_tokens"] == err.prompt_tokens
    assert "<redacted>" not in str(err) + err.body
    assert [(s[2], s[3]) for s in sends] == [(True, 400)]  # sent once, never retried
    reply = p.stream([user("hi")], max_tokens=4)
    assert reply.usage.input_tokens and reply.usage.input_tokens > 0  # llama-server streams usage
    # streamed and answered; the tiny model's 4 sampled tokens are sometimes no text at all, and a
    # stream with no reply is asked once more unstreamed (http._resend_unstreamed) — never more
    assert [(s[2], s[3]) for s in sends][1:] in ([(True, 200)], [(True, 200), (False, 200)])
    p.close()


def test_llama_server_window_probe(llama_server, sends):
    for _, p in providers(llama_server):
        assert p.probe_window() == (2048, "llama.cpp /v1/models")
        p.close()
    assert [(s[0], s[1], s[3]) for s in sends] == [("GET", "/v1/models", 200)] * 2


def test_llama_server_counts_about_twice_ocws_estimate(llama_server):
    """The measured usage a local tokenizer reports is far above the offline estimate
    (the calibration the engine learns); pinned loosely: more than 1.5x."""
    p = OpenAIProvider(llama_server.model, base_url=llama_server.openai_url, api_key="x")
    text = "The quick brown fox jumps over the lazy dog. " * 20
    reply = p.complete([user(text)], max_tokens=1)
    assert reply.usage.input_tokens > 1.5 * count_text(text)
    p.close()


# -- llama-cpp-python ------------------------------------------------------------------------
def test_llama_cpp_python_empty_stream_is_resent_and_raises_its_400_with_the_numbers(llama_cpp_python_server, sends):
    p = OpenAIProvider(llama_cpp_python_server.model, base_url=llama_cpp_python_server.openai_url, api_key="x")
    events: list = []
    with pytest.raises(ContextOverflowError) as ei:
        p.stream([user(LONG)], max_tokens=8, on_event=lambda k, d: events.append(k))
    err = ei.value
    said = re.search(r"maximum context length is 2048 tokens\. However, you requested \d+ tokens "
                     r"\((\d+) in the messages, 8 in the completion\)", str(err))
    assert said, str(err)  # the server's words, intact with the key "x"
    assert err.status == 400 and err.limit == 2048 and err.prompt_tokens == int(said.group(1)) > 2048
    assert events == []
    # The empty 200 stream, then the same request unstreamed; at most one send meets the
    # connection the server dropped after the empty stream, and is sent again on a fresh one.
    assert sends[0][2:] == [True, 200] and sends[-1][2:] == [False, 400]
    middle = sends[1:-1]
    assert len(middle) <= 1 and all(s[2] is False and s[3] in ("ReadError", "RemoteProtocolError", "WriteError")
                                    for s in middle)
    p.close()


def test_llama_cpp_python_request_right_after_the_empty_stream_succeeds(llama_cpp_python_server, sends):
    p = OpenAIProvider(llama_cpp_python_server.model, base_url=llama_cpp_python_server.openai_url, api_key="x")
    payload = p._payload([user(LONG)], None, None, 8, stream=True)
    with p._open_stream("/chat/completions", payload) as (events, response):
        assert response.status_code == 200 and list(events) == []  # what the server answers, raw
    reply = p.complete([user("hi")], max_tokens=4)  # on the connection the server is dropping
    assert reply.usage.input_tokens and reply.usage.input_tokens > 0
    after = sends[1:]
    assert after[-1][3] == 200 and len(after) <= 2
    assert all(s[3] in ("ReadError", "RemoteProtocolError", "WriteError") for s in after[:-1])
    p.close()


def test_llama_cpp_python_accepts_a_tool_call_message_with_empty_text(llama_cpp_python_server, sends):
    p = OpenAIProvider(llama_cpp_python_server.model, base_url=llama_cpp_python_server.openai_url, api_key="x")
    reply = p.stream(TOOL_CALL_SESSION, tools=TOOLS, max_tokens=4)
    assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
    # accepted (200); a stream whose 4 sampled tokens held no text is asked once more unstreamed
    assert [(s[2], s[3]) for s in sends] in ([(True, 200)], [(True, 200), (False, 200)])
    reply = p.complete(TOOL_CALL_SESSION, tools=TOOLS, max_tokens=4)
    assert reply.usage.input_tokens > 0
    p.close()


def test_llama_cpp_python_streams_no_usage_and_its_unstreamed_reply_has_it(llama_cpp_python_server, sends):
    p = OpenAIProvider(llama_cpp_python_server.model, base_url=llama_cpp_python_server.openai_url, api_key="x")
    streamed = p.stream([user("hi")], max_tokens=4)
    assert streamed.usage.input_tokens is None and streamed.usage.output_tokens is None
    whole = p.complete([user("hi")], max_tokens=4)
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0
    assert [(s[2], s[3]) for s in sends] == [(True, 200), (False, 200)]
    p.close()


def test_llama_cpp_python_has_no_window_endpoint(llama_cpp_python_server, sends):
    p = OpenAIProvider(llama_cpp_python_server.model, base_url=llama_cpp_python_server.openai_url, api_key="x")
    assert p.probe_window() is None
    assert [(s[0], s[1], s[3]) for s in sends] == [("GET", "/v1/models", 200)]  # owned_by "me": nothing more to ask
    p.close()


def test_llama_server_names_its_own_model_and_a_session_without_one_uses_it(llama_server, sends):
    """Issue 24: with no model named, ocw asks the local server which it serves (llama-server
    lists its alias) instead of sending gpt-4o-mini / claude-sonnet-4-5."""
    for _, p in providers(llama_server):
        assert p.served_model() == llama_server.model == "tiny"
        p.close()
    assert [(s[0], s[1], s[3]) for s in sends] == [("GET", "/v1/models", 200)] * 2


def test_a_notebook_with_a_local_base_url_and_no_model_talks_to_llama_servers_own_model(llama_server, ip, monkeypatch,
                                                                                          capsys):
    """The same through the magics: %ocw doctor names the server's model before any cell,
    and the first %%chat session uses it (the request names "tiny", not gpt-4o-mini)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ip.run_line_magic("config", "Ocw.provider = 'openai'")
    ip.run_line_magic("config", f"Ocw.base_url = {llama_server.openai_url!r}")
    capsys.readouterr()
    ip.run_line_magic("ocw", "doctor")
    out = capsys.readouterr().out
    assert "  model:         tiny (the server's own, from its model list)\n" in out, out
    # The tiny random-weights model sometimes ends its reply at once ("empty reply", nothing
    # stored, the new session taken back): ask again — any other error fails the test.
    for prompt in ("hi", "hello there", "tell me about the weather", "what is two plus two", "good morning"):
        r = ip.run_cell(f"%%chat\n{prompt}")
        if r.error_in_exec is None:
            break
        assert "empty reply" in str(r.error_in_exec), r.error_in_exec
    assert r.error_in_exec is None, "five empty replies in a row"
    import ocw

    assert ocw.current_session().model == "tiny"
