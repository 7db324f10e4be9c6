"""`python -m ocw.bench.cell --quick` (issue 28: per-cell overhead beside a hand-written
openai-SDK cell) runs both kernels against its loopback server and prints a row per
session size with a ratio; every timed cell made one request and showed the reply.
Figures, not targets: timing is never asserted here."""
from __future__ import annotations

import re

from ocw.bench import cell


def test_quick_run_prints_a_row_per_size_and_every_cell_answered(capsys, ocw_env):
    assert cell.main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "×" in line]
    assert [r.split(" | ")[0] for r in rows] == ["| 0 messages", "| 1,000 messages"]
    assert all(re.search(r"\| [\d,.]+× \| [\d.]+ \|$", r) for r in rows)
    checks = re.findall(r"checks (\d+): (\d+) of (\d+) cells printed the reply; messages sent per request (\d+)–(\d+)",
                        out)
    assert [c[0] for c in checks] == ["0", "1000"]
    assert all(c[1] == c[2] == "6" for c in checks)
    assert int(checks[1][3]) > cell.TAIL - 20  # the folded 1k session sends its summary and last ~200
    assert out.count("load average") == 2


def test_the_loopback_streams_the_reply_in_chunks_with_usage():
    import httpx

    server = cell.Loopback()
    try:
        with httpx.stream("POST", server.url + "/chat/completions",
                          json={"model": cell.MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True,
                                "stream_options": {"include_usage": True}}) as r:
            lines = [x for x in r.iter_lines() if x.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert '"usage"' in lines[-2]
        assert len(server.served) == 1 and server.requests[0]["messages"][0]["content"] == "hi"
    finally:
        server.stop()
