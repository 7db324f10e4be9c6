"""ocw/notebook/report.py (mirror): the words of %context --text, %branch, %sessions and
%ocw doctor, read from real sessions on a real DuckDB file and a real InteractiveShell
with ocw loaded (the offline model). (The status line: test_status_line.py; doctor
against the loopback server: test_magics.py.)"""
from __future__ import annotations

from ocw.notebook import report


def test_the_table_names_where_the_window_came_from_only_when_it_was_not_configured(store):
    s = store.create_session(model="tiny", provider="openai", context_window=2_000)
    s.append_many([("user", "hello"), ("assistant", "hi")])
    assert s.window_source == "configured"
    assert "Window from" not in report.context_table(s)
    assert s.learn_window(1_536, "server")  # the server stated a smaller window: ocw plans with it
    line = [ln for ln in report.context_table(s).splitlines() if "Window from" in ln]
    assert len(line) == 1 and "1,536" in line[0] and line[0].rstrip().endswith(s.window_source), line
    assert s.window_source != "configured"


def test_branches_say_where_head_is_when_it_is_inside_a_branch(store):
    s = store.create_session()
    assert report.branches_table(s) == "No messages yet."
    s.append_many([("user", "one"), ("assistant", "two"), ("user", "three"), ("assistant", "four")])
    at_leaf = report.branches_table(s)
    assert "HEAD is at" not in at_leaf and at_leaf.endswith("Switch with %branch <id>.")
    middle = s.branch()[1]
    s.rewind(middle)
    inside = report.branches_table(s).splitlines()
    assert inside[-2] == f" * HEAD is at {middle} (inside a branch; the next %%chat forks here)"
    assert inside[-1] == "Switch with %branch <id>."


def test_a_server_on_this_machine_is_local():
    for url in ("http://localhost:11434/v1", "http://127.0.0.1:8080/v1", "http://127.5.0.1/v1", "http://[::1]:8000/v1",
                "http://0.0.0.0:8000", "http://gpu-box.local:8000/v1", "http://LOCALHOST/v1"):
        assert report.is_local(url), url
    for url in ("https://api.openai.com/v1", "http://10.0.0.5:8000/v1", "http://local.example.com/v1",
                "http://128.0.0.1/v1", "not a url"):
        assert not report.is_local(url), url


def test_doctor_says_when_code_execution_is_on(ip, capsys):
    ip.run_cell("%%chat\nhello")
    ip.run_line_magic("ocw", "doctor")
    out = capsys.readouterr().out
    assert "  tools:         read-only built-ins off; no code execution (%ocw allow-code turns it on" in out
    assert "  session:       'default' (" in out
    ip.run_line_magic("ocw", "allow-code")
    capsys.readouterr()
    ip.run_line_magic("ocw", "doctor")
    out = capsys.readouterr().out
    assert ("  tools:         CODE EXECUTION IS ON for session 'default' (run_python can run code in this kernel; "
            "%ocw deny-code turns it off)") in out
    assert "read-only" not in out


def test_doctor_before_any_session_names_the_configured_model(ip, capsys):
    ip.run_line_magic("ocw", "doctor")
    out = capsys.readouterr().out
    assert "  provider:      offline (built in, no network, no key)" in out
    assert "  API key:       not needed" in out and "  session:" not in out
    assert "CODE EXECUTION" not in out


def test_a_tool_call_is_a_printed_line_in_a_terminal_and_a_display_in_a_notebook(capsys):
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    call, result = {"name": "grep", "input": {"q": "<b>x</b>"}}, {"content": "found <i>it</i>", "is_error": True}
    shell = InteractiveShell.instance()
    old, shell.display_pub = shell.display_pub, CapturingDisplayPublisher(shell=shell)
    try:
        report.show_tool_call(call, result, rich=False)
        assert capsys.readouterr().out == '🔧 grep({"q": "<b>x</b>"}) → error: found <i>it</i>\n'
        assert shell.display_pub.outputs == []
        report.show_tool_call(call, result, rich=True)
        assert capsys.readouterr().out == ""
        (shown,) = shell.display_pub.outputs
        assert shown["data"]["text/plain"].startswith('🔧 grep({"q": "<b>x</b>"}) → error: found <i>it</i>')
        assert "<i>it</i>" not in shown["data"]["text/html"] and "&lt;i&gt;it&lt;/i&gt;" in shown["data"]["text/html"]
    finally:
        shell.display_pub = old
