"""ocw.notebook.export: a session as Markdown, on a real DuckDB file. A tool call's
arguments or a tool result holding backtick runs goes in a fence longer than any of
them, so the export's later headings stay headings."""
from __future__ import annotations

from ocw.notebook.export import branch_markdown


def _headings_outside_code(text: str) -> list[str]:
    """`## ` lines outside fenced code, by CommonMark's rule: a fence closes on a run of
    the same character at least as long as the one that opened it."""
    fence, out = None, []
    for ln in text.splitlines():
        run = len(ln) - len(ln.lstrip("`"))
        if fence is None and run >= 3:
            fence = run
        elif fence is not None and run >= fence and not ln.strip("`"):
            fence = None
        elif fence is None and ln.startswith("## "):
            out.append(ln)
    return out


def test_tool_output_holding_fences_gets_a_longer_fence(store):
    s = store.create_session(name="tools")
    result = "found:\n````\nx = 1\n```\nend"  # runs of 4 and 3
    s.append_many([
        ("user", "look it up"),
        ("assistant", [{"type": "tool_use", "id": "call_1", "name": "grep", "input": {"q": "a ``` b"}}]),
        ("user", [{"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": result}]}]),
        ("assistant", "done"),
    ])
    text, messages, _ = branch_markdown(s)
    assert messages == 4
    assert f"\n`````\n{result}\n`````\n" in text  # five: one more than the longest run
    assert '\n````json\n{"q": "a ``` b"}\n````\n' in text  # four around a run of three
    assert _headings_outside_code(text) == ["## 1 · user", "## 2 · assistant", "## 3 · user", "## 4 · assistant"]
