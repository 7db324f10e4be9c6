"""Overflow recognised in every phrasing, with the numbers the server stated.

Bodies are literal: the llama.cpp and llama-cpp-python ones were observed on the
real servers (../shared/realserver/README.md); the others are the wordings the
projects document or their users report."""
from __future__ import annotations

import json

import pytest

from ocw.text.errors import BadRequest, ContextOverflowError, RateLimitError, ServerError
from ocw.providers.overflow import OverflowInfo, parse_overflow, says_overflow
from ocw.providers.wire_errors import error_for_payload, error_for_status
from ocw.text.secrets import Secret

LLAMA_SERVER = ('{"error":{"code":400,"message":"request (2108 tokens) exceeds the available context size (2048 tokens), '
                'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2108,"n_ctx":2048}}')
LLAMA_CPP_PYTHON = ('{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, you requested 6196 '
                    'tokens (2100 in the messages, 4096 in the completion). Please reduce the length of the messages or '
                    'completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}')

# (name, status, body, limit, prompt_tokens)
OVERFLOWS = [
    ("llama.cpp server", 400, LLAMA_SERVER, 2048, 2108),
    ("llama.cpp fields only", 400, '{"error":{"code":400,"message":"the request exceeds the available context size, try '
     'increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}', 4096, 5000),
    ("llama.cpp older wording", 400, '{"error":{"code":400,"message":"the request exceeds the available context size. '
     'try increasing the context size or enable context shift","type":"invalid_request_error"}}', None, None),
    ("llama-cpp-python", 400, LLAMA_CPP_PYTHON, 2048, 2100),
    ("openai messages resulted in", 400, '{"error":{"message":"This model\'s maximum context length is 8192 tokens. '
     'However, your messages resulted in 10000 tokens. Please reduce the length of the messages.","type":'
     '"invalid_request_error","param":"messages","code":"context_length_exceeded"}}', 8192, 10000),
    ("openai requested without split", 400, '{"error":{"message":"This model\'s maximum context length is 4097 tokens, '
     'however you requested 5000 tokens. Please reduce your prompt; or completion length.","type":'
     '"invalid_request_error","code":"context_length_exceeded"}}', 4097, None),
    ("openai responses wording", 400, '{"error":{"message":"Your input exceeds the context window of this model. Please '
     'adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}',
     None, None),
    ("vllm input tokens", 400, '{"object":"error","message":"This model\'s maximum context length is 32768 tokens. '
     'However, your request has 40000 input tokens. Please reduce the length of the input messages.","type":'
     '"BadRequestError","param":null,"code":400}', 32768, 40000),
    ("vllm max_tokens too large", 400, '{"object":"error","message":"\'max_tokens\' or \'max_completion_tokens\' is too '
     'large: 8192. This model\'s maximum context length is 8192 tokens and your request has 1210 input tokens '
     '(8192 > 8192 - 1210).","type":"BadRequestError","param":null,"code":400}', 8192, 1210),
    ("vllm prompt length", 400, '{"error":{"message":"This model\'s maximum prompt length is 4000 tokens. However, your '
     'request has 4100 prompt tokens. Please reduce the length of the prompt."}}', 4000, 4100),
    ("openrouter", 400, '{"error":{"message":"This endpoint\'s maximum context length is 8192 tokens. However, you '
     'requested about 12000 tokens (10000 of text input, 2000 in the output). Please reduce the length of either one, '
     'or use the \\"middle-out\\" transform to compress your prompt automatically.","code":400}}', 8192, 10000),
    ("deepseek", 400, '{"error":{"message":"This model\'s maximum context length is 65536 tokens. However, you requested '
     '70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or '
     'completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}', 65536, 70000),
    ("anthropic", 400, '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 '
     'tokens > 200000 maximum"}}', 200000, 210000),
    ("anthropic with max_tokens", 400, '{"type":"error","error":{"type":"invalid_request_error","message":"input length '
     'and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try '
     'again"}}', 200000, 188240),
    ("bedrock / vertex", 400, '{"type":"error","error":{"type":"invalid_request_error","message":"Input is too long for '
     'requested model."}}', None, None),
    ("tgi total", 422, '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 1244 '
     '`inputs` tokens and 1000 `max_new_tokens`","error_type":"validation"}', 2048, 1244),
    ("tgi inputs", 422, '{"error":"Input validation error: `inputs` must have less than 1024 tokens. Given: 1168",'
     '"error_type":"validation"}', 1024, 1168),
    ("lm studio", 400, '{"error":"Trying to keep the first 6269 tokens when context the overflows. However, the model is '
     'loaded with context length of only 4096 tokens, which is not enough. Try to load the model with a larger context '
     'length, or provide a shorter input"}', 4096, 6269),
    ("mistral", 400, '{"object":"error","message":"Prompt contains 10000 tokens and 0 draft tokens, too large for model '
     'with 8192 maximum context length","type":"invalid_request_error","param":null,"code":null}', 8192, 10000),
    ("cohere", 400, '{"message":"too many tokens: total number of tokens in the prompt exceeds the limit of 4081. Try '
     'using a shorter prompt or enable prompt truncating."}', 4081, None),
    ("gemini", 400, '{"error":{"code":400,"message":"The input token count (1043256) exceeds the maximum number of tokens '
     'allowed (1048576).","status":"INVALID_ARGUMENT"}}', 1048576, 1043256),
    ("xai", 400, '{"code":"Client specified an invalid argument","error":"This model\'s maximum prompt length is 131072 '
     'but the request contains 150000 tokens."}', 131072, 150000),
    ("moonshot", 400, '{"error":{"message":"Invalid request: Your request exceeded model token limit: 8192","type":'
     '"invalid_request_error"}}', 8192, None),
    ("gateway input over window", 422, '{"error":{"message":"Input length 9000 exceeds the context window of 8192 '
     'tokens"}}', 8192, 9000),
    ("gateway counting input tokens", 400, '{"error":"Request too long: 121692 input tokens over the limit of 46112"}',
     46112, 121692),
    ("413 with a message", 413, '{"error":{"message":"The prompt is too long for this model","type":"request_too_large"}}',
     None, None),
]

NOT_OVERFLOWS = [
    ("invalid tool schema", 400, '{"error":{"message":"Invalid schema for function \'read\': In context=(\'properties\', '
     '\'path\'), schema must have a \'type\' key.","type":"invalid_request_error","param":"tools[0].function.parameters",'
     '"code":"invalid_function_parameters"}}', BadRequest),
    ("completion cap", 400, '{"error":{"message":"max_tokens is too large: 128000. This model supports at most 16384 '
     'completion tokens, whereas you provided 128000.","type":"invalid_request_error","param":"max_tokens","code":null}}',
     BadRequest),
    ("one string too long", 400, '{"error":{"message":"Invalid \'messages[3].content\': string too long. Expected a string '
     'with maximum length 1048576, but got a string with length 2097152 instead.","type":"invalid_request_error",'
     '"param":"messages[3].content","code":"string_above_max_length"}}', BadRequest),
    ("anthropic output cap", 400, '{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > '
     '64000, which is the maximum allowed number of output tokens for claude-sonnet-4-20250514"}}', BadRequest),
    ("unknown model", 404, '{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.",'
     '"type":"invalid_request_error","param":null,"code":"model_not_found"}}', BadRequest),
    ("empty 400", 400, "", BadRequest),
    ("429 too many tokens", 429, '{"error":{"message":"Too many tokens in the last minute, slow down","type":"rate_limit"}}',
     RateLimitError),
    ("429 tokens per minute", 429, '{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per '
     'min (TPM): Limit 30000, Used 29000, Requested 5000. Please try again in 2s.","type":"tokens","code":'
     '"rate_limit_exceeded"}}', RateLimitError),
    ("500 too many tokens", 500, '{"error":{"message":"too many tokens in flight","type":"server_error"}}', ServerError),
    ("500 naming the window", 500, '{"error":{"message":"failed to load the model: the maximum context length is not '
     'available","type":"server_error"}}', ServerError),
    ("503 prompt is too long", 503, "prompt is too long: upstream busy", ServerError),
    ("413 tokens per minute (groq)", 413, '{"error":{"message":"Request too large for model `llama3-70b-8192` in '
     'organization `org_x` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 9000, please '
     'reduce your message size and try again.","type":"tokens","code":"rate_limit_exceeded"}}', RateLimitError),
]


@pytest.mark.parametrize("name, status, body, limit, prompt", OVERFLOWS, ids=[c[0] for c in OVERFLOWS])
def test_every_phrasing_is_overflow_with_its_numbers(name, status, body, limit, prompt):
    err = error_for_status(status, body, {"x-request-id": "req_1"}, provider="p")
    assert type(err) is ContextOverflowError
    assert (err.limit, err.prompt_tokens) == (limit, prompt)
    assert (err.status, err.body, err.request_id) == (status, body, "req_1")
    assert parse_overflow(body) == OverflowInfo(limit, prompt)


@pytest.mark.parametrize("name, status, body, cls", NOT_OVERFLOWS, ids=[c[0] for c in NOT_OVERFLOWS])
def test_ordinary_refusals_are_not_overflow(name, status, body, cls):
    err = error_for_status(status, body, {}, provider="p")
    assert type(err) is cls and not isinstance(err, ContextOverflowError)


@pytest.mark.parametrize("status", [400, 413, 422])
def test_overflow_statuses(status):
    body = '{"error":{"message":"prompt is too long: 9 tokens > 8 maximum"}}'
    assert type(error_for_status(status, body)) is ContextOverflowError


@pytest.mark.parametrize("status, cls", [(401, "AuthError"), (404, "BadRequest"), (409, "ServerError"),
                                         (429, "RateLimitError"), (500, "ServerError"), (502, "ServerError")])
def test_overflow_words_outside_the_overflow_statuses_are_not_overflow(status, cls):
    body = '{"error":{"message":"This model\'s maximum context length is 8 tokens; too many tokens"}}'
    assert type(error_for_status(status, body)).__name__ == cls


def test_bare_413_is_overflow_without_numbers():
    err = error_for_status(413, "")
    assert type(err) is ContextOverflowError and (err.limit, err.prompt_tokens) == (None, None)


def test_parse_takes_numbers_with_thousands_separators_and_ignores_zero():
    assert parse_overflow("prompt is too long: 210,000 tokens > 200,000 maximum") == OverflowInfo(200000, 210000)
    assert parse_overflow("This model's maximum context length is 0 tokens") == OverflowInfo(None, None)
    assert parse_overflow("") == OverflowInfo(None, None) and parse_overflow(None) == OverflowInfo(None, None)
    assert not says_overflow("") and not says_overflow(None)


# -- in-stream errors -------------------------------------------------------------------
@pytest.mark.parametrize("err, cls, limit, prompt", [
    ({"type": "request_too_large", "message": "Request too large"}, ContextOverflowError, None, None),
    ({"type": "invalid_request_error", "message": "prompt is too long: 300000 tokens > 200000 maximum"},
     ContextOverflowError, 200000, 300000),
    (json.loads(LLAMA_SERVER)["error"], ContextOverflowError, 2048, 2108),
    ({"message": "the request exceeds the available context size", "type": "exceed_context_size_error"},
     ContextOverflowError, None, None),
    ({"type": "rate_limit_error", "message": "too many tokens per minute"}, RateLimitError, None, None),
    ({"code": 429, "message": "too many tokens"}, RateLimitError, None, None),
    ({"code": 500, "message": "maximum context length is unknown"}, ServerError, None, None),
    ({"type": "overloaded_error", "message": "Overloaded"}, ServerError, None, None),
    ({"type": "invalid_request_error", "message": "bad tool id"}, BadRequest, None, None),
])
def test_in_stream_errors(err, cls, limit, prompt):
    e = error_for_payload(err, provider="p", status=200, body=json.dumps(err))
    assert type(e) is cls
    if cls is ContextOverflowError:
        assert (e.limit, e.prompt_tokens) == (limit, prompt)


# -- the server's words are read before a key is scrubbed -------------------------------
@pytest.mark.parametrize("key", ["x", "e", "EMPTY", "ollama"])
def test_short_dummy_keys_leave_the_servers_words_intact(key):
    err = error_for_status(400, LLAMA_SERVER, provider="p", secret=Secret(key))
    assert type(err) is ContextOverflowError and (err.limit, err.prompt_tokens) == (2048, 2108)
    assert "request (2108 tokens) exceeds the available context size (2048 tokens)" in str(err)
    assert err.body == LLAMA_SERVER and "<redacted>" not in str(err)


def test_a_real_key_inside_an_overflow_body_is_masked_and_the_overflow_still_recognised():
    key = "sk-test-0123456789abcdefXYZ"
    body = LLAMA_CPP_PYTHON.replace("Please reduce", f"Key {key}. Please reduce")
    err = error_for_status(400, body, provider="p", secret=Secret(key))
    assert type(err) is ContextOverflowError and (err.limit, err.prompt_tokens) == (2048, 2100)
    assert key not in str(err) and key not in err.body and "<redacted>" in err.body


def test_overflow_recognised_when_the_key_is_part_of_the_marker():
    # A key equal to a word the classifier needs: classification happens first.
    key = "maximum context length"
    err = error_for_status(400, LLAMA_CPP_PYTHON, provider="p", secret=Secret(key))
    assert type(err) is ContextOverflowError and (err.limit, err.prompt_tokens) == (2048, 2100)
    assert key not in str(err)


def test_500_saying_the_request_is_invalid_is_a_bad_request():
    body = ('{"error":{"message":"7 validation errors:\\n  {\'type\': \'string_type\', \'loc\': (\'body\', \'messages\', 1, '
            '\'ChatCompletionRequestAssistantMessage\', \'content\'), \'msg\': \'Input should be a valid string\', '
            '\'input\': None}","type":"internal_server_error","param":null,"code":null}}')
    err = error_for_status(500, body, provider="p")
    assert type(err) is BadRequest and err.status == 500 and "not sent again" in err.hint
    assert type(error_for_status(500, '{"error":{"message":"1 validation error for ChatCompletionRequest"}}')) is BadRequest
    assert type(error_for_status(500, '{"error":{"message":"validation of the cache failed"}}')) is ServerError
