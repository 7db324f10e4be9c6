"""`python -m ocw.bench.comm --quick` runs turns at 100 and 2,000 loaded messages, prints a
row per size and kind with its ratio, and its checks hold (every turn shows its two
messages; a browser replica applying what the comm carried ends equal to the widget).
Bytes, not timings: the ratio's target is checked here too, as the bench prints it."""
from __future__ import annotations

import re

from ocw.bench import comm


def test_quick_run_prints_a_row_per_size_and_kind_and_its_checks_hold(capsys, ocw_env):
    assert comm.main(["--quick", "--turns", "2"]) == 0
    out = capsys.readouterr().out
    assert "CHECK FAILED" not in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "×" in line]
    assert [tuple(r.split(" | ")[:2]) for r in rows] == [
        ("| turn sent from the widget", "100"), ("| `%%chat` cell, widget open", "100"),
        ("| turn sent from the widget", "2,000"), ("| `%%chat` cell, widget open", "2,000")]
    for r in rows:
        ratios = [float(x) for x in re.findall(r"([\d.]+)×", r)]
        assert len(ratios) == 3 and 0.5 < ratios[0] <= ratios[1] <= ratios[2] <= 2.0, r
    assert "met (worst" in out and "NOT met" not in out
    assert out.count("load average") == 2
