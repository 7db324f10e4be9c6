"""ocw.notebook.export: a session as Markdown, on a real DuckDB file. A tool call's
arguments or a tool result holding backtick runs goes in a fence longer than any of
them, so the export's later headings stay headings."""
from __future__ import annotations

import pytest

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


def test_the_default_path_is_beside_the_notebook_or_named_after_the_session(store, tmp_path, monkeypatch):
    from ocw.notebook.export import default_path

    nb = tmp_path / "work" / "analysis.ipynb"
    nb.parent.mkdir()
    s = store.create_session(name=str(nb))  # %%chat in a notebook names its session after it
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    assert default_path(s, "md") == str(tmp_path / "work" / "analysis.ocw.md")
    monkeypatch.delenv("JPY_SESSION_NAME")
    monkeypatch.chdir(tmp_path)
    assert default_path(store.create_session(name="my chat: v2"), "json") == str(tmp_path / "my-chat-v2.ocw.json")
    odd = store.create_session(name="???")
    assert default_path(odd, "md") == str(tmp_path / f"{odd.id}.ocw.md")  # nothing left of the name: its id


def test_a_file_that_is_not_an_export_is_kept_unless_forced(store, tmp_path):
    from ocw.notebook.export import ExportError, export, write

    s = store.create_session(name="keep")
    s.append("user", "hello")
    mine = tmp_path / "notes.md"
    mine.write_text("my own notes")
    with pytest.raises(ExportError) as e:
        export(s, "md", str(mine))
    assert e.value.user_message() == (f"{mine} exists and is not an ocw export; nothing was written — "
                                      "give another path, or add --force to replace it")
    assert mine.read_text() == "my own notes"
    with pytest.raises(ExportError):
        write(str(mine), "text")  # the writer alone refuses it too, unless told
    assert mine.read_text() == "my own notes"
    line = export(s, "md", str(mine), force=True)
    assert line == f"Exported session 'keep' (1 messages of this branch, 0 summaries) as Markdown to {mine}"
    assert mine.read_text().startswith("<!-- ocw export")
    export(s, "md", str(mine))  # an earlier export is replaced without --force
    line = export(s, "json", str(tmp_path / "keep.json"))
    assert line.endswith(f"(the whole session: 1 messages, 0 summaries) as JSON to {tmp_path / 'keep.json'}")


TURN = "the loader reads events.parquet, joins the orders table and retries after 30 s timeouts. " * 12


def test_a_summary_is_marked_with_its_figures_and_focus_and_json_says_what_is_on_the_branch(ip, capsys):
    import json
    import re

    import ocw
    from ocw.notebook.export import session_json

    ip.run_line_magic("config", "Ocw.context_window = 6000")
    ip.run_line_magic("config", "Ocw.auto_compact = 0")
    for i in range(6):
        assert ip.run_cell(f"%%chat\nTurn {i}: {TURN}").error_in_exec is None
    ip.run_line_magic("compact", "-- the orders table")
    s = ocw.current_session()
    old_leaf = s.head
    s.rewind(s.branch()[-3])
    assert ip.run_cell("%%chat\nanother ending").error_in_exec is None
    md = branch_markdown(s)[0]
    head = re.search(r"> \*\*Summary (n_\w+)\*\* \((.*)\)", md)
    assert head, md
    facts = head.group(2).split("; ")
    assert facts[0] == "active" and re.fullmatch(r"covers messages 1–\d+", facts[1])
    assert facts[2].startswith("manual compaction, ")
    assert re.fullmatch(r"[\d,]+ → [\d,]+ tokens", facts[3]) and facts[4] == "focus: the orders table"
    doc = json.loads(session_json(s)[0])
    assert doc["ocw_export"] == 1
    on = {n["id"] for n in doc["nodes"] if n["on_branch"]}
    assert on == set(s.branch()) and old_leaf not in on and old_leaf in {n["id"] for n in doc["nodes"]}
    capsys.readouterr()


def test_a_json_export_reads_what_another_kernel_wrote_since(tmp_db):
    import json

    import ocw
    from ocw.notebook.export import session_json

    mine, theirs = ocw.Store(tmp_db), ocw.Store(tmp_db)  # two kernels on one file
    try:
        s = mine.create_session(name="two kernels")
        s.append("user", "first")
        theirs.open_session(s.id).append("assistant", "second, from the other kernel")
        doc = json.loads(session_json(s)[0])
        assert [(n["role"], n["on_branch"]) for n in doc["nodes"]] == [("user", True), ("assistant", True)]
        assert doc["nodes"][1]["content"] == [{"type": "text", "text": "second, from the other kernel"}]
    finally:
        mine.close()
        theirs.close()


def test_the_magics_words_pick_the_format_force_and_path():
    from ocw.notebook.export import ExportError, parse_line

    assert parse_line("") == ("md", False, None)
    assert parse_line("chat.md") == ("md", False, "chat.md")
    assert parse_line("--format json out.json") == ("json", False, "out.json")
    assert parse_line("-f json --force out.json") == ("json", True, "out.json")
    assert parse_line("--format=json 'my chat.json'") == ("json", False, "my chat.json")
    for bad, says in (("--format pdf x", "%ocw export takes --format md or --format json and at most one path"),
                      ("a.md b.md", "%ocw export takes --format md or --format json and at most one path"),
                      ("--forse x", "%ocw export: unknown option '--forse'"),
                      ("'open", "%ocw export: No closing quotation")):
        with pytest.raises(ExportError) as e:
            parse_line(bad)
        assert str(e.value).startswith(says), str(e.value)
