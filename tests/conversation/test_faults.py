"""Issue 11 item 4: faults say what happened.

- After finished tool steps (stored: calls with their results), a failed
  follow-up request's one-line error says they were kept, that running the
  cell again repeats them, and how to continue instead.
- A valid but empty reply (no text, no tool call) is not stored; the cell says
  the provider returned nothing.
- A model's or a tool's text the store could not hold (a lone surrogate) is
  stored repaired, never refused after the reply was paid for.
Real IPython shell, the loopback server, the DuckDB file read back.
"""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError

import ocw
from ocw.notebook.magics import get_runtime

TOOL_CELL = '''
import ocw
CALLS = []

@ocw.tool
def stamp(label: str) -> str:
    """Stamp a label (a side effect: it is recorded)."""
    CALLS.append(label)
    return f"stamped {label}"
'''


def run(shell, cell, capsys):
    res = shell.run_cell(cell)
    cap = capsys.readouterr()
    return res, cap.out, cap.err


def failing(shell, cell, capsys) -> str:
    res, out, err = run(shell, cell, capsys)
    assert isinstance(res.error_in_exec, UsageError), (out, err)
    msg = str(res.error_in_exec)
    assert "\n" not in msg and msg in err and "Traceback" not in out + err
    return msg


def roles(s) -> list[str]:
    s.sync()
    return [s.node(n)["role"] for n in s.branch()]


@pytest.fixture
def tools_shell(oip, openai_env, capsys):
    res = oip.run_cell(TOOL_CELL)
    assert res.error_in_exec is None
    yield oip
    ocw.conversation.tools._REGISTERED.pop("stamp", None)


@pytest.mark.parametrize("steps", [1, 2])
def test_kept_tool_steps_are_named_in_the_error(tools_shell, openai_env, capsys, steps):
    srv = openai_env
    for i in range(steps):
        srv.script(tool_calls=[{"name": "stamp", "input": {"label": f"L{i}"}}])
    srv.script(status=500, times=3)  # the follow-up request fails (three attempts)
    msg = failing(tools_shell, "%%chat\nstamp things", capsys)

    word = "step of this turn is" if steps == 1 else "steps of this turn are"
    assert f"the {steps} finished tool {word} kept (calls with their results)" in msg
    assert "running this cell again repeats them" in msg and "continue" in msg
    assert tools_shell.user_ns["CALLS"] == [f"L{i}" for i in range(steps)]  # each tool ran once
    assert len(srv.requests) == steps + 3
    s = ocw.current_session()
    assert roles(s) == ["user"] + ["assistant", "tool"] * steps  # kept, in pairs
    # Continuing (instead of re-running) does not call the tool again.
    srv.script(text="All stamped.")
    res, out, err = run(tools_shell, "%%chat\ncontinue", capsys)
    assert res.error_in_exec is None and "All stamped." in out
    assert tools_shell.user_ns["CALLS"] == [f"L{i}" for i in range(steps)]


def test_an_error_without_tool_steps_does_not_mention_them(oip, openai_env, capsys):
    """The control: the same failure with no tool step keeps the provider's own hint."""
    openai_env.script(status=500, times=3)
    msg = failing(oip, "%%chat\nhello", capsys)
    assert "tool step" not in msg and "internal error" in msg


@pytest.mark.parametrize("reply", ["", "   \n\n  "])
def test_an_empty_reply_is_not_stored(oip, openai_env, store_dump, capsys, reply):
    srv = openai_env
    res, out, err = run(oip, "%%chat\nfirst", capsys)
    assert res.error_in_exec is None
    rt = get_runtime()
    before, n = store_dump(rt.store), len(srv.requests)

    srv.script(text=reply, times=2)  # an empty stream is asked once more, unstreamed (issue 23): empty again
    msg = failing(oip, "%%chat\nsay nothing", capsys)
    assert "the provider returned an empty reply (no text, no tool call)" in msg and "nothing was stored" in msg
    # No characters at all: asked once more without streaming (a gateway's hidden refusal shows
    # there), never as if it were an error; whitespace is a reply the model wrote: asked once.
    asked = [r.body.get("stream", False) for r in srv.requests[n:]]
    assert asked == ([True, False] if reply == "" else [True])
    assert store_dump(rt.store) == before
    assert roles(ocw.current_session()) == ["user", "assistant"]


def test_a_one_character_reply_is_stored(oip, openai_env, capsys):
    """Boundary: one visible character is a reply."""
    openai_env.script(text=".")
    res, out, err = run(oip, "%%chat\nreply with a dot", capsys)
    assert res.error_in_exec is None
    s = ocw.current_session()
    assert roles(s) == ["user", "assistant"] and s.node(s.head)["content"][0]["text"] == "."


def test_an_empty_reply_after_tool_steps_names_both(tools_shell, openai_env, capsys):
    srv = openai_env
    srv.script(tool_calls=[{"name": "stamp", "input": {"label": "A"}}])
    srv.script(text="", times=2)  # the empty stream, and the same asked unstreamed
    msg = failing(tools_shell, "%%chat\nstamp A", capsys)
    assert "empty reply" in msg and "the 1 finished tool step of this turn is kept" in msg
    assert roles(ocw.current_session()) == ["user", "assistant", "tool"]


def test_a_lone_surrogate_from_the_model_is_stored_repaired(oip, openai_env, capsys):
    """The reply is paid for: it is shown and stored (the surrogate as U+FFFD), not lost."""
    openai_env.script(text="half an emoji: \ud83d and the rest")
    res, out, err = run(oip, "%%chat\nhello", capsys)
    assert res.error_in_exec is None, err
    s = ocw.current_session()
    stored = s.node(s.head)["content"][0]["text"]
    assert stored == "half an emoji: \ufffd and the rest" and "\ufffd" in out
