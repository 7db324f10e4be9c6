"""The built-in tools (ocw/conversation/builtin_tools.py) in a real IPython shell: the
bounded repr of a huge number, the smallest read_file, run_python's output and its
refusal with no kernel, and what make() offers by default."""
from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ocw.conversation import builtin_tools


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    yield sh
    for name in ("big", "x_bt", "y_bt"):  # the shell is shared with the other tests of the run
        sh.user_ns.pop(name, None)


def test_a_huge_number_is_shown_in_400_characters(shell):
    shell.user_ns["big"] = 7 ** 1_000  # 846 digits
    text = builtin_tools.make(shell)["describe_variable"]("big")
    kind, shown = text.split("\n", 1)
    assert kind == "int" and len(shown) == 400 and "..." in shown
    assert shown.startswith(str(7 ** 1_000)[:198]) and shown.endswith(str(7 ** 1_000)[-199:])


def test_read_file_reads_at_least_one_character(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("abc")
    read = builtin_tools.make(None)["read_file"]
    assert read("a.txt", max_chars=0) == "a\n[… file continues; 3 bytes in all]"
    assert read("a.txt", max_chars=-5) == "a\n[… file continues; 3 bytes in all]"
    assert read("a.txt", max_chars=3) == "abc"


def test_by_default_the_read_only_tools_and_no_code_execution(shell):
    assert sorted(builtin_tools.make(shell)) == ["describe_variable", "list_variables", "read_file"]
    assert sorted(builtin_tools.make(shell, code_execution=True, read_only=False)) == ["run_python"]


def test_run_python_prints_and_returns_the_last_value_and_needs_a_kernel(shell):
    run = builtin_tools.make(shell, code_execution=True)["run_python"]
    assert run("x_bt = 6\nprint('hi')\nx_bt * 7") == "hi\n42"
    assert shell.user_ns["x_bt"] == 6
    assert run("y_bt = 1") == "(no output)"
    with pytest.raises(RuntimeError, match="no kernel to run code in"):
        builtin_tools.make(None, code_execution=True)["run_python"]("1")
