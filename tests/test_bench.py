"""The benchmark runs (tiny sizes) and prints its table; no timing is asserted."""
from __future__ import annotations

import re

import pytest

from ocw import bench


def test_bench_quick_prints_the_table(capsys):
    assert bench.main(["occupancy", "--quick"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("messages"))
    columns = [c.strip() for c in header.split("|")]
    assert columns[:6] == ["messages", "tokens", "per-turn ms", "p90 ms", "naive ms", "ratio"]
    rows = [line for line in out.splitlines() if re.match(r"^\s*[\d,]+ \|", line)]
    assert [int(r.split("|")[0].replace(",", "")) for r in rows] == list(bench.QUICK_SIZES)
    for r in rows:
        cells = [c.strip() for c in r.split("|")]
        assert float(cells[2]) > 0 and float(cells[4]) > 0 and cells[5].endswith("×")
        assert cells[7] == "yes"  # the incremental total equals the naive recount
    assert f"per-turn({bench.QUICK_SIZES[1]}) ÷ per-turn({bench.QUICK_SIZES[0]}) = " in out
    assert "naive = re-tokenize rendered_history" in out


def test_bench_results_and_scaled_naive(tmp_path):
    import io

    buf = io.StringIO()
    res = bench.bench_occupancy([50], turns=3, naive_fraction=0.5, out=buf, tmpdir=str(tmp_path))
    (row,) = res
    assert row["messages"] == 50 and row["naive_method"] == "1 message in 2 timed, ×2"
    assert row["history_tokens"] > 5 * bench.TOOL_TOKENS  # 10 % of 50 messages are ~2k-token tool outputs
    assert row["ratio"] == pytest.approx(row["naive_ms"] / row["per_turn_ms"])
    assert "1 message in 2 timed" in buf.getvalue()
    assert list(tmp_path.iterdir()) == []  # the temp database is gone


def test_built_session_shape(store):
    s = bench.build_session(store, 40)
    path = s.branch()
    assert len(path) == 40 and s.node(path[0])["parent_id"] is None
    tool_outputs = [n for n in path if s.node(n)["content"][0]["type"] == "tool_result"]
    assert len(tool_outputs) == 4
    assert all(s.node(n)["tokens"] > bench.TOOL_TOKENS * 0.9 for n in tool_outputs)
    calls = [s.node(n)["content"] for n in path if any(b["type"] == "tool_use" for b in s.node(n)["content"])]
    assert len(calls) == 4


def test_bad_sizes_are_refused():
    with pytest.raises(SystemExit):
        bench.main(["occupancy", "--sizes", "5"])
