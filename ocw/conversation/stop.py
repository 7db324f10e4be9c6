"""A stop asked for while ocw works off the main thread.

The kernel's stop button raises KeyboardInterrupt in the main thread only. JupyterLab
runs a widget's requests in a kernel subshell (a thread of its own), so a compaction
started from the chat widget never saw the stop button. The notebook layer counts each
stop here (ocw/notebook/stop_button.py); a compaction notes the count when it starts
and, before each summarizer call, raises KeyboardInterrupt if it moved — the same path
as an interrupt in a cell: nothing is saved and the compaction says so. A stop pressed
before a compaction started never reaches it (its starting count already includes it).
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_count = 0


def request() -> None:
    global _count
    with _lock:
        _count += 1


def count() -> int:
    return _count


def check(since: int) -> None:
    """Raise KeyboardInterrupt if a stop was asked for after `since` (a `count()`)."""
    if _count != since:
        raise KeyboardInterrupt("stopped")
