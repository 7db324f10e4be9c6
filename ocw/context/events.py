"""A tiny synchronous event bus, one per session.

Data flows one way: session → events → widgets/notebook. Listeners run in the
emitting thread, in order; a listener that raises is logged and skipped so a
broken widget can never break a turn or a compaction.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("ocw")

Listener = Callable[[str, dict], Any]

# Event names used across ocw.
COMPACTION_STARTED = "compaction_started"
COMPACTION_FINISHED = "compaction_finished"
COMPACTION_FAILED = "compaction_failed"
COMPACTION_PROGRESS = "compaction_progress"  # before each summarizer call: {call, calls, elapsed}
OCCUPANCY_CHANGED = "occupancy_changed"  # payload: the occupancy dict
HEAD_MOVED = "head_moved"  # rewind, branch switch
TURN_FINISHED = "turn_finished"


class EventBus:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it."""
        self._listeners.append(fn)

        def unsubscribe() -> None:
            try:
                self._listeners.remove(fn)
            except ValueError:
                pass

        return unsubscribe

    def has_listeners(self) -> bool:
        return bool(self._listeners)

    def emit(self, name: str, payload: dict | None = None) -> None:
        payload = dict(payload or {})
        for fn in list(self._listeners):
            try:
                fn(name, payload)
            except Exception:  # pragma: no cover - defensive, logged
                log.exception("ocw event listener failed for %s", name)
