"""What both HTTP providers share: the client, retries, error mapping, SSE streaming.

Why one module: the retry rules and the status → error mapping are policy (they
decide whether a turn compacts, waits or fails), so they must be identical for
OpenAI-compatible servers and for Anthropic. The provider modules only convert
messages and parse their own events.

Rules (DESIGN.md §7):
- 413, or a 400 saying the context is too long → ContextOverflowError, never
  retried (the session compacts and retries once itself).
- 401/403 → AuthError, never retried.
- 408/409/429/5xx/529 and connect failures are retried with exponential backoff
  and jitter, at most ``max_retries`` times; a ``Retry-After`` header is honored
  when it is at most ``MAX_RETRY_AFTER`` seconds (a longer wait is reported, not
  slept through: a notebook cell should not hang for an hour).
- Retries happen only before the first byte of a body; a stream that breaks
  midway raises (the partial reply was already shown, replaying it would lie).
- Every error carries status, request id and body text, with the API key
  scrubbed out of all of them.
"""
from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import random
import ssl
import threading
import time
from typing import Any, Iterator

import httpx

from ..errors import (
    AuthError,
    BadRequest,
    ContextOverflowError,
    MalformedResponse,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
)
from .sse import SSEDecoder, SSEEvent

log = logging.getLogger("ocw.providers")

MAX_RETRY_AFTER = 60.0  # seconds; a longer Retry-After is raised, not slept
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
MAX_BODY_CHARS = 8000  # error bodies kept on the exception
OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "exceed_context_size",  # llama.cpp server
    "exceeds the available context size",
    "too many tokens",
)


_ssl_lock = threading.Lock()
_ssl_ctx: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """One verified TLS context per process: building one costs ~50 ms, and a
    client is rebuilt after every interrupt."""
    global _ssl_ctx
    with _ssl_lock:
        if _ssl_ctx is None:
            _ssl_ctx = httpx.create_ssl_context()
        return _ssl_ctx


def _sleep(seconds: float) -> None:
    """The one place backoff sleeps; tests patch it (``ocw.providers.http._sleep``)."""
    time.sleep(seconds)


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with jitter for retry number ``attempt`` (0-based)."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * (2**attempt))
    return ceiling * (0.5 + random.random() / 2)


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


class Secret:
    """An API key that never shows itself in a repr, a log line or a traceback."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value or None

    def get(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return "<set>" if self._value else "<unset>"

    __str__ = __repr__

    def scrub(self, text: str | None) -> str | None:
        if text is None or not self._value:
            return text
        return text.replace(self._value, "<redacted>")


def _server_message(body: str) -> str:
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
    body = secret.scrub(body or "")[:MAX_BODY_CHARS]
    rid = request_id_of(headers)
    low = body.lower()
    detail = secret.scrub(_server_message(body))
    msg = f"{provider}: HTTP {status}" + (f": {detail}" if detail else "")
    if rid:
        msg += f" (request id {rid})"
    kw: dict[str, Any] = dict(status=status, request_id=rid, body=body)
    if status == 413 or (status == 400 and any(m in low for m in OVERFLOW_MARKERS)):
        return ContextOverflowError(msg, **kw)
    if status in (401, 403):
        return AuthError(msg, **kw)
    if status == 429:
        return RateLimitError(msg, retry_after=retry_after_of(headers), **kw)
    if status == 408:
        return ProviderTimeout(msg, **kw)
    if status >= 500 or status == 409:
        return ServerError(msg, **kw)
    return BadRequest(msg, **kw)


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
    message = secret.scrub(str(err.get("message") or etype or "error"))
    low = f"{etype} {code} {message}".lower()
    msg = f"{provider}: error in stream: {etype + ': ' if etype else ''}{message}"
    if request_id:
        msg += f" (request id {request_id})"
    kw: dict[str, Any] = dict(status=status, request_id=request_id, body=secret.scrub(body))
    if any(m in low for m in OVERFLOW_MARKERS) or etype == "request_too_large":
        return ContextOverflowError(msg, **kw)
    if "rate_limit" in low:
        return RateLimitError(msg, **kw)
    if etype in ("authentication_error", "permission_error") or "invalid_api_key" in low:
        return AuthError(msg, **kw)
    if etype in ("invalid_request_error", "not_found_error"):
        return BadRequest(msg, **kw)
    if "timeout" in low:
        return ProviderTimeout(msg, **kw)
    return ServerError(msg, **kw)  # overloaded_error, api_error, server_error, unknown


class HTTPProvider:
    """Base of the OpenAI and Anthropic providers: one httpx.Client, retries, streaming."""

    name = "http"
    offline = False
    default_base_url = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        context_window: int | None = None,
    ):
        self.model = model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self._key = Secret(api_key)
        self.timeout = timeout
        self.max_retries = max(0, int(max_retries))
        self.context_window = context_window
        self._client: httpx.Client | None = None

    # -- lifecycle --------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        """Created lazily, and again after an interrupt threw the old one away."""
        if self._client is None:
            self._client = httpx.Client(
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                headers={"user-agent": "ocw"},
                verify=_ssl_context(),
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _discard_client(self) -> None:
        """After a KeyboardInterrupt nothing may stay open: close every pooled socket."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key={self._key!r})"
        )

    @property
    def host(self) -> str:
        """The base URL's host name ("" if the URL cannot be parsed)."""
        try:
            return httpx.URL(self.base_url).host
        except (httpx.InvalidURL, ValueError):
            return ""

    # -- hooks for subclasses -------------------------------------------
    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _payload_error(self, doc: dict, response, raw: str) -> ProviderError:
        """The typed error for an error object sent with a 200 (mid-stream or as JSON)."""
        return error_for_payload(
            doc.get("error", doc),
            provider=self.name,
            status=response.status_code,
            request_id=request_id_of(response.headers),
            body=raw,
            secret=self._key,
        )

    def _error(self, msg: str, cls: type[ProviderError] = MalformedResponse, *, response=None, body=None, **kw):
        """A typed error with the key scrubbed from message and body."""
        rid = request_id_of(response.headers) if response is not None else None
        return cls(
            self._key.scrub(f"{self.name}: {msg}"),
            status=response.status_code if response is not None else None,
            request_id=rid,
            body=self._key.scrub(body)[:MAX_BODY_CHARS] if body else body,
            **kw,
        )

    # -- sending ------------------------------------------------------------
    def _send(self, path: str, payload: dict, *, stream: bool) -> httpx.Response:
        """POST with retries; returns an open 2xx response (caller closes it)."""
        url = self.base_url + path
        attempt = 0
        while True:
            retryable, wait = False, None
            try:
                request = self.client.build_request("POST", url, json=payload, headers=self._headers())
                log.debug("%s POST %s (attempt %d, stream=%s)", self.name, url, attempt + 1, stream)
                response = self.client.send(request, stream=True)
            except httpx.ConnectTimeout as exc:  # nothing was sent: safe to retry
                err: ProviderError = self._error(f"timed out connecting to {url}", ProviderTimeout)
                err.__cause__, retryable = exc, True
            except httpx.TimeoutException as exc:
                raise self._error(f"no answer from {url} within {self.timeout:g} s", ProviderTimeout) from exc
            except httpx.ConnectError as exc:  # nothing was sent: safe to retry
                err = self._error(f"cannot connect to {url}: {exc}", ProviderConnectionError)
                err.__cause__, retryable = exc, True
            except httpx.TransportError as exc:
                raise self._error(f"connection to {url} failed: {exc}", ProviderConnectionError) from exc
            except httpx.InvalidURL as exc:
                raise self._error(f"invalid base URL {self.base_url!r}: {exc}", BadRequest) from exc
            else:
                if response.status_code < 300:
                    return response
                try:
                    body = response.read().decode("utf-8", "replace")
                except httpx.TimeoutException as exc:
                    raise self._error("timed out reading an error body", ProviderTimeout, response=response) from exc
                except httpx.TransportError:
                    body = ""
                finally:
                    response.close()
                err = error_for_status(
                    response.status_code, body, response.headers, provider=self.name, secret=self._key
                )
                wait = retry_after_of(response.headers)
                retryable = self._retryable(err) and (wait is None or wait <= MAX_RETRY_AFTER)
            if not retryable or attempt >= self.max_retries:
                raise err
            delay = min(wait, MAX_RETRY_AFTER) if wait is not None else backoff_delay(attempt)
            log.info("%s: %s; retry %d/%d in %.2f s", self.name, type(err).__name__, attempt + 1, self.max_retries, delay)
            _sleep(delay)
            attempt += 1

    @staticmethod
    def _retryable(err: ProviderError) -> bool:
        """Overflow and auth never; 408/409/429/5xx/529 yes (the caller bounds Retry-After)."""
        if isinstance(err, (ContextOverflowError, AuthError)):
            return False
        return err.status in RETRY_STATUSES or (err.status or 0) >= 500

    def _post_json(self, path: str, payload: dict) -> tuple[dict, httpx.Response]:
        """A non-streaming call: retries, then the parsed JSON body."""
        try:
            response = self._send(path, payload, stream=False)
            try:
                raw = response.read()
            except httpx.TimeoutException as exc:
                raise self._error("timed out reading the response", ProviderTimeout, response=response) from exc
            except httpx.TransportError as exc:
                raise self._error(f"connection dropped: {exc}", ProviderConnectionError, response=response) from exc
            finally:
                response.close()
        except KeyboardInterrupt:
            self._discard_client()
            raise
        text = raw.decode("utf-8", "replace")
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise self._error("response is not JSON", response=response, body=text) from exc
        if not isinstance(doc, dict):
            raise self._error("response is not a JSON object", response=response, body=text)
        return doc, response

    @contextlib.contextmanager
    def _open_stream(self, path: str, payload: dict) -> Iterator[tuple[Iterator[SSEEvent], httpx.Response]]:
        """Yield (events, response); the response is closed on every exit path.

        A KeyboardInterrupt anywhere inside (waiting for headers, reading, or in
        the caller's on_event) also throws the whole connection pool away, so no
        socket stays open behind the user's back.
        """
        try:
            response = self._send(path, payload, stream=True)
        except KeyboardInterrupt:
            self._discard_client()
            raise
        try:
            ctype = response.headers.get("content-type", "")
            if ctype.startswith("application/json"):
                raise self._not_a_stream(response)
            yield self._events(response), response
        except KeyboardInterrupt:
            response.close()
            self._discard_client()
            raise
        finally:
            response.close()

    def _not_a_stream(self, response: httpx.Response) -> ProviderError:
        """A JSON body where an event stream was asked for: an error, or a server
        that ignored ``stream: true``; either way there is no stream to parse."""
        try:
            text = response.read().decode("utf-8", "replace")
        except httpx.HTTPError as exc:
            return self._error(f"could not read the response: {exc}", ProviderConnectionError, response=response)
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("error"):
            return error_for_payload(
                doc["error"], provider=self.name, status=response.status_code,
                request_id=request_id_of(response.headers), body=text, secret=self._key,
            )
        return self._error("expected an event stream, got JSON", response=response, body=text)

    def _events(self, response: httpx.Response) -> Iterator[SSEEvent]:
        decoder = SSEDecoder()
        try:
            for chunk in response.iter_bytes():
                yield from decoder.feed(chunk)
        except httpx.TimeoutException as exc:
            raise self._error("the stream stalled (read timeout)", ProviderTimeout, response=response) from exc
        except httpx.TransportError as exc:
            raise self._error(f"the stream broke off: {exc}", ProviderConnectionError, response=response) from exc
        yield from decoder.close()

    def _parse_data(self, ev: SSEEvent, response: httpx.Response) -> dict:
        """One frame's JSON, or MalformedResponse carrying the frame."""
        try:
            doc = json.loads(ev.data)
        except ValueError as exc:
            raise self._error("unparsable stream frame", response=response, body=ev.data) from exc
        if not isinstance(doc, dict):
            raise self._error("stream frame is not a JSON object", response=response, body=ev.data)
        return doc
