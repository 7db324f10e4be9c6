"""ocw/notebook/progress.py (mirror; named test_cell_progress.py because
tests/conversation/test_progress.py holds the basename): "Compacting… 2 of 5 · 3.1 s"
shown in the running cell as ONE display updated in place while a compaction of two or
more summarizer calls runs, cleared when it ends; nothing for a one-call compaction or
a text front end. The displays are what IPython's real display publisher records."""
from __future__ import annotations

import re

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

import ocw
from ocw.context import events as ev
from ocw.notebook import progress


@pytest.fixture
def shown():
    """Every display and display update the cell makes: (text, is_update), in order."""
    shell = InteractiveShell.instance()
    old, shell.display_pub = shell.display_pub, CapturingDisplayPublisher(shell=shell)
    try:
        yield lambda: [(o["data"].get("text/plain"), bool(o["update"])) for o in shell.display_pub.outputs]
    finally:
        shell.display_pub = old


@pytest.fixture
def sess(tmp_path):
    store = ocw.Store(str(tmp_path / "p.duckdb"))
    s = store.create_session(context_window=16_000)
    yield s
    store.close()


def step(call, calls, elapsed=3.14):
    return {"call": call, "calls": calls, "elapsed": elapsed}


def test_a_chunked_compaction_updates_one_display_and_clears_it(sess, shown, fake_summarizer):
    sess.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 400) for i in range(20)])
    unsubscribe = progress.watch(sess, lambda: True)
    fake = fake_summarizer("Summary so far.", context_window=2_000)  # a small summarizer window: several calls
    assert sess.compact(provider=fake).outcome == "succeeded"
    unsubscribe()
    out = shown()
    calls = len(fake.calls)
    assert calls >= 2 and len(out) == calls + 1
    assert out[0][1] is False and [u for _, u in out[1:]] == [True] * calls  # one display, then only updated
    steps = [re.fullmatch(r"Compacting… (\d+) of (\d+) · \d+\.\d s", t) for t, _ in out[:-1]]
    assert [int(m.group(1)) for m in steps] == list(range(1, calls + 1))  # the plan's count may grow as it goes
    assert out[-1] == ("", True)  # cleared when it ends


def test_two_calls_show_and_one_call_shows_nothing(sess, shown):
    progress.watch(sess, lambda: True)
    sess.events.emit(ev.COMPACTION_PROGRESS, step(1, 1))
    sess.events.emit(ev.COMPACTION_PROGRESS, {"call": 1})  # no count of calls: one call
    sess.events.emit(ev.COMPACTION_FINISHED, {})  # nothing shown: nothing to clear
    assert shown() == []
    sess.events.emit(ev.COMPACTION_PROGRESS, step(1, 2))
    sess.events.emit(ev.COMPACTION_PROGRESS, step(2, 2, 0.5))
    sess.events.emit(ev.COMPACTION_FAILED, {"reason": "interrupted"})
    assert shown() == [("Compacting… 1 of 2 · 3.1 s", False), ("Compacting… 2 of 2 · 0.5 s", True), ("", True)]


def test_three_calls_show_in_the_sessions_language(sess, shown):
    sess.lang = "zh"
    progress.watch(sess, lambda: True)
    sess.events.emit(ev.COMPACTION_PROGRESS, step(2, 3))
    assert shown() == [("正在压缩… 第 2 / 3 步 · 3.1 秒", False)]


def test_a_text_front_end_gets_nothing(sess, shown):
    progress.watch(sess, lambda: False)
    sess.events.emit(ev.COMPACTION_PROGRESS, step(1, 5))
    sess.events.emit(ev.COMPACTION_PROGRESS, step(2, 5))
    sess.events.emit(ev.COMPACTION_FINISHED, {})
    assert shown() == []


def test_other_events_leave_the_display_alone(sess, shown):
    progress.watch(sess, lambda: True)
    sess.events.emit(ev.COMPACTION_PROGRESS, step(1, 4))
    sess.events.emit(ev.COMPACTION_STARTED, {})
    assert shown() == [("Compacting… 1 of 4 · 3.1 s", False)]
    sess.events.emit(ev.COMPACTION_FINISHED, {})
    sess.events.emit(ev.COMPACTION_FINISHED, {})  # cleared once
    assert shown()[1:] == [("", True)]
    sess.events.emit(ev.COMPACTION_PROGRESS, step(1, 4))  # the next compaction: a display of its own
    assert shown()[2:] == [("Compacting… 1 of 4 · 3.1 s", False)]
