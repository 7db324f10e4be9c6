"""ocw/notebook/streaming.py (mirror): a reply streaming into a cell — one display updated
in place in a notebook (no more often than every 50 ms, and at least 4× the last render's
cost apart), text as it comes in a terminal — and what an interrupted turn kept.

What the cell shows is what IPython's real display publisher records. The clock is the
one stand-in: the rule is about elapsed time, and a test that waited for real time to
pass would be a timing assumption; here a render "costs" what the publisher adds."""
from __future__ import annotations

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

from ocw.notebook import streaming
from ocw.notebook.streaming import StreamView, interrupted_message


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cell(monkeypatch):
    """(clock, shown): the view's clock, and every display/update as (text/plain, is_update).
    Each display or update the cell makes costs `clock.render` seconds of the clock."""
    clock = Clock()
    clock.render = 0.0
    monkeypatch.setattr(streaming.time, "monotonic", clock)

    class Publisher(CapturingDisplayPublisher):
        def publish(self, data, *args, **kwargs):
            clock.now += clock.render
            return super().publish(data, *args, **kwargs)

    shell = InteractiveShell.instance()
    old, shell.display_pub = shell.display_pub, Publisher(shell=shell)
    try:
        yield clock, lambda: [(o["data"]["text/plain"], bool(o["update"])) for o in shell.display_pub.outputs]
    finally:
        shell.display_pub = old


def test_interrupted_says_what_was_kept():
    assert interrupted_message(0) == "Interrupted: nothing of this turn was saved; run the cell again to resend it."
    assert interrupted_message(1).startswith("Interrupted after 1 tool step: the finished step is saved (calls")
    assert interrupted_message(2).startswith("Interrupted after 2 tool steps: the 2 finished steps are saved (")


def test_updates_wait_more_than_50_ms(cell):
    clock, shown = cell
    clock.now = 0.08  # 0.08 + 0.05 - 0.08 is exactly 0.05 in floats (100.05 - 100 is 0.0499…)
    v = StreamView(rich=True)
    v.on_text("Hello")
    v.on_text(" there")  # the first update: nothing to wait for yet
    clock.now += 0.05
    assert clock.now - 0.08 == 0.05
    v.on_text(",")  # exactly 50 ms after it: not yet
    assert shown() == [("Hello", False), ("Hello there", True)]
    clock.now += 0.001
    v.on_text(" you")
    assert shown()[2:] == [("Hello there, you", True)]
    v.on_text("!")  # too soon to show
    assert len(shown()) == 3
    v.finish()
    assert shown()[3:] == [("Hello there, you!", True)]  # the whole reply, whenever the last update was


def test_a_costly_render_spaces_updates_four_times_its_cost(cell):
    clock, shown = cell
    v = StreamView(rich=True)
    v.on_text("a")
    clock.render = 0.1  # each update takes 100 ms: the next waits 400 ms
    v.on_text("b")
    assert len(shown()) == 2
    clock.now += 0.39
    v.on_text("c")
    assert len(shown()) == 2
    clock.now += 0.02
    v.on_text("d")
    assert shown()[-1] == ("abcd", True) and len(shown()) == 3


def test_a_note_ends_the_reply_in_a_notebook_and_is_printed_without_a_reply(cell, capsys):
    clock, shown = cell
    v = StreamView(rich=True)
    v.on_text("Partial answer")
    v.finish("stopped by you")
    assert shown()[-1] == ("Partial answer\n\n*stopped by you*", True)  # in italics
    StreamView(rich=True).finish("nothing came")
    assert capsys.readouterr().out == "nothing came\n"
    StreamView(rich=True).finish()
    assert capsys.readouterr().out == ""


def test_a_terminal_gets_the_text_as_it_comes_and_lines_around_tool_calls(cell, capsys):
    clock, shown = cell
    v = StreamView(rich=False)
    v.on_text("Let me look")
    v.on_tool({"name": "read", "input": {"p": "a"}}, {"content": "fine"})
    v.on_text("Done.\n")
    v.on_tool({"name": "grep", "input": {}}, {"content": "x", "is_error": True})
    v.on_text("Bye")
    v.finish("(3 steps)")
    assert capsys.readouterr().out == ('Let me look\n🔧 read({"p": "a"}) → ok: fine\nDone.\n'
                                       "🔧 grep({}) → error: x\nBye\n(3 steps)\n")
    assert shown() == []


def test_in_a_notebook_a_tool_call_closes_the_text_above_it(cell):
    clock, shown = cell
    v = StreamView(rich=True)
    v.on_text("Let me")
    v.on_text(" look")
    v.on_text(" closer")  # under 50 ms after the last update: not shown yet
    v.on_tool({"name": "read", "input": {}}, {"content": "fine"})
    v.on_text("Done")
    out = shown()
    assert out[1:3] == [("Let me look", True), ("Let me look closer", True)]  # the text so far, whole, above the call
    assert out[3][0].startswith("🔧 read({}) → ok: fine") and out[4] == ("Done", False)  # then a display of its own


def test_in_a_notebook_a_tool_call_before_any_text_shows_only_the_call(cell):
    clock, shown = cell
    v = StreamView(rich=True)
    v.on_tool({"name": "read", "input": {}}, {"content": "fine"})  # the reply opens with a call: no text to close
    v.on_text("Done")
    out = shown()
    assert len(out) == 2 and out[0][0].startswith("🔧 read({}) → ok: fine") and out[1] == ("Done", False)
