"""Waiting in a test: a deadline loop on the condition, never a fixed sleep (issue 26)."""
from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 15.0, poll: float = 0.02) -> bool:
    """True as soon as `predicate()` is; False if it still is not at the deadline (asked once more then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return predicate()
