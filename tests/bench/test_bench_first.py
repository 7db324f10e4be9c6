"""`python -m ocw.bench.first --quick` runs and prints both tables with a ratio in
every row (figures, not targets: timing is never asserted here)."""
from __future__ import annotations

import re

from ocw.bench import first


def test_quick_run_prints_both_tables(capsys, ocw_env):
    assert first.main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "×" in line]
    assert [r.split(" | ")[0] for r in rows] == [
        "| 1 MB (keeps 2,000 tokens)", "| warm-up on (default)", "| warm-up off"]
    assert all(re.search(r"\| [\d,.]+× \|$", r) for r in rows)
    assert out.count("load average") == 2
