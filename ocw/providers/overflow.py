"""What a server says when a prompt does not fit its window, in its own words.

Pure functions over the text of an error (an HTTP error body, or an error
object sent inside a stream): :func:`says_overflow` decides whether the words
mean "the request is larger than the context window"; :func:`parse_overflow`
reads the window the server states (``limit``) and the prompt size it counted
(``prompt_tokens``), each ``None`` when not stated.

Invariant: both read the server's own, unredacted text. Callers classify
before they scrub keys out of it (a one-letter dummy key once turned
"exceeds" into "e<redacted>ceeds" and the overflow was never recognised), and
the HTTP status gate (only 400/413/422 can be an overflow; a 429 or a 5xx that
mentions "too many tokens" is a rate limit or a server fault) is the caller's.

Phrasings known (literal bodies are in tests/providers/test_overflow.py):
- OpenAI, vLLM, llama-cpp-python, DeepSeek, OpenRouter: "This model's maximum
  context length is N tokens. However, you requested M tokens (P in the
  messages, C in the completion)" / "your messages resulted in M tokens" /
  "your request has M input tokens" / "(P of text input, C in the output)";
- llama.cpp server: "request (P tokens) exceeds the available context size
  (N tokens)", with ``n_prompt_tokens`` and ``n_ctx`` fields;
- Anthropic: "prompt is too long: P tokens > N maximum", "input length and
  `max_tokens` exceed context limit: P + C > N", "Input is too long for
  requested model." (no numbers);
- TGI: "`inputs` tokens + `max_new_tokens` must be <= N. Given: P `inputs`
  tokens", "`inputs` must have less than N tokens. Given: P";
- LM Studio: "Trying to keep the first P tokens when context the overflows.
  However, the model is loaded with context length of only N tokens";
- Mistral, Cohere, Gemini, xAI, Moonshot and gateways (see the patterns).
Ollama truncates an over-long prompt to its ``num_ctx`` without an error, so
there is nothing to parse; its window comes from ``probe.py``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"(\d[\d,]*)"


@dataclass(frozen=True)
class OverflowInfo:
    """The window a server stated and the prompt size it counted (None: not stated)."""

    limit: int | None = None
    prompt_tokens: int | None = None


# Words that mean "the request does not fit the context window".
_OVERFLOW = re.compile(
    "|".join(
        (
            r"context_length_exceeded",
            r"maximum context length",
            r"context length exceeded",
            r"prompt is too long",
            r"exceed_context_size",  # llama.cpp's error type
            r"exceeds the available context size",
            r"input is too long for (?:the )?requested model",
            r"too many tokens",
            r"maximum prompt length is",
            r"exceed\w* (?:the |its |this |model'?s? )?(?:available )?(?:context|token) (?:window|limit|length|size)",
            r"exceeds (?:the )?model(?:'s)? limit",
            r"`?inputs`? tokens \+ `?max_new_tokens`? must be <=",  # TGI
            r"`?inputs`? must have less than \d+ tokens",  # TGI
            r"when context the overflows",  # LM Studio
            r"loaded with context length of only",  # LM Studio
            r"maximum number of tokens allowed",  # Gemini
            r"context limit is \d",
            r"input tokens over the limit",
        )
    ),
    re.IGNORECASE,
)
# A rate limit on tokens per minute is not an overflow, whatever else it says
# (Groq answers 413 "Request too large ... on tokens per minute (TPM)").
_RATE_LIMIT = re.compile(r"rate[_ ]limit|tokens per min|per minute|\bTPM\b", re.IGNORECASE)

# (pattern, names of its groups in order): "limit", "prompt", or "" (ignored).
_NUMBERS: tuple[tuple[re.Pattern, tuple[str, ...]], ...] = tuple(
    (re.compile(p, re.IGNORECASE), g)
    for p, g in (
        # llama.cpp server: message and JSON fields
        (rf"request \({_NUM} tokens\) exceeds the available context size \({_NUM} tokens\)", ("prompt", "limit")),
        (rf'"n_prompt_tokens"\s*:\s*{_NUM}', ("prompt",)),
        (rf'"n_ctx"\s*:\s*{_NUM}', ("limit",)),
        # OpenAI, vLLM, llama-cpp-python, DeepSeek, OpenRouter
        (rf"maximum context length is {_NUM}", ("limit",)),
        (rf"\({_NUM} in the messages", ("prompt",)),
        (rf"{_NUM} of text input", ("prompt",)),
        (rf"your messages resulted in {_NUM} tokens", ("prompt",)),
        (rf"your request has {_NUM} (?:input |prompt )?tokens", ("prompt",)),
        # Anthropic
        (rf"prompt is too long: {_NUM} tokens > {_NUM}", ("prompt", "limit")),
        (rf"exceed context limit: {_NUM} \+ {_NUM} > {_NUM}", ("prompt", "", "limit")),
        # TGI
        (rf"must be <= {_NUM}\. Given: {_NUM} `?inputs`? tokens", ("limit", "prompt")),
        (rf"must have less than {_NUM} tokens\. Given: {_NUM}", ("limit", "prompt")),
        # LM Studio
        (rf"keep the first {_NUM} tokens", ("prompt",)),
        (rf"context length of only {_NUM} tokens", ("limit",)),
        # xAI, vLLM prompt cap
        (rf"maximum prompt length is {_NUM}", ("limit",)),
        (rf"request contains {_NUM} tokens", ("prompt",)),
        # Mistral: "Prompt contains P tokens ... too large for model with N maximum context length"
        (rf"prompt contains {_NUM} tokens", ("prompt",)),
        (rf"{_NUM} maximum context length", ("limit",)),
        # Gemini
        (rf"input token count \({_NUM}\) exceeds the maximum number of tokens allowed \({_NUM}\)", ("prompt", "limit")),
        # gateways and others
        (rf"context limit is {_NUM} tokens; prompt=\s*{_NUM}", ("limit", "prompt")),
        (rf"request too long: {_NUM} input tokens over the limit of {_NUM}", ("prompt", "limit")),
        (rf"input length {_NUM} exceeds", ("prompt",)),
        (rf"context window of {_NUM} tokens", ("limit",)),
        (rf"exceeded model token limit: {_NUM}", ("limit",)),
        (rf"exceeds the limit of {_NUM}", ("limit",)),  # Cohere
    )
)


def says_overflow(text: str | None) -> bool:
    """Whether the words say the request does not fit the model's window."""
    if not text:
        return False
    return bool(_OVERFLOW.search(text)) and not _RATE_LIMIT.search(text)


def is_rate_limit_text(text: str | None) -> bool:
    """Whether the words speak of a rate limit (tokens per minute and the like)."""
    return bool(text) and bool(_RATE_LIMIT.search(text))


def _int(s: str) -> int | None:
    try:
        n = int(s.replace(",", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def parse_overflow(text: str | None) -> OverflowInfo:
    """The window and prompt size an overflow error states; the first phrasing
    that names each one wins (see the module doc for the phrasings)."""
    limit = prompt = None
    for pattern, names in _NUMBERS:
        if limit is not None and prompt is not None:
            break
        m = pattern.search(text or "")
        if not m:
            continue
        for name, value in zip(names, m.groups()):
            if name == "limit" and limit is None:
                limit = _int(value)
            elif name == "prompt" and prompt is None:
                prompt = _int(value)
    return OverflowInfo(limit=limit, prompt_tokens=prompt)
