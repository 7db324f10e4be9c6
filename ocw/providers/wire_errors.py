"""A server's error, in its own words → ocw's typed error (DESIGN.md §7).

Pure mapping, no I/O, shared by both wire formats: an HTTP status with its
body (:func:`error_for_status`) or an error object sent inside a 200 stream
(:func:`error_for_payload`).

Invariants:
- Classification reads the server's words before anything is redacted, and a
  :class:`ContextOverflowError` carries the ``limit`` and ``prompt_tokens`` the
  server stated (``overflow.py``); only then are keys scrubbed from the
  message and the body the exception keeps.
- Overflow is only ever a client error: a 413, or a 400/422 whose words say
  the prompt does not fit. A 429 or a 5xx is never an overflow, whatever its
  body says ("too many tokens" in a rate limit), and nor is anything that
  speaks of a rate limit.
- A 5xx whose body says the request itself is invalid (pydantic's
  "N validation errors", which llama-cpp-python answers with 500) is a
  BadRequest: sending the same request again cannot help.
"""
from __future__ import annotations

import email.utils
import json
import re
import time
from typing import Any

import httpx

from ocw.text.errors import AuthError, BadRequest, ContextOverflowError, ProviderError, ProviderTimeout, RateLimitError, ServerError
from ocw.text.secrets import Secret
from ocw.providers.overflow import is_rate_limit_text, parse_overflow, says_overflow

MAX_BODY_CHARS = 8000  # error bodies kept on the exception
OVERFLOW_STATUSES = frozenset({400, 413, 422})
# pydantic / FastAPI: "7 validation errors:", "1 validation error for ChatCompletionRequest"
_INVALID_REQUEST = re.compile(r"\b\d+ validation errors?\b", re.IGNORECASE)
INVALID_REQUEST_HINT = (
    "the server says the request itself is invalid, so it was not sent again; "
    "report it with this message"
)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_of(headers: httpx.Headers | dict | None) -> float | None:
    """The server's requested wait: ``retry-after-ms`` (OpenAI) or ``Retry-After``."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))


def request_id_of(headers: httpx.Headers | dict | None) -> str | None:
    if not headers:
        return None
    return headers.get("x-request-id") or headers.get("request-id")


def server_message(body: str) -> str:
    """The human message inside an error body (OpenAI and Anthropic shapes), else the text."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])[:300]
    if isinstance(err, str):
        return err[:300]
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])[:300]
    return body.strip()[:300]


def _overflow(msg: str, raw: str, **kw: Any) -> ContextOverflowError:
    info = parse_overflow(raw)
    return ContextOverflowError(msg, limit=info.limit, prompt_tokens=info.prompt_tokens, **kw)


def error_for_status(
    status: int,
    body: str,
    headers: httpx.Headers | dict | None = None,
    *,
    provider: str = "provider",
    secret: Secret | None = None,
) -> ProviderError:
    """Map an HTTP error response to ocw's typed error (see module doc)."""
    secret = secret or Secret(None)
    raw = (body or "")[:MAX_BODY_CHARS]
    rid = request_id_of(headers)
    detail = secret.scrub(server_message(raw))
    msg = f"{provider}: HTTP {status}" + (f": {detail}" if detail else "")
    if rid:
        msg += f" (request id {rid})"
    kw: dict[str, Any] = dict(status=status, request_id=rid, body=secret.scrub(raw))
    if status in OVERFLOW_STATUSES and not is_rate_limit_text(raw) and (status == 413 or says_overflow(raw)):
        return _overflow(msg, raw, **kw)
    if status in (401, 403):
        return AuthError(msg, **kw)
    if status == 429 or (status == 413 and is_rate_limit_text(raw)):
        return RateLimitError(msg, retry_after=retry_after_of(headers), **kw)
    if status == 408:
        return ProviderTimeout(msg, **kw)
    if status >= 500 and _INVALID_REQUEST.search(server_message(raw)):
        return BadRequest(msg, hint=INVALID_REQUEST_HINT, **kw)
    if status >= 500 or status == 409:
        return ServerError(msg, **kw)
    return BadRequest(msg, **kw)


def _numeric(code: Any) -> int | None:
    try:
        return int(code)
    except (TypeError, ValueError):
        return None


def error_for_payload(
    err: Any,
    *,
    provider: str,
    status: int | None = None,
    request_id: str | None = None,
    body: str | None = None,
    secret: Secret | None = None,
) -> ProviderError:
    """Map an error object sent inside a 200 stream (Anthropic ``event: error``,
    an OpenAI-compatible ``data: {"error": ...}``) by its type, code and message."""
    secret = secret or Secret(None)
    if not isinstance(err, dict):
        err = {"message": str(err)}
    etype = str(err.get("type") or "")
    code = str(err.get("code") or "")
    raw_message = str(err.get("message") or etype or "error")
    words = f"{etype} {code} {raw_message}"
    low = words.lower()
    message = secret.scrub(raw_message)
    msg = f"{provider}: error in stream: {etype + ': ' if etype else ''}{message}"
    if request_id:
        msg += f" (request id {request_id})"
    kw: dict[str, Any] = dict(status=status, request_id=request_id, body=secret.scrub(body))
    numeric = _numeric(err.get("code"))
    server_side = numeric is not None and (numeric == 429 or numeric >= 500)
    if not server_side and (etype == "request_too_large" or says_overflow(words)) and not is_rate_limit_text(words):
        return _overflow(msg, f"{words} {json.dumps(err, default=str)}", **kw)
    if "rate_limit" in low or numeric == 429:
        return RateLimitError(msg, **kw)
    if etype in ("authentication_error", "permission_error") or "invalid_api_key" in low:
        return AuthError(msg, **kw)
    if etype in ("invalid_request_error", "not_found_error"):
        return BadRequest(msg, **kw)
    if "timeout" in low:
        return ProviderTimeout(msg, **kw)
    return ServerError(msg, **kw)  # overloaded_error, api_error, server_error, unknown
