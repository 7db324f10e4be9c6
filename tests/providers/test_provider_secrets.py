"""API keys never leak: not in a repr, an error message, an error body, or a log line."""
from __future__ import annotations

import logging
import socket

import pytest
from refserver import user

import ocw.providers.http as http
from ocw.text.errors import AuthError, ProviderError
from ocw.providers import AnthropicProvider, OpenAIProvider, make_provider

KEY = "sk-test-SECRET123456"
FAULTS = [
    {"status": 401},
    {"status": 403},
    {"overflow": True},
    {"status": 413},
    {"status": 429, "retry_after": 0},
    {"status": 500},
    {"status": 400, "body": {"error": {"message": f"Invalid key {KEY} for this org", "type": "invalid_request_error"}}},
    {"status": 401, "body": f"Bearer {KEY} rejected"},  # a careless proxy echoing the header
    {"text": "x", "malformed": True},
    {"text": "a b c d", "drop_after_chunks": 2},
    {"text": "a b c d", "end_after_chunks": 2},
    {"text": "a b", "stream_error": {"type": "api_error", "message": f"upstream saw key {KEY}"}},
    {"delay": 2},
]


def _providers(server):
    return [
        OpenAIProvider(base_url=server.openai_url, api_key=KEY, timeout=0.3, max_retries=0),
        AnthropicProvider(base_url=server.anthropic_url, api_key=KEY, timeout=0.3, max_retries=0),
    ]


def test_repr_and_attributes_mask_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    for p in (make_provider("openai"), make_provider("anthropic"), OpenAIProvider(api_key=KEY)):
        for text in (repr(p), str(p), repr(vars(p)), str(vars(p))):
            assert KEY not in text and "SECRET" not in text
        assert "api_key=<set>" in repr(p)
    assert "api_key=<unset>" in repr(OpenAIProvider(api_key=None))


def test_errors_never_carry_the_key(refserver, caplog, monkeypatch):
    monkeypatch.setattr(http, "_sleep", lambda s: None)
    caplog.set_level(logging.DEBUG)  # root: ocw, httpx and httpcore at DEBUG
    seen = 0
    for p in _providers(refserver):
        for fault in FAULTS:
            refserver.script(**fault)
            for method in ("stream", "complete"):
                stream_only = fault.get("malformed") or "stream_error" in fault or "_after_chunks" in str(fault)
                if method == "complete":
                    if stream_only:
                        continue
                    refserver.script(**fault)
                with pytest.raises(ProviderError) as ei:
                    getattr(p, method)([user("hello")])
                err = ei.value
                seen += 1
                for text in (str(err), repr(err), err.body or "", err.user_message(), str(err.__cause__ or "")):
                    assert KEY not in text, (fault, type(err).__name__, text)
        p.close()
    assert seen >= 40
    assert all(r.auth for r in refserver.requests)  # the key really was sent each time
    assert caplog.records, "logging was captured"
    assert any(r.name.startswith("httpx") or r.name.startswith("httpcore") for r in caplog.records)
    assert KEY not in caplog.text
    assert all(KEY not in r.getMessage() for r in caplog.records)


def test_auth_error_from_401_is_typed_and_clean(refserver):
    p = OpenAIProvider(base_url=refserver.openai_url, api_key=KEY, max_retries=3)
    refserver.script(status=401)
    with pytest.raises(AuthError) as ei:
        p.stream([user("x")])
    assert ei.value.status == 401 and "invalid_api_key" in ei.value.body
    assert "3456" in ei.value.body and KEY not in ei.value.body  # the server's own masking survives
    assert len(refserver.requests) == 1
    p.close()


def test_server_never_records_key_values(refserver):
    p = AnthropicProvider(base_url=refserver.anthropic_url, api_key=KEY)
    p.stream([user("x")])
    rec = refserver.requests[-1]
    assert rec.auth and KEY not in repr(rec) and "x-api-key" not in rec.headers
    p.close()


def test_no_key_for_official_hosts_fails_before_any_network(monkeypatch):
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)

    def no_network(*a, **k):
        raise AssertionError("a request went out without a key")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    for name in ("openai", "anthropic"):
        p = make_provider(name)
        with pytest.raises(AuthError, match="_API_KEY"):
            p.stream([user("x")])
        with pytest.raises(AuthError):
            p.complete([user("x")])
        p.close()
