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
    return bool(predicate())


def until(predicate, what: str, timeout: float = 30.0, poll: float = 0.01):
    """`predicate()`'s first truthy value, polled up to a deadline; past it the test fails with
    one line naming `what` did not happen (no traceback into the loop)."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            import pytest
            pytest.fail(f"{what} did not happen within {timeout:g} s", pytrace=False)
        time.sleep(poll)
