"""The tools offered in one turn (ocw/conversation/toolbox.py): run_python only for the
session that opted in — by default the opt-in turns it on, and a registry made without
a session is the one for the kernel's own session id."""
from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

import ocw
from ocw.conversation.toolbox import ToolRegistry


def test_the_code_opt_in_is_per_session_and_on_by_default_when_asked():
    saved = dict(ocw.conversation.tools._REGISTERED)
    ocw.conversation.tools._REGISTERED.clear()
    try:
        tb = ToolRegistry(InteractiveShell.instance())
        assert tb.active(session="s1") is None  # nothing on: no registry for the turn
        tb.enable_code_execution(session="s1")
        assert sorted(tb.active(session="s1").tools()) == ["run_python"]
        assert tb.active(session="s2") is None  # another session did not opt in
        tb.enable_code_execution(False, session="s1")
        assert tb.active(session="s1") is None
        tb.enable_code_execution()  # no session named: the registry's own (None here)
        assert tb.code_execution_enabled() and sorted(tb.active().tools()) == ["run_python"]
        assert sorted(tb.active(builtins=True, session="s2").tools()) == ["describe_variable", "list_variables",
                                                                          "read_file"]
    finally:
        ocw.conversation.tools._REGISTERED.update(saved)


def test_a_call_in_a_turn_without_tools_gets_an_error_result():
    from ocw.conversation.toolbox import no_tools_result

    assert no_tools_result({"type": "tool_use", "id": "c1", "name": "read_file", "input": {}}) == {
        "type": "tool_result", "tool_use_id": "c1", "is_error": True,
        "content": "tool 'read_file' is not available: no tools are on in this turn"}
