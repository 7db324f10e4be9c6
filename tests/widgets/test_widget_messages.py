"""Issue 25: the chat widget's messages as a hostile front end would send them.

Each message is what the browser sends over the comm (ipywidgets' custom message
carrying anywidget's command request, or a state update), handed to the real
widget of a real InteractiveShell with ocw loaded. Every request is answered once;
a forged `busy` update neither blocks a send nor stays; a name with bidirectional
controls or a million characters is refused in one line, and one stored before
that rule is shown escaped alike in the widget and `%session`."""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError

import ocw
from ocw.text.errors import InvalidArgument


def request(w, content: dict) -> list[dict]:
    """What the widget sends back for one custom message (any number of answers)."""
    sent = []
    w.send = lambda c, buffers=None: sent.append(c)
    try:
        w._handle_custom_msg(content, [])
    finally:
        del w.send
    return sent


def test_an_unknown_or_malformed_command_is_answered(ip):
    ip.run_cell("%%chat\nhello")
    w = ocw.chat()
    for name in ("chat_nope", "send", "", None, 7, "x" * 10_000):
        (answer,) = request(w, {"id": "r1", "kind": "anywidget-command", "name": name, "msg": {}})
        assert answer["id"] == "r1" and answer["kind"] == "anywidget-command-response"
        assert answer["response"]["ok"] is False and "no command" in answer["response"]["error"]
        assert len(answer["response"]["error"]) < 200
    (answer,) = request(w, {"id": "r2", "kind": "anywidget-command", "name": "chat_run", "msg": "not a dict"})
    assert answer["response"]["ok"] is False  # a known command with a bad body: answered too
    w.close()


def test_a_forged_busy_update_is_put_back_and_blocks_nothing(ip):
    ip.run_cell("%%chat\nhello")
    w = ocw.chat()
    w.set_state({"busy": "send"})  # what a front end's model.set("busy", ...) + save_changes() arrives as
    assert w.busy == ""  # the kernel's own state again
    (answer,) = request(w, {"id": "r3", "kind": "anywidget-command", "name": "chat_send",
                            "msg": {"text": "second message"}})
    assert answer["response"]["ok"] is True, answer
    assert len(ocw.current_session().branch()) == 4
    w.close()


@pytest.mark.parametrize("bad,says", [
    ("abc\u202edef", "bidirectional"), ("x\u2066y", "bidirectional"), ("n" * 1_000_000, "at most 1,024"),
    ("a\nb", "one line"),
])
def test_a_session_name_with_bidi_controls_or_too_long_is_refused(ip, bad, says):
    # A magic's line has no newline, and one of a million characters would pay IPython's own
    # $var expansion (quadratic), which %new keeps so that `%new --name $x` works: the magic
    # is tried up to 2,000 characters (tests/notebook/test_bad_input.py), the API with all.
    if "\n" not in bad and len(bad) <= 2_000:
        with pytest.raises(UsageError) as e:
            ip.run_line_magic("new", f"--name {bad}")
        assert says in str(e.value) and "\n" not in str(e.value)
        assert len(str(e.value)) < 400  # the name is not echoed whole
    with pytest.raises(InvalidArgument):
        ocw.Store(":memory:").create_session(name=bad)


def test_a_name_stored_before_the_rule_is_shown_escaped_everywhere_alike(ip, capsys):
    ip.run_cell("%%chat\nhello")
    s = ocw.current_session()
    with s.backend.db.transaction() as con:  # as an older ocw could have stored it
        con.execute("UPDATE sessions SET name = ?, rev = rev + 1 WHERE id = ?", ["evil\u202ename", s.id])
    s.sync()
    w = ocw.chat()
    assert w.session_name == "evil\\u202ename" and w.ring.session_name == "evil\\u202ename"
    w.close()
