"""Issue 25: references to hostile objects, in a real InteractiveShell with ocw loaded
(the offline model): `{g}` whose __getattr__ raises, a table-like object whose head()
raises, a __repr__ that raises SystemExit, a value holding ```. Each cell runs without
a traceback, and the message the model reads is what the rules say."""
from __future__ import annotations

import ocw

SETUP = '''
class G:
    def __getattr__(self, k): raise RuntimeError("boom getattr")
class H:
    shape = (3, 2)
    def head(self, n): raise ValueError("boom head")
    def to_string(self): return "x"
class R:
    def __repr__(self): raise SystemExit("boom repr")
class BadStr(Exception):
    def __str__(self): raise RuntimeError("str fails")
g, h, r = G(), H(), R()
fence = "a ``` b"
block = "line one\\n```\\nline three"
'''


def _sent(ip, cell: str, capsys) -> str:
    res = ip.run_cell(cell)
    out, err = capsys.readouterr()
    assert res.error_in_exec is None and res.error_before_exec is None, (res.error_in_exec, err)
    assert "Traceback" not in err and "boom" not in out + err, out + err  # (the offline reply may quote {Err})
    user = [m for m in ocw.current_session().rendered_history() if m["role"] == "user"]
    return user[-1]["content"][0]["text"]


def test_hostile_objects_are_sent_as_their_type(ip, capsys):
    ip.run_cell(SETUP)
    ip.run_line_magic("new", "--name hostile")
    capsys.readouterr()
    assert _sent(ip, "%%chat\nlook at {g}", capsys).startswith("look at <__main__.G")
    assert _sent(ip, "%%chat\nlook at {h}", capsys).startswith("look at <__main__.H")
    text = _sent(ip, "%%chat\nlook at {r}", capsys)
    assert text.startswith("look at <__main__.R object at 0x") and "(its repr failed)" in text


def test_a_value_holding_a_fence_cannot_open_a_code_block(ip, capsys):
    ip.run_cell(SETUP)
    ip.run_line_magic("new", "--name fences")
    capsys.readouterr()
    text = _sent(ip, "%%chat\nsee {fence} and then {{literal}}", capsys)
    assert text == "see \n````\na ``` b\n````\n and then {literal}\n"
    text = _sent(ip, "%%chat\nsee {block} end", capsys)
    assert "\n````\nline one\n```\nline three\n````\n" in text and text.endswith(" end\n")


def test_err_after_an_exception_whose_str_raises(ip, capsys):
    ip.run_cell(SETUP)
    ip.run_line_magic("new", "--name err")
    ip.run_cell("1/0")
    ip.run_cell("raise BadStr()")
    capsys.readouterr()
    text = _sent(ip, "%%chat\nwhat is {Err}", capsys)
    assert "raise BadStr()" in text and "ZeroDivisionError" not in text
