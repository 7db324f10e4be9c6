"""The compaction-prepare benchmark in quick mode: the table's shape, and that the
engine's prepare and the naive path agree on the summarizer input. No timings
are asserted."""
from __future__ import annotations

import io

from ocw.bench import compaction as bench
from ocw.bench.build import node_id


def branch_t0(branch):
    """The ms of the first built id (ids are "n_" + hex of (ms << 20 | 20 random bits))."""
    return int(branch[0][2:], 16) >> 20


def test_quick_run_prints_the_table(tmp_path):
    out = io.StringIO()
    rows = bench.run([120, 400], quick=True, out=out, tmpdir=str(tmp_path))
    assert [(r["messages"], r["state"]) for r in rows] == [
        (120, "fresh"), (120, "rolling"), (400, "fresh"), (400, "rolling")]
    for r in rows:
        assert set(r) >= {"messages", "history_tokens", "folded", "chunks", "prepare_ms", "naive_ms", "ratio",
                          "same_input"}
        assert r["same_input"] is True  # both paths chose the same cut and built the same input
        assert 0 < r["folded"] < r["messages"]
        assert r["chunks"] >= 1
        assert r["prepare_ms"] > 0 and r["naive_ms"] > 0
        assert r["ratio"] == r["naive_ms"] / r["prepare_ms"]
    assert rows[2]["history_tokens"] > rows[0]["history_tokens"]
    # rolling: the summary is in place, so less renders and less folds than fresh
    for fresh, rolling in (rows[0:2], rows[2:4]):
        assert rolling["history_tokens"] < fresh["history_tokens"]
        assert rolling["folded"] < fresh["folded"]
    text = out.getvalue().splitlines()
    assert text[0].startswith("ocw bench compaction")
    header = text[1].split()
    assert header[:2] == ["messages", "state"] and "prepare" in header and "naive" in header
    assert set(text[2]) <= {"-", " "}
    assert len(text) == 3 + len(rows)
    assert [t.split()[:2] for t in text[3:]] == [["120", "fresh"], ["120", "rolling"], ["400", "fresh"],
                                                  ["400", "rolling"]]
    assert all(t.split()[-1] == "yes" for t in text[3:])


def test_build_session_matches_what_the_session_counts(tmp_path):
    from ocw.conversation.sessions import Store

    store = Store(str(tmp_path / "b.duckdb"))
    try:
        s = bench.build_session(store, 50, verify=50)  # raises if a stored count differs from a recount
        branch = s.branch()
        assert len(branch) == 50 and s.head == branch[-1] == node_id("n_c", 49, branch_t0(branch))
        assert branch == sorted(branch)  # ids in time order, as ocw makes them
        history = s.rendered_history()
        uses = [b["id"] for m in history for b in m["content"] if b["type"] == "tool_use"]
        assert len(uses) == len(set(uses)) == 5  # unique tool ids, one call per ten messages
        assert s.occupancy()["total"] == sum(m.get("tokens", 0) for m in history if "id" in m) \
            + s.occupancy()["breakdown"]["system"]
    finally:
        store.close()


def test_main_exit_code(capsys):
    # 60 messages: fresh folds some; rolling keeps 30 in its tail — nothing to fold, on both paths
    assert bench.main(["--sizes", "60", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "ocw bench compaction" in out
    rolling = [line.split() for line in out.splitlines() if " rolling " in line]
    assert rolling and rolling[0][3] == "0" and rolling[0][-1] == "yes"


# -- issue 28, item 6: %compact against read+tokenize, an automatic compaction's turn against a normal one --
def test_compact_cost_quick_run_reports_its_rows_and_checks(tmp_path, monkeypatch):
    from ocw.bench import compact_cost

    built = []
    real = compact_cost.build_session
    monkeypatch.setattr(compact_cost, "build_session", lambda *a, **kw: built.append(kw) or real(*a, **kw))
    out = io.StringIO()
    r = compact_cost.run(quick=True, messages=60, window=32_000, reps=2, out=out, tmpdir=str(tmp_path))
    # every session it compacts repeats no message (the builder's unique mode), each the offline model's own
    assert len(built) == 1 + 3 * 5 and all(kw["unique"] and kw["model"] == "ocw-offline" for kw in built)
    # each repetition its own text, compacted cold and read ahead: the same text twice
    assert [kw["seed"] for kw in built[1:6]] == [100] * 5 and built[6]["seed"] == 101
    assert r["checks"] == {"compactions_succeeded": True, "same_summary": True, "tail_tokens": r["checks"]["tail_tokens"],
                           "failures": []}
    assert 12_000 < r["checks"]["tail_tokens"] < 32_000  # 60 messages of the builder's mix, under the window
    for key in ("compact", "model", "own", "cold", "read_ahead", "floor", "auto", "auto_cold", "normal"):
        s = r["rows"][key]
        assert s["n"] == 2 and 0 < s["p50"] <= s["p99"] <= s["max"]
    assert r["rows"]["model"]["max"] < r["rows"]["compact"]["max"] and r["rows"]["own"]["max"] < r["rows"]["compact"]["max"]
    assert r["ratios"]["compact_vs_floor"] == r["rows"]["compact"]["p50"] / r["rows"]["floor"]["p50"]
    assert r["ratios"]["own_vs_floor"] == r["rows"]["own"]["p50"] / r["rows"]["floor"]["p50"]
    assert r["ratios"]["auto_vs_normal"] == r["rows"]["auto"]["p50"] / r["rows"]["normal"]["p50"]
    assert r["ratios"]["cold_vs_floor"] == r["rows"]["cold"]["p50"] / r["rows"]["floor"]["p50"]
    assert r["ratios"]["auto_cold_vs_normal"] == r["rows"]["auto_cold"]["p50"] / r["rows"]["normal"]["p50"]
    assert len(r["load"]) == 2 and all(len(la) == 3 for la in r["load"])
    text = out.getvalue().splitlines()
    assert text[0].startswith("ocw bench compact_cost — 60 messages") and "load average" in text[0]
    assert [line[:36].rstrip() for line in text[2:11]] == [label for _, label in compact_cost.LABELS]
    assert "%compact ÷ read+tokenize" in text[11] and "ocw's own work alone" in text[11] and "auto turn ÷ normal turn" in text[11]
    assert "with nothing read ahead" in text[11]
    assert text[12] == "checks: every compaction succeeded, the same summary read ahead or not"


def test_compact_cost_fails_its_checks_when_an_auto_turn_does_not_compact(tmp_path, monkeypatch):
    from ocw.bench import compact_cost

    monkeypatch.setattr(compact_cost, "AUTO_THRESHOLD", 0.99)  # the turn never crosses it
    out = io.StringIO()
    r = compact_cost.run(quick=True, messages=40, window=32_000, reps=1, out=out, tmpdir=str(tmp_path))
    assert not r["checks"]["compactions_succeeded"]
    # the warm-up run and the timed one, read ahead and not
    assert r["checks"]["failures"] == ["auto turn: []", "auto_cold turn: []"] * 2
    assert r["rows"]["auto"]["n"] == r["rows"]["auto_cold"]["n"] == 0
    assert "FAILED: auto turn: []" in out.getvalue()


def test_compact_cost_says_so_when_the_read_ahead_changes_a_summary(tmp_path, monkeypatch):
    from ocw.bench import compact_cost
    from ocw.conversation import read_ahead
    from ocw.text import tokens

    real = read_ahead.read_session

    def poisoned(session, provider=None, ids=None):  # a read-ahead that keeps a wrong count of every line
        n = real(session, provider, ids)
        read_ahead.wait(60)
        for key in list(tokens._KEPT):
            tokens._KEPT[key] += 50
        return n

    monkeypatch.setattr(read_ahead, "read_session", poisoned)
    out = io.StringIO()
    r = compact_cost.run(quick=True, messages=40, window=32_000, reps=1, out=out, tmpdir=str(tmp_path))
    assert not r["checks"]["same_summary"] and "READ-AHEAD CHANGED A SUMMARY" in out.getvalue()
