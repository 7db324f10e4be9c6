"""Behind LiteLLM's proxy (issue 23), against the real servers: what a gateway does to
an overflow, and that ocw sees it. Counted in the requests each server logs is not
possible through the gateway, so each test counts what ocw sends (`sends`)."""
from __future__ import annotations

import pytest
from refserver import user

from ocw.providers import OpenAIProvider
from ocw.text.errors import ContextOverflowError

LONG = "hello world " * 1100  # about 4,400 tokens for the tiny model: over its 2,048


def provider(gw) -> OpenAIProvider:
    return OpenAIProvider("tiny", base_url=gw.openai_url, api_key=gw.api_key, timeout=120, max_retries=0)


def test_behind_litellm_llama_cpp_pythons_overflow_is_seen_with_its_window(litellm_llama_cpp_python):
    """LiteLLM turns llama-cpp-python's empty overflow stream into a complete stream with no
    text; ocw asks once unstreamed and gets the 400 with the window."""
    p = provider(litellm_llama_cpp_python)
    try:
        with pytest.raises(ContextOverflowError) as e:
            p.stream([user(LONG)], max_tokens=16)
        assert e.value.limit == 2048
        reply = p.stream([user("Say hi.")], max_tokens=8)  # the next ordinary request is answered
        assert reply.text.strip() or reply.tool_uses
    finally:
        p.close()


def test_behind_litellm_llama_servers_overflow_is_seen_with_its_window(litellm_llama_server):
    p = provider(litellm_llama_server)
    try:
        with pytest.raises(ContextOverflowError) as e:
            p.stream([user(LONG)], max_tokens=16)
        assert e.value.limit == 2048
        reply = p.stream([user("Say hi.")], max_tokens=8)
        assert reply.text.strip() or reply.tool_uses
    finally:
        p.close()


def test_a_proxy_that_exited_is_started_again_and_said(_litellm_llama_cpp_python_proxy, capsys):
    """The session's proxy helper (tests/litellm_proxy.py): a dead proxy is replaced, with
    its exit code and log said on stderr, and the new one answers."""
    import httpx

    proxy = _litellm_llama_cpp_python_proxy
    first = proxy.get()
    assert proxy.get() is first  # alive: the same process
    first.proc.terminate()
    first.proc.wait(30)
    before = proxy.restarts
    second = proxy.get()
    assert second is not first and proxy.restarts == before + 1 and second.proc.poll() is None
    assert "had exited (code" in capsys.readouterr().err
    r = httpx.get(second.openai_url + "/models", headers={"Authorization": f"Bearer {second.api_key}"}, timeout=30)
    assert r.status_code == 200
