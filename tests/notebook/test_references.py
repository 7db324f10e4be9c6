"""ocw.notebook.references: `{name}` in a %%chat cell, in a real InteractiveShell with ocw
loaded (the offline model). The budget per value (BUDGET_TOKENS = 2000) pinned on both
sides, and the fence a value holding backtick runs gets."""
from __future__ import annotations

import ocw
from ocw.notebook.magics import get_runtime
from ocw.notebook.references import BUDGET_TOKENS, expand_message
from ocw.text.tokens import count_text, encoding_for_model


def _sent(ip, cell: str, capsys) -> tuple[str, str]:
    res = ip.run_cell(cell)
    out, err = capsys.readouterr()
    assert res.error_in_exec is None and res.error_before_exec is None, (res.error_in_exec, err)
    user = [m for m in ocw.current_session().rendered_history() if m["role"] == "user"]
    return user[-1]["content"][0]["text"], out


def test_a_value_of_exactly_the_budget_is_sent_whole_and_one_token_more_is_cut(ip, capsys):
    assert BUDGET_TOKENS == 2000
    ip.run_cell("%%chat\nhello")
    enc = encoding_for_model(ocw.current_session().model).name
    ip.run_cell("fits = ' word' * 2000\nover = ' word' * 2001")
    ns = ip.user_ns
    assert (count_text(ns["fits"], enc), count_text(ns["over"], enc)) == (2000, 2001)
    capsys.readouterr()
    text, out = _sent(ip, "%%chat\nsee {fits}", capsys)
    assert text == "see " + ns["fits"].strip("\n") + "\n" and "cut" not in text and "was cut" not in out
    text, out = _sent(ip, "%%chat\nsee {over}", capsys)
    assert "\n[… over cut here: 1 of 2,001 tokens not shown]\n```\n" in text  # the cut value, fenced
    assert "over was cut to 2,000 of 2,001 tokens" in out


def test_a_value_holding_backtick_runs_gets_a_longer_fence(ip, capsys):
    ip.run_cell("%%chat\nhello")
    ip.run_cell("four = 'a ```` b'\nfive = 'x\\n`````\\ny'")
    capsys.readouterr()
    rt = get_runtime()
    text, _ = expand_message(rt, "see {four} then {five} after")
    assert text == "see \n`````\na ```` b\n`````\n then \n``````\nx\n`````\ny\n``````\n after"
    text, _ = expand_message(rt, "plain {five}")
    assert text.startswith("plain \n``````\n")  # six: one more than the longest run (5)


TABLE = '''
class Rows:
    """Table-like: head(n), shape, to_string — what a DataFrame offers."""
    def __init__(self, n): self.n, self.shape = n, (n, 2)
    def head(self, k): return Rows(min(k, self.n))
    def to_string(self): return "\\n".join(f"row {i}" for i in range(self.n))
big, small = Rows(12), Rows(5)
'''


def test_a_table_is_sent_as_its_first_five_rows_and_its_shape(ip, capsys):
    ip.run_cell("%%chat\nhello")
    ip.run_cell(TABLE)
    capsys.readouterr()
    text, _ = _sent(ip, "%%chat\nsee {big}", capsys)
    assert "row 4\n" in text and "row 5" not in text
    assert "[Rows: 12 rows × 2 columns; the first 5 shown]" in text
    text, _ = _sent(ip, "%%chat\nsee {small}", capsys)
    assert "row 4\n[Rows: 5 rows × 2 columns]" in text  # five rows: all shown, nothing said


def test_code_and_other_braces_stay_as_written(ip, capsys):
    ip.run_cell("%%chat\nhello")
    ip.run_cell("x = 'EXPANDED'")
    capsys.readouterr()
    text, _ = _sent(ip, "%%chat\n~~~\n{x}\n~~~\nthen {x}", capsys)
    assert text == "~~~\n{x}\n~~~\nthen EXPANDED\n"  # a ~~~ fence is code as ``` is
    text, _ = _sent(ip, "%%chat\nkeep {In[]} and {{ alone", capsys)
    assert text == "keep {In[]} and { alone\n"  # not a reference; {{ is one brace
    text, _ = _sent(ip, "%%chat\nonly {{ here", capsys)
    assert text == "only { here\n"  # even with no closing brace in the cell


def test_err_is_the_last_real_error_not_a_mistyped_chat(ip, capsys):
    ip.run_cell("%%chat\nhello")
    ip.run_cell("1/0")
    ip.run_cell("%%chat --nope\nx")  # ocw's own one-line UsageError
    capsys.readouterr()
    text, _ = _sent(ip, "%%chat\nwhy {Err}", capsys)
    assert "ZeroDivisionError" in text and "nope" not in text


def test_an_output_that_does_not_exist_is_one_line_and_nothing_is_sent(ip, capsys):
    ip.run_cell("%%chat\nhello")
    before = len(ocw.current_session().branch())
    res = ip.run_cell("%%chat\nsee {Out[999]}")
    out, err = capsys.readouterr()
    assert "{Out[999]}: cell 999 returned no value (or has not run)" in out + err
    assert "Traceback" not in out + err and len(ocw.current_session().branch()) == before


def test_err_after_a_syntax_error_is_that_error(ip, capsys):
    ip.run_cell("%%chat\nhello")
    ip.run_cell("1/0")
    ip.run_cell("def broken(:\n    pass")  # fails before it runs
    capsys.readouterr()
    text, _ = _sent(ip, "%%chat\nwhy {Err}", capsys)
    assert "SyntaxError" in text and "ZeroDivisionError" not in text


def test_err_names_a_kernel_cell_not_its_temporary_file():
    """{Err}'s traceback: a kernel cell's file (/tmp/ipykernel_<pid>/<hash>.py) is said as
    IPython says it; the pid would change the message (and its token count) per kernel."""
    from ocw.notebook.references import format_error

    code = compile("def f():\n    return {}['nort']\nf()\n", "/tmp/ipykernel_123456/4102084939.py", "exec")
    try:
        exec(code, {})
    except KeyError as e:
        text = format_error(e)
    assert "ipykernel_123456" not in text and "4102084939" not in text
    assert 'File "Cell", line 3, in <module>' in text and 'File "Cell", line 2, in f' in text
    assert text.endswith("KeyError: 'nort'")


def test_only_a_kernel_cells_file_is_renamed_in_err():
    """IPython's kernel names a cell's file /tmp/ipykernel_<pid>/<number>.py; a path that only
    looks like it (no pid, or not a number) is a real file of the user's and keeps its name."""
    from ocw.notebook.references import format_error

    def said(filename: str) -> str:
        try:
            exec(compile("1/0\n", filename, "exec"), {})
        except ZeroDivisionError as e:
            return format_error(e)

    assert 'File "Cell", line 1' in said("/tmp/ipykernel_7/12.py")  # the shortest a kernel's can be
    assert 'File "/tmp/ipykernel_/12.py", line 1' in said("/tmp/ipykernel_/12.py")
    assert 'File "/tmp/ipykernel_7/x12.py", line 1' in said("/tmp/ipykernel_7/x12.py")
    assert 'File "/srv/app/12.py", line 1' in said("/srv/app/12.py")


def test_the_error_memory_keeps_a_cells_error_and_not_a_usage_error():
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult

    from ocw.notebook.references import ErrorMemory

    def result(in_exec=None, before_exec=None) -> ExecutionResult:
        r = ExecutionResult(ExecutionInfo("x", False, False, True, None))
        r.error_in_exec, r.error_before_exec = in_exec, before_exec
        return r

    mem = ErrorMemory()
    mem(result())  # a cell that ran fine: nothing kept, nothing raised
    assert mem.last is None
    boom = ZeroDivisionError("division by zero")
    mem(result(in_exec=boom))
    assert mem.last is boom
    mem(result(in_exec=UsageError("%%chat takes --model NAME")))  # ocw's own one line: not the {Err} meant
    assert mem.last is boom
    syntax = SyntaxError("invalid syntax")
    mem(result(before_exec=syntax))
    assert mem.last is syntax
    mem(result())
    assert mem.last is syntax  # a later good cell does not forget it


def test_a_name_that_is_not_defined_is_one_line_and_nothing_is_sent(ip, capsys):
    ip.run_cell("%%chat\nhello")
    before = len(ocw.current_session().branch())
    ip.run_cell("%%chat\nsee {nope}")
    out, err = capsys.readouterr()
    assert ("{nope}: no variable 'nope' in this notebook — define it first, or write {{nope}} to send the braces "
            "as they are") in out + err
    assert "Traceback" not in out + err and "KeyError" not in out + err
    assert len(ocw.current_session().branch()) == before
