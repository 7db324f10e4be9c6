"""A server's error → ocw's typed error, exactly (ocw/providers/wire_errors.py, overflow.py).

tests/providers/test_overflow.py checks the classification of every phrasing; this file pins
what the user reads and what the error carries: the one-line message word for word,
the status, request id and body, and the server's own message picked out of each
body shape (OpenAI, Anthropic, a bare string, plain text), cut at 300 characters.
"""
from __future__ import annotations

import datetime
import json

import pytest

from ocw.text.errors import AuthError, BadRequest, ContextOverflowError, ProviderTimeout, RateLimitError, ServerError
from ocw.providers.overflow import OverflowInfo, parse_overflow
from ocw.providers.wire_errors import error_for_payload, error_for_status, request_id_of, retry_after_of, server_message
from ocw.text.secrets import Secret

LONG = "x" * 299 + "yz"  # 301 characters: the 300th is "y"


# -- the server's own message --------------------------------------------------------------
@pytest.mark.parametrize("body, message", [
    ('{"error":{"message":"The model does not exist.","type":"invalid_request_error"}}', "The model does not exist."),
    ('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "Overloaded"),
    ('{"error":"model not loaded"}', "model not loaded"),  # a bare string (llama.cpp, Ollama)
    ('{"message":"upstream failed","code":502}', "upstream failed"),  # a top-level message (gateways)
    ('{"error":{"type":"x"},"message":"outer"}', "outer"),  # an error without a message: the outer one
    ('{"error":{"type":"x"}}', '{"error":{"type":"x"}}'),  # no message anywhere: the body
    ('{"error":{"message":""},"detail":1}', '{"error":{"message":""},"detail":1}'),
    ("[1, 2]", "[1, 2]"),  # JSON, not an object
    ('"just a string"', '"just a string"'),
    ("  Bad Gateway\n", "Bad Gateway"),  # not JSON: the text, stripped
    ("", ""),
])
def test_server_message_of_each_body_shape(body, message):
    assert server_message(body) == message


@pytest.mark.parametrize("body", [
    json.dumps({"error": {"message": LONG}}),
    json.dumps({"error": LONG}),
    json.dumps({"message": LONG}),
    LONG,
    " " + LONG + " ",
    json.dumps({"error": {"type": LONG}}),  # JSON with no message: the body itself
])
def test_server_message_is_cut_at_300_characters(body):
    expected = body.strip()[:300] if body.startswith('{"error": {"type"') else LONG[:300]
    assert server_message(body) == expected and len(expected) == 300


def test_a_body_of_exactly_300_characters_is_kept_whole():
    text = "m" * 300
    assert server_message(text) == text and server_message(json.dumps({"error": {"message": text}})) == text


# -- error_for_status: the line the user reads and what the error carries -----------------------
def test_status_error_message_status_request_id_and_body():
    body = '{"error":{"message":"The model does not exist.","type":"invalid_request_error"}}'
    err = error_for_status(404, body, {"x-request-id": "req_42"}, provider="openai")
    assert type(err) is BadRequest
    assert str(err) == "openai: HTTP 404: The model does not exist. (request id req_42)"
    assert (err.status, err.request_id, err.body) == (404, "req_42", body)


def test_status_error_without_words_or_request_id():
    err = error_for_status(502, "")
    assert type(err) is ServerError and str(err) == "provider: HTTP 502"  # the default provider name
    assert (err.status, err.request_id, err.body) == (502, None, "")
    err = error_for_status(503, "   ", {})
    assert str(err) == "provider: HTTP 503" and err.request_id is None


@pytest.mark.parametrize("status, cls", [
    (400, BadRequest), (404, BadRequest), (422, BadRequest), (401, AuthError), (403, AuthError),
    (408, ProviderTimeout), (409, ServerError), (429, RateLimitError), (499, BadRequest),
    (500, ServerError), (529, ServerError),
])
def test_each_status_maps_to_its_class_with_its_line(status, cls):
    err = error_for_status(status, '{"error":{"message":"words"}}', {"request-id": "r1"}, provider="anthropic")
    assert type(err) is cls
    assert str(err) == f"anthropic: HTTP {status}: words (request id r1)"
    assert err.status == status and err.request_id == "r1"


def test_rate_limit_words_make_a_rate_limit_only_on_429_or_413():
    words = '{"error":{"message":"rate limit on tokens per minute"}}'
    assert type(error_for_status(400, words)) is BadRequest
    assert type(error_for_status(422, words)) is BadRequest
    assert type(error_for_status(413, words)) is RateLimitError
    assert type(error_for_status(429, words)) is RateLimitError
    err = error_for_status(429, words, {"retry-after": "7"})
    assert err.retry_after == 7.0
    assert error_for_status(429, words, {}).retry_after is None


def test_a_key_in_the_servers_words_is_scrubbed_from_message_and_body():
    key = "sk-live-0123456789abcdef"
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}."}})
    err = error_for_status(401, body, provider="openai", secret=Secret(key))
    assert str(err) == "openai: HTTP 401: Incorrect API key provided: <redacted>."
    assert key not in err.body and "<redacted>" in err.body


def test_retry_after_headers():
    assert retry_after_of({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_of({"retry-after-ms": "nonsense", "retry-after": "3"}) == 3.0
    assert retry_after_of({"retry-after": "-5"}) == 0.0
    assert retry_after_of({"retry-after-ms": "-5"}) == 0.0
    assert retry_after_of({}) is None and retry_after_of(None) is None


def test_request_id_in_either_header():
    assert request_id_of({"x-request-id": "a"}) == "a"
    assert request_id_of({"request-id": "b"}) == "b"  # Anthropic's name
    assert request_id_of({"x-request-id": "a", "request-id": "b"}) == "a"
    assert request_id_of({}) is None and request_id_of(None) is None


# -- error_for_payload: an error object inside a 200 ----------------------------------------------
def payload(err, **kw):
    return error_for_payload(err, provider="anthropic", status=200, request_id="req_7", body="frame", **kw)


@pytest.mark.parametrize("err, cls, line", [
    ({"type": "overloaded_error", "message": "Overloaded"}, ServerError,
     "anthropic: error in stream: overloaded_error: Overloaded (request id req_7)"),
    ({"message": "something broke"}, ServerError, "anthropic: error in stream: something broke (request id req_7)"),
    ({"type": "api_error"}, ServerError, "anthropic: error in stream: api_error: api_error (request id req_7)"),
    ({}, ServerError, "anthropic: error in stream: error (request id req_7)"),
    ("plain words", ServerError, "anthropic: error in stream: plain words (request id req_7)"),
    ({"type": "rate_limit_error", "message": "slow down"}, RateLimitError,
     "anthropic: error in stream: rate_limit_error: slow down (request id req_7)"),
    ({"code": 429, "message": "slow down"}, RateLimitError, "anthropic: error in stream: slow down (request id req_7)"),
    ({"type": "authentication_error", "message": "bad key"}, AuthError,
     "anthropic: error in stream: authentication_error: bad key (request id req_7)"),
    ({"type": "permission_error", "message": "no access"}, AuthError,
     "anthropic: error in stream: permission_error: no access (request id req_7)"),
    ({"code": "invalid_api_key", "message": "check it"}, AuthError,
     "anthropic: error in stream: check it (request id req_7)"),
    ({"type": "invalid_request_error", "message": "bad tool id"}, BadRequest,
     "anthropic: error in stream: invalid_request_error: bad tool id (request id req_7)"),
    ({"type": "not_found_error", "message": "no model"}, BadRequest,
     "anthropic: error in stream: not_found_error: no model (request id req_7)"),
    ({"type": "server_error", "message": "upstream timeout"}, ProviderTimeout,
     "anthropic: error in stream: server_error: upstream timeout (request id req_7)"),
    ({"code": "timeout", "message": "gave up"}, ProviderTimeout, "anthropic: error in stream: gave up (request id req_7)"),
    ({"type": "request_too_large", "message": "Request too large"}, ContextOverflowError,
     "anthropic: error in stream: request_too_large: Request too large (request id req_7)"),
])
def test_each_in_stream_error_with_its_line(err, cls, line):
    e = payload(err)
    assert type(e) is cls and str(e) == line
    assert (e.status, e.request_id, e.body) == (200, "req_7", "frame")


def test_in_stream_error_without_a_request_id():
    e = error_for_payload({"type": "api_error", "message": "m"}, provider="p")
    assert str(e) == "p: error in stream: api_error: m" and (e.status, e.request_id, e.body) == (None, None, None)


def test_an_overflow_code_alone_makes_an_overflow():
    # The words of the code count: "context_length_exceeded" with a message that says nothing.
    e = payload({"code": "context_length_exceeded", "message": "bad request"})
    assert type(e) is ContextOverflowError


def test_in_stream_overflow_reads_numbers_from_the_error_objects_fields():
    # llama.cpp states the sizes as fields as well as in its message.
    e = payload({"type": "exceed_context_size_error", "message": "the request is too long", "n_prompt_tokens": 5000,
                 "n_ctx": 4096})
    assert type(e) is ContextOverflowError and (e.limit, e.prompt_tokens) == (4096, 5000)


def test_an_error_object_holding_a_value_json_cannot_encode_still_maps():
    e = payload({"type": "request_too_large", "message": "Request too large", "at": datetime.date(2025, 1, 2)})
    assert type(e) is ContextOverflowError


def test_request_too_large_speaking_of_a_rate_limit_is_a_rate_limit():
    e = payload({"type": "request_too_large", "message": "request too large: rate_limit on tokens per minute"})
    assert type(e) is RateLimitError


def test_a_key_inside_an_in_stream_error_is_scrubbed():
    key = "sk-ant-0123456789abcdef"
    e = error_for_payload({"type": "authentication_error", "message": f"invalid x-api-key {key}"}, provider="anthropic",
                          body=f'{{"key": "{key}"}}', secret=Secret(key))
    assert type(e) is AuthError and key not in str(e) and key not in e.body and "<redacted>" in str(e)


# -- the numbers an overflow states --------------------------------------------------------------
def test_a_stated_size_of_one_token_is_a_size():
    assert parse_overflow("This model's maximum context length is 1 tokens") == OverflowInfo(1, None)


def test_a_second_window_statement_is_not_read_as_the_prompt_size():
    text = "This model's maximum context length is 4096 tokens (the context window of 8192 tokens is not loaded)"
    assert parse_overflow(text) == OverflowInfo(4096, None)
