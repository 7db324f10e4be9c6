"""A command's result, shown by each surface its own way (ocw/notebook/results.py),
in a real InteractiveShell (the `ip` fixture), whose display publisher a notebook uses."""
from __future__ import annotations

from IPython.utils.capture import capture_output

from ocw.notebook.results import Result, text


def test_a_terminal_prints_the_text_and_a_notebook_displays_the_html_with_the_text_beside_it(ip):
    r = Result("plain words", html="<p>rich words</p>")
    with capture_output() as cap:
        r.show(rich=False)
    assert cap.stdout == "plain words\n" and cap.outputs == []
    with capture_output() as cap:
        r.show(rich=True)
    assert cap.stdout == ""
    assert [o.data for o in cap.outputs] == [{"text/plain": "plain words", "text/html": "<p>rich words</p>"}]


def test_a_result_without_html_is_printed_on_both_surfaces_and_an_empty_one_prints_nothing(ip):
    for rich in (False, True):
        with capture_output() as cap:
            Result("only text").show(rich=rich)
        assert cap.stdout == "only text\n" and cap.outputs == []
        with capture_output() as cap:
            Result("").show(rich=rich)
        assert cap.stdout == "" and cap.outputs == []
    assert Result("x").bundle() is None


def test_a_widget_is_displayed_in_a_notebook_and_its_text_printed_in_a_terminal(ip):
    class W:
        def _repr_mimebundle_(self, **kw):
            return {"text/plain": "<a widget>"}

    r = Result("<ocw chat: s>", widget=W())
    with capture_output() as cap:
        r.show(rich=True)
    assert [o.data for o in cap.outputs] == [{"text/plain": "<a widget>"}] and cap.stdout == ""
    with capture_output() as cap:
        r.show(rich=False)
    assert cap.stdout == "<ocw chat: s>\n"


def test_text_joins_lines_and_leaves_out_empty_ones():
    assert text("a", "", "b").text == "a\nb"
    assert text("", "").text == ""
