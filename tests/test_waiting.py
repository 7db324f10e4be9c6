"""The tests' deadline loops (tests/waiting.py): they return as soon as the condition holds and
fail, naming what did not happen, once the deadline has passed."""
from __future__ import annotations

import itertools

import pytest

from waiting import until, wait_for


def test_wait_for_is_true_on_the_poll_the_condition_holds():
    polls = itertools.count(1)
    assert wait_for(lambda: next(polls) >= 3, timeout=5.0, poll=0.001) is True
    assert next(polls) == 4  # asked exactly three times


def test_wait_for_is_false_past_the_deadline_after_one_last_ask():
    asks = []
    assert wait_for(lambda: asks.append(1), timeout=0.01, poll=0.001) is False
    assert len(asks) >= 2


def test_until_returns_the_conditions_value():
    values = iter([None, 0, "", ["the rows"]])
    assert until(lambda: next(values), "the rows", timeout=5.0, poll=0.001) == ["the rows"]


def test_until_fails_in_one_line_naming_what_did_not_happen():
    with pytest.raises(pytest.fail.Exception, match=r"^the idle close did not happen within 0\.02 s$"):
        until(lambda: False, "the idle close", timeout=0.02, poll=0.001)
