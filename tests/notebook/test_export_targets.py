"""Issue 25: `%ocw export` targets, in a real InteractiveShell with ocw loaded.
A folder that cannot be written, a path under a file, a trailing slash (a folder),
and message text holding an unclosed ``` fence. Each bad target: one UsageError
line, no traceback, nothing written, the folder's files as they were."""
from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError

import ocw


def _line(ip, line: str) -> str:
    with pytest.raises(UsageError) as e:
        ip.run_line_magic("ocw", line)
    text = str(e.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def _tree(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.fixture
def chat(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic("new", "--name exp")
    ip.run_cell_magic("chat", "", "here is code:\n```python\nprint(1)\n")  # never closed
    ip.run_cell_magic("chat", "", "second message")
    return tmp_path


def test_a_folder_that_cannot_hold_files(ip, chat):
    before = _tree(chat)
    assert "cannot write in /proc" in _line(ip, "export /proc/chat.md")  # exists, takes no new file (root too)
    assert "no folder" in _line(ip, f"export {chat}/nope/chat.md")
    (chat / "notes.txt").write_text("mine")
    assert "no folder" in _line(ip, f"export {chat}/notes.txt/chat.md")
    assert _tree(chat) == sorted(before + ["notes.txt"]) and (chat / "notes.txt").read_text() == "mine"


def test_a_trailing_slash_names_a_folder(ip, chat):
    before = _tree(chat)
    assert "no folder" in _line(ip, "export dir/newdir/")
    assert _tree(chat) == before  # neither a file nor a folder called newdir
    (chat / "dir").mkdir()
    ip.run_line_magic("ocw", "export dir/")
    assert sorted(p.name for p in (chat / "dir").iterdir()) == ["exp.ocw.md"]


def test_an_unclosed_fence_in_a_message_stays_inside_that_message(ip, chat):
    ip.run_line_magic("ocw", "export chat.md")
    text = (chat / "chat.md").read_text()
    first, rest = text.split("print(1)\n", 1)
    assert rest.startswith("```\n")  # the fence the message left open is closed right after it
    inside, headings = False, []
    for ln in text.splitlines():
        if ln.startswith("```"):
            inside = not inside
        elif ln.startswith("## ") and not inside:
            headings.append(ln)
    assert not inside and headings[-4:] == ["## 1 · user", "## 2 · assistant", "## 3 · user", "## 4 · assistant"], headings  # every message's heading is a heading, not code
