"""What both HTTP providers share: the client, retries, error mapping, SSE streaming.

Why one module: the retry rules and the status → error mapping are policy (they
decide whether a turn compacts, waits or fails), so they must be identical for
OpenAI-compatible servers and for Anthropic. The provider modules only convert
messages and parse their own events; the mapping itself is ``wire_errors.py``.

Rules (DESIGN.md §7):
- 413, or a 400/422 saying the context is too long → ContextOverflowError with
  the window and prompt size the server stated, never retried (the session
  compacts and retries once itself).
- 401/403 → AuthError; other 4xx → BadRequest; a 5xx saying the request itself
  is invalid → BadRequest. None of these is retried.
- 408/409/429/5xx/529 and connect failures (refused, timed out) are retried
  with exponential backoff and jitter, at most ``max_retries`` times; a
  ``Retry-After`` header is honored when it is at most ``MAX_RETRY_AFTER``
  seconds (a longer wait is reported, not slept through: a notebook cell
  should not hang for an hour).
- A request that fails on a reused keep-alive connection before any byte of
  the response arrived (the server had closed it: "Server disconnected
  without sending a response", a reset) is sent once more on a fresh
  connection, without backoff and outside ``max_retries``: the server never
  saw it, and llama-cpp-python drops its kept-alive connection after an
  empty stream.
- Retries happen only before the first byte of a body; a stream that breaks
  midway raises (the partial reply was already shown, replaying it would lie).
- A stream that ends cleanly with no event at all (llama-cpp-python's answer to
  an over-long streamed prompt), or with an empty reply (no text, no tool call:
  what LiteLLM makes of that stream), is asked again once without streaming, to
  learn the real error or get the reply (``_resend_unstreamed``).
- Every error carries status, request id and body text, with the API key
  scrubbed out of all of them (``ocw.text.secrets``).
"""
from __future__ import annotations

import contextlib
import json
import logging
import random
import ssl
import threading
import time
from typing import Any, Iterator

import httpx

from ocw.text.errors import AuthError, BadRequest, MalformedResponse, ProviderConnectionError, ProviderError, ProviderTimeout, RateLimitError, ServerError
from ocw.text.secrets import Secret, install_log_filter, mask_credentials
from ocw.providers import probe
from ocw.providers.registry import key_env_of
from ocw.providers.base import Reply, StreamCallback
from ocw.providers.sse import SSEDecoder, SSEEvent
from ocw.providers.wire_errors import MAX_BODY_CHARS, error_for_payload, error_for_status, parse_retry_after, request_id_of, retry_after_of, server_message

log = logging.getLogger("ocw.providers")

MAX_RETRY_AFTER = 60.0  # seconds; a longer Retry-After is raised, not slept
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# Failures of a send on a reused connection that mean "the server had closed it".
STALE_CONNECTION_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


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


def warm_tls() -> None:
    """Build the process's TLS context ahead of the first request (see _ssl_context)."""
    _ssl_context()


def _sleep(seconds: float) -> None:
    """The one place backoff sleeps; tests patch it (``ocw.providers.http._sleep``)."""
    time.sleep(seconds)


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with jitter for retry number ``attempt`` (0-based)."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * (2**attempt))
    return ceiling * (0.5 + random.random() / 2)


class _ConnectionTrace:
    """httpx's ``trace`` request extension: did this request open a new connection?"""

    __slots__ = ("new_connection",)

    def __init__(self) -> None:
        self.new_connection = False

    def __call__(self, event: str, info: dict) -> None:
        if event.startswith(("connection.connect_tcp.", "connection.connect_unix_socket.")):
            self.new_connection = True


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
        install_log_filter()

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

    def _reply_from_json(self, doc: dict, response: httpx.Response) -> Reply:
        """A non-streamed reply document → Reply (raises the typed error it may carry)."""
        raise NotImplementedError

    def _models_url(self) -> str:
        """Where the OpenAI-style model list is (a probe's first stop)."""
        raise NotImplementedError

    def _api_root(self) -> str:
        """The server's root URL, under which /props, /api/show etc. live."""
        return self.base_url

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
        fresh_connection_tried = False
        while True:
            retryable, wait = False, None
            trace = _ConnectionTrace()
            try:
                request = self.client.build_request(
                    "POST", url, json=payload, headers=self._headers(), extensions={"trace": trace}
                )
                log.debug("%s POST %s (attempt %d, stream=%s)", self.name, url, attempt + 1, stream)
                response = self.client.send(request, stream=True)
            except STALE_CONNECTION_ERRORS as exc:
                if trace.new_connection or fresh_connection_tried:
                    raise self._error(f"connection to {url} failed: {exc}", ProviderConnectionError) from exc
                # The server had closed the kept-alive connection: it never saw this request.
                log.info("%s: the reused connection was closed by the server (%s); sending again on a fresh one",
                         self.name, type(exc).__name__)
                fresh_connection_tried = True
                self._discard_client()
                continue
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
                err = self._explained(url, error_for_status(
                    response.status_code, body, response.headers, provider=self.name, secret=self._key
                ))
                wait = retry_after_of(response.headers)
                retryable = self._retryable(err) and (wait is None or wait <= MAX_RETRY_AFTER)
            if not retryable or attempt >= self.max_retries:
                raise err
            delay = min(wait, MAX_RETRY_AFTER) if wait is not None else backoff_delay(attempt)
            log.info("%s: %s; retry %d/%d in %.2f s", self.name, type(err).__name__, attempt + 1, self.max_retries, delay)
            _sleep(delay)
            attempt += 1

    def _explained(self, url: str, err: ProviderError) -> ProviderError:
        """A refusal said in the user's terms where ocw knows better than the server's words:
        a 401/403 with no key set says the server needs one; a 404 that names no model
        means the URL has no such path (the base URL's ``/v1`` is wrong for this wire
        format), not "check the model name" — whether a key is set is said too, so a
        missing key is never blamed on the model."""
        env = key_env_of(self.name)
        if isinstance(err, AuthError) and not self._key.get():
            err.hint = f"the server at {mask_credentials(self.base_url)} needs an API key and none is set: set {env} or %config Ocw.api_key"
        elif err.status == 404 and isinstance(err, BadRequest) and "model" not in server_message(err.body or "").lower():
            keyless = "" if self._key.get() else f"; no API key is set ({env}) and the server did not ask for one"
            explained = BadRequest(f"{self.name}: HTTP 404: the server has no {mask_credentials(url)}{keyless}",
                                   hint=self._path_hint(), status=err.status, request_id=err.request_id, body=err.body)
            explained.__cause__ = err
            return explained
        return err

    def _path_hint(self) -> str:
        """What the base URL should look like for this wire format (a 404 on its path):
        each wire format knows its own (OpenAIProvider, AnthropicProvider)."""
        raise NotImplementedError

    @staticmethod
    def _retryable(err: ProviderError) -> bool:
        """408/409/429/5xx/529 yes (the caller bounds Retry-After); overflow, auth and
        every BadRequest never, a 500 that calls the request invalid included."""
        if not isinstance(err, (ServerError, RateLimitError, ProviderTimeout)):
            return False
        return err.status in RETRY_STATUSES or (err.status or 0) >= 500

    def _resend_unstreamed(self, path: str, payload: dict, emit: StreamCallback) -> Reply:
        """The stream ended cleanly with no event, or with an empty reply: send the same request once
        without streaming. Its error is raised (llama-cpp-python's 400 with the
        window and prompt size); its reply is emitted once, as a stream would
        have (thinking, text, each tool_use), and returned with its usage."""
        log.info("%s: the stream brought no reply (no event, or no text and no tool call); asking once more without streaming", self.name)
        doc, response = self._post_json(path, payload)
        reply = self._reply_from_json(doc, response)
        for block in reply.content:
            kind = block.get("type")
            if kind == "thinking" and block.get("thinking"):
                emit("thinking", block["thinking"])
            elif kind == "text" and block.get("text"):
                emit("text", block["text"])
            elif kind == "tool_use":
                emit("tool_use", block)
        return reply

    # -- the window, from the server's own endpoint --------------------------
    def probe_window(self, timeout: float = 2.0) -> tuple[int, str] | None:
        """(tokens, source label) from the server's own endpoint, or None; never
        raises, never contacts the official hosts, bounded by ``timeout`` (probe.py)."""
        try:
            return probe.probe_window(
                self._probe_fetch, models_url=self._models_url(), root=self._api_root(),
                model=self.model, timeout=timeout,
            )
        except Exception as exc:  # a window not learned, never a failed turn
            log.debug("%s: window probe failed: %s", self.name, type(exc).__name__)
            return None

    def served_model(self, timeout: float = 2.0) -> str | None:
        """The model a local or other server lists as its own (GET its model list), or
        None; never raises, never asks the official hosts (probe.served_model)."""
        return probe.served_model(self._probe_fetch, models_url=self._models_url(), timeout=timeout)

    def _probe_fetch(self, method: str, url: str, body: Any, timeout: float) -> dict | None:
        response = self.client.request(method, url, json=body, headers=self._headers(), timeout=timeout)
        if response.status_code != 200:
            return None
        doc = response.json()
        return doc if isinstance(doc, dict) else None

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
