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
