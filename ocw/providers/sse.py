"""An incremental Server-Sent Events decoder (WHATWG HTML §9.2.6), pure, no I/O.

Why not split the body on blank lines? Because the network does not respect
frames: a read can end inside a UTF-8 character, between the ``\\r`` and ``\\n`` of
one line ending, or in the middle of a field name. This decoder is fed raw
bytes chunks exactly as they arrive and keeps whatever is incomplete until the
next chunk, so the providers never see a torn frame.

One deliberate difference from the browser algorithm: at end of stream the
spec discards an event that was not followed by a blank line. Some servers end
the body right after the last ``data:`` line, so :meth:`SSEDecoder.close`
dispatches that final frame instead of silently losing it (the provider then
decides whether the stream was complete).
"""
from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" unless an `event:` field named it
    data: str  # data lines joined with "\n"
    id: str | None = None  # last event id seen so far (it persists across events)
    retry: int | None = None  # reconnection time in ms, if the frame set one


class SSEDecoder:
    """Feed bytes with :meth:`feed`, finish with :meth:`close`; both return events."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""  # decoded text not yet split into complete lines
        self._started = False  # BOM is stripped only at the very start
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self._last_id: str | None = None
        self._retry: int | None = None

    # -- public -----------------------------------------------------------
    def feed(self, chunk: bytes) -> list[SSEEvent]:
        text = self._utf8.decode(chunk)
        return self._consume(text, final=False)

    def close(self) -> list[SSEEvent]:
        """End of stream: flush a pending line and a frame with no trailing blank line."""
        text = self._utf8.decode(b"", final=True)
        out = self._consume(text, final=True)
        if self._buf:  # a last line with no line ending: never blank, so it only sets a field
            line, self._buf = self._buf, ""
            self._line(line)
        ev = self._dispatch()
        if ev is not None:
            out.append(ev)
        return out

    # -- internals --------------------------------------------------------
    def _consume(self, text: str, *, final: bool) -> list[SSEEvent]:
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        buf = self._buf + text
        out: list[SSEEvent] = []
        start = 0
        n = len(buf)
        while start < n:
            cr = buf.find("\r", start)
            lf = buf.find("\n", start)
            if cr == -1 and lf == -1:
                break
            if cr != -1 and (lf == -1 or cr < lf):
                # A lone "\r" at the end may be the first half of "\r\n": wait.
                if cr == n - 1 and not final:
                    break
                end, nxt = cr, (cr + 2 if cr + 1 < n and buf[cr + 1] == "\n" else cr + 1)
            else:
                end, nxt = lf, lf + 1
            ev = self._line(buf[start:end])
            if ev is not None:
                out.append(ev)
            start = nxt
        self._buf = buf[start:]
        return out

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment (servers use these as keep-alives)
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
            self._has_data = True
        elif field == "id":
            if "\x00" not in value:
                self._last_id = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        # any other field is ignored, as the spec says
        return None

    def _dispatch(self) -> SSEEvent | None:
        event, self._event = self._event, ""
        retry, self._retry = self._retry, None
        if not self._has_data:
            self._data = []
            return None
        data = "\n".join(self._data)
        self._data = []
        self._has_data = False
        return SSEEvent(event or "message", data, self._last_id, retry)


def iter_sse(chunks: Iterable[bytes]) -> Iterator[SSEEvent]:
    """Decode a whole iterable of byte chunks (convenience for tests and simple callers)."""
    dec = SSEDecoder()
    for chunk in chunks:
        yield from dec.feed(chunk)
    yield from dec.close()
