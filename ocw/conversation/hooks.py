"""Compaction hooks: `ocw.on("pre_compact", fn)` and `ocw.on("post_compact", fn)`.

pre_compact hooks run after the plan is made and before any summarizer request. Each
gets a `PreCompact`: the trigger, the session, the messages that will be folded
(their ids, roles and tokens), the focus so far. A hook may `veto(reason)` (or return
False) — then nothing is sent and nothing is saved, and the compaction says it was
vetoed — or `add_focus(text)`, which the summarizer then reads with the user's focus.

post_compact hooks run after the summary is saved. Each gets a `PostCompact`: the
summary's id and text, the session memory's text, the figures before → after.

The invariant: a hook can never break a turn or a compaction. Whatever a hook raises
(Exception; an interrupt still stops the cell) is caught here and becomes one line of the compaction's system message,
"pre_compact hook NAME raised TYPE: message; it was skipped" (in the user's language). The registry is per process (hooks are Python callables,
which no store can keep), in registration order; registering the same function twice
for one event keeps one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ocw.text.errors import InvalidArgument

EVENTS = ("pre_compact", "post_compact")
_HOOKS: dict[str, list[Callable]] = {e: [] for e in EVENTS}
MAX_FOCUS_ADDED = 500  # characters a hook may add to the focus (the summarizer reads them)


def _event(event) -> str:
    if event not in EVENTS:
        raise InvalidArgument(f"ocw.on takes one of {', '.join(map(repr, EVENTS))}, not {event!r:.60}")
    return event


def on(event: str, fn: Callable) -> Callable:
    """Run `fn` at `event` ("pre_compact" or "post_compact"); returns `fn` (usable as a decorator
    through functools.partial(ocw.on, "pre_compact"))."""
    if not callable(fn):
        raise InvalidArgument(f"ocw.on({event!r}, fn) takes a function, not {fn!r:.60}")
    hooks = _HOOKS[_event(event)]
    if fn not in hooks:
        hooks.append(fn)
    return fn


def off(event: str, fn: Callable | None = None) -> int:
    """Remove `fn` from `event` (every hook of it when fn is None); returns how many were removed."""
    hooks = _HOOKS[_event(event)]
    gone = [h for h in hooks if fn is None or h == fn]
    for h in gone:
        hooks.remove(h)
    return len(gone)


def registered(event: str) -> list[Callable]:
    return list(_HOOKS[_event(event)])


@dataclass
class PreCompact:
    trigger: str  # "manual" | "auto" | "reactive"
    session: str  # the session's name
    session_id: str
    folded: list[dict]  # the messages that will be folded: {id, role, tokens}
    folded_tokens: int  # the old summary plus those messages: what the new summary replaces
    focus: str | None  # what the summary must keep (the user's, then each hook's additions)
    vetoed: str | None = None  # the reason a hook gave for vetoing
    added: list[str] = field(default_factory=list)

    def veto(self, reason: str = "") -> None:
        self.vetoed = str(reason or "no reason given")[:200]

    def add_focus(self, text: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("add_focus takes the words the summary must keep, as a non-empty string")
        words = " ".join(text.split())
        if sum(map(len, self.added)) + len(words) > MAX_FOCUS_ADDED:
            raise InvalidArgument(f"hooks may add at most {MAX_FOCUS_ADDED} characters to the focus")
        self.added.append(words)
        self.focus = f"{self.focus}; {words}" if self.focus else words


@dataclass(frozen=True)
class PostCompact:
    trigger: str
    session: str
    session_id: str
    summary_id: str
    summary: str  # the summary's prose as stored
    memory: str  # the session memory as the model reads it ("" when it holds nothing)
    tokens_before: int
    tokens_after: int
    folded: int  # how many messages were folded


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _one_line(event: str, fn, e: Exception) -> dict:
    """What the system message says of a hook that raised (ocw.text.i18n's "hook_error")."""
    msg = " ".join(str(e).split())[:160]
    return {"event": event, "name": _name(fn), "error": type(e).__name__ + (f": {msg}" if msg else "")}


def run_pre(info: PreCompact) -> list[dict]:
    """Run the pre_compact hooks in order (stopping at a veto); returns their error lines."""
    errors = []
    for fn in registered("pre_compact"):
        try:
            if fn(info) is False and info.vetoed is None:
                info.veto("")
        except Exception as e:  # a hook never breaks the compaction
            errors.append(_one_line("pre_compact", fn, e))
        if info.vetoed is not None:
            break
    return errors


def run_post(info: PostCompact) -> list[dict]:
    errors = []
    for fn in registered("post_compact"):
        try:
            fn(info)
        except Exception as e:
            errors.append(_one_line("post_compact", fn, e))
    return errors
