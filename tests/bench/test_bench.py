"""The benchmark (`make bench`) in quick mode: every section runs, the tables have
their shape, the incremental total equals the naive recount, every kernel turn
lands. No timing is asserted; the verdict logic is tested on made-up figures."""
from __future__ import annotations

import io
import json
import re

import pytest

from ocw import bench
from ocw.bench import build
from ocw.bench import cli
from ocw.bench import fresh
from ocw.bench import growth
from ocw.bench import report
from ocw.bench import turns


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick run of every section: (results, printed text)."""
    out = io.StringIO()
    res = cli.run(cli.SECTIONS, quick=True, out=out, tmpdir=str(tmp_path_factory.mktemp("bench")))
    return res, out.getvalue()


def table(text: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """The table whose header starts with `first_header`: (header cells, row cells)."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(first_header))
    header = [c.strip() for c in lines[i].split("|")]
    assert set(lines[i + 1]) <= {"-", "+"}
    rows = []
    for line in lines[i + 2:]:
        if "|" not in line:
            break
        rows.append([c.strip() for c in line.split("|")])
    return header, rows


def test_the_turn_table(quick):
    res, text = quick
    header, rows = table(text, "messages |  ")
    assert header == list(report.TURN_COLUMNS)
    assert [r[0] for r in rows] == ["300", "1,000", "3,000", "floor"]
    for r in rows[:3]:
        assert r[header.index("exact")] == "yes"  # the incremental total equals the naive recount
        assert float(r[2]) > 0 and float(r[6]) > 0
        assert r[header.index("naive÷b2b")].endswith("×") and r[header.index("naive timing")] == "full, median of 2"
    assert rows[3][header.index("naive timing")] == "raw durable DuckDB transaction"
    for n in (300, 1000, 3000):
        t = res["turns"][n]
        assert t["exact"] is True and t["naive"]["total"] == t["tokens"]
        assert t["b2b"]["n"] == 40 and t["paced"]["n"] == 3
    assert res["floor"]["b2b"]["n"] == 40 and res["floor"]["paced"]["n"] == 3
    assert "human-paced (3 turns" in text


def test_the_targets_table(quick):
    _, text = quick
    header, rows = table(text, "figure ")
    assert header == list(report.TARGET_COLUMNS)
    figures = [r[0] for r in rows]
    assert figures == [
        "human-paced per turn at 1,000 ÷ floor", "human-paced per turn at 3,000 ÷ floor",
        "naive ÷ human-paced per turn at 1,000", "naive ÷ back-to-back per turn at 1,000",
        "per turn 3,000 ÷ 300, back-to-back", "per turn 3,000 ÷ 300, human-paced",
        "turns over 50 ms at 1,000, back-to-back", "turns over 50 ms at 1,000, human-paced",
        "fresh-process open, compacted 3,000 ÷ 400", "memory held, compacted 3,000 − 400",
        "file growth per compaction (of 3, vs the twin)",
        "two kernels, two sessions: throughput ÷ one kernel's", "two kernels, one session: throughput ÷ one kernel's"]
    for r in rows[:11]:
        assert r[3] in ("met", "NOT met")
    assert [r[3] for r in rows[11:]] == ["all turns landed"] * 2
    assert [r[2] for r in rows[:4]] == ["≤ 3×", "≤ 3×", "≥ 500×", "≥ 1000×"]


def test_the_other_sections(quick):
    res, text = quick
    o = res["open"]
    assert (o["small_n"], o["large_n"]) == (400, 3000)
    # a compacted session renders the system prompt, the summary and its tail of 100
    assert o["small"]["history_messages"] == o["large"]["history_messages"] == 102
    header, rows = table(text, "messages | rendered")
    assert header == ["messages", "rendered", "open ms", "held MB", "peak MB"] and [r[0] for r in rows] == ["400", "3,000"]
    g = res["growth"]
    assert g["compactions"] == 3 and g["failed"] == 0
    assert g["text_bytes"] > build.SUMMARY_TEXT_BYTES and g["limit_bytes"] == g["text_bytes"] + 4096
    k = res["kernels"]
    assert k["all_landed"] is True and k["turns"] == 20 and k["solo_tps"] > 0
    assert "file growth: 3 rolling compactions (0 failed)" in text
    assert cli.ok(res)


def test_main_runs_the_compaction_benchmark_and_refuses_bad_arguments(capsys):
    assert bench.main(["compaction", "--quick"]) == 0
    assert "ocw bench compaction" in capsys.readouterr().out
    for bad in (["turns", "--sizes", "19"], ["turns", "--sizes", "a,b"], ["turns", "--turns", "0"],
                ["nothing"]):
        with pytest.raises(SystemExit):
            bench.main(bad)


# -- the builder ----------------------------------------------------------------------------------
def test_built_session_shape(store):
    s = build.build_session(store, 40, verify=40)  # raises if a stored count differs from a recount
    path = s.branch()
    assert len(path) == 40 and s.node(path[0])["parent_id"] is None
    assert all(re.fullmatch(r"n_[0-9a-f]{16}", i) for i in path) and path == sorted(path)
    t0 = int(path[0][2:], 16) >> 20
    assert path[-1] == s.head == build.node_id("n_b", 39, t0)  # the Python id is the SQL one
    tool_outputs = [n for n in path if s.node(n)["content"][0]["type"] == "tool_result"]
    assert len(tool_outputs) == 4
    assert all(s.node(n)["tokens"] > build.TOOL_TOKENS * 0.9 for n in tool_outputs)
    with store.db.connect() as con:
        rows = con.execute("SELECT depth, cum_tokens, tokens, epoch FROM nodes WHERE session_id = ? ORDER BY seq",
                           [s.id]).fetchall()
    assert [r[0] for r in rows] == list(range(1, 41))
    running = 0
    for depth, cum, tokens, epoch in rows:
        running += tokens
        assert cum == running and epoch == 0


def test_a_unique_build_repeats_no_message_and_keeps_the_same_shape(store):
    def texts(s):  # each message's content without its tool-call id (unique in both builds)
        return [json.dumps([{k: v for k, v in b.items() if k not in ("id", "tool_use_id")} for b in s.node(n)["content"]])
                for n in s.branch()]

    templated = build.build_session(store, 200, name="t", verify=10)
    unique = build.build_session(store, 200, name="u", id_salt="u", unique=True, verify=200)  # every count checked
    assert len(set(texts(templated))) == build.N_CHAT + 2 * build.N_TOOL  # 200 messages from 96 templates
    assert len(set(texts(unique))) == 200
    kinds = [[(s.node(n)["role"], s.node(n)["content"][-1]["type"]) for n in s.branch()] for s in (templated, unique)]
    assert kinds[0] == kinds[1]  # the same roles and block kinds in the same places
    tool_lines = [ln for t in texts(unique) if "tool_result" in t for ln in json.loads(t)[0]["content"].splitlines()]
    assert len(tool_lines) > 1000 and len(set(tool_lines)) > 0.99 * len(tool_lines)


def test_two_builds_in_one_file_never_share_an_id(store):
    a = build.build_session(store, 30, name="a", id_salt="x")
    b = build.build_session(store, 30, name="b", id_salt="x")  # same salt: the times differ
    assert not set(a.branch()) & set(b.branch())


def test_compact_to_tail_keeps_that_many_messages(store):
    s = build.build_session(store, 60)
    before = s.branch()
    sid = build.compact_to_tail(s, 10)
    history = s.rendered_history()
    assert [m["id"] for m in history if m.get("role") != "system"] == [sid] + before[-10:]
    assert s.covered_ids(sid) == before[:50]


# -- pieces ---------------------------------------------------------------------------------------
def test_stats_counts_turns_strictly_over_50_ms():
    s = turns.stats([1.0, 2.0, 3.0, 50.0, 50.1, 80.0], [{"ms": 50.1}, {"ms": 80.0}])
    assert s["n"] == 6 and s["p50"] == 26.5 and s["max"] == 80.0
    assert s["over_50"] == 2  # 50.0 is not over
    assert [x["ms"] for x in s["slow"]] == [80.0, 50.1]
    assert turns.stats([])["n"] == 0


def test_the_watch_reports_what_slow_calls_spent(monkeypatch):
    monkeypatch.setattr(turns, "SLOW_MS", 0)  # every call counts as slow
    w = turns.Watch()
    with w:
        w.time(lambda: sum(range(10000)))
        w.time(lambda: __import__("gc").collect())
    assert len(w.ms) == 2 and len(w.slow) == 2
    assert w.slow[1]["gc_ms"] > 0 and w.slow[0]["gc_ms"] == 0  # the collection is seen
    assert all(x["cpu_ms"] >= 0 for x in w.slow)


def test_the_floor_is_one_insert_and_one_update_per_turn(tmp_path):
    f = turns.Floor(str(tmp_path / "floor.duckdb"))
    try:
        w = f.time_turns(5, warmup=2)
        assert len(w.ms) == 5
        assert f.con.execute("SELECT count(*), min(length(body)) FROM floor_rows").fetchone() == (7, 300)
        assert f.con.execute("SELECT count(*), max(rev) FROM floor_head").fetchone() == (1, 7)
    finally:
        f.close()


def test_naive_is_timed_on_a_fraction_above_the_limit_and_scaled(store, monkeypatch):
    s = build.build_session(store, 70)
    full = turns.naive_runs(store, s, 2)
    assert full["method"] == "full, median of 2" and full["total"] == s.occupancy()["estimated_total"]
    monkeypatch.setattr(turns, "NAIVE_FULL_MAX", 50)
    part = turns.naive_runs(store, s, 3)
    assert part["total"] is None and part["method"].startswith("1 in 7 messages timed, ×")
    sampled = len(turns._sampled_history(store, s)[0])
    assert 8 <= sampled <= 11  # every 7th of 70
    assert f"×{70 / sampled:.2f}" in part["method"]


def test_a_fresh_process_reports_its_open(store, tmp_path):
    s = build.build_session(store, 80, name="fresh")
    build.compact_to_tail(s, 20)
    store.close()
    got = fresh.measure(store.path, "fresh")
    assert got["messages"] == 22 and got["open_ms"] > 0 and got["rss_kib"] >= 0
    assert got["total"] > 0


def test_growth_is_measured_against_a_twin(tmp_path):
    from ocw.conversation.sessions import Store

    pair = []
    for label in ("c", "t"):
        st = Store(str(tmp_path / f"{label}.duckdb"))
        s = build.build_session(st, 200, window=128_000, name="g")
        build.compact_to_tail(s, 40)
        pair.append((st, s))
    try:
        g = growth.run(pair[0], pair[1], 2)
        assert g["compactions"] == 2 and g["failed"] == 0
        assert len(pair[0][1].summaries()) == 3 and len(pair[1][1].summaries()) == 1  # the twin never compacts
        assert g["growth_bytes"] == g["used_vs_twin"]
        assert g["resolution"] == 256 * 1024 / 2
    finally:
        for st, _ in pair:
            st.close()


def base_results(**changes) -> dict:
    """Made-up figures at the targets' boundaries, for the verdicts."""
    def s(p50, over=0):
        return {"n": 300, "p50": p50, "p99": p50, "max": p50, "over_50": over, "slow": []}

    res = {"sizes": [10, 100, 1000],
           "turns": {10: {"b2b": s(1.0), "paced": s(3.0), "naive": {"ms": 1.0}},
                     100: {"b2b": s(1.0), "paced": s(3.0), "naive": {"ms": 1000.0}},
                     1000: {"b2b": s(1.3), "paced": s(3.0), "naive": {"ms": 1.0}}},
           "floor": {"b2b": s(0.5), "paced": s(1.0)},
           "open": {"small": {"open_ms": 10.0, "rss_mib": 40.0}, "large": {"open_ms": 30.0, "rss_mib": 65.0},
                    "small_n": 1, "large_n": 2},
           "growth": {"compactions": 20, "growth_bytes": 6096.0, "limit_bytes": 6096.0, "resolution": 1.0}}
    for path, value in changes.items():
        *keys, last = path.split("__")
        d = res
        for k in keys:
            d = d[int(k) if k.isdigit() else k]
        d[last] = value
    return res


def verdicts(res) -> list[str]:
    return [r[3] for r in report.targets(res)]


def test_every_target_is_met_at_its_boundary():
    # paced 3.0 = 3× floor; naive 1000 ÷ 1.0 = 1000× b2b and ÷ 3.0 = 333× paced (NOT ≥ 500)
    assert verdicts(base_results()) == ["met", "met", "NOT met", "met", "met", "met", "met", "met", "met", "met", "met"]


@pytest.mark.parametrize("change, index", [
    ({"turns__100__paced": {"n": 300, "p50": 3.01, "p99": 1, "max": 1, "over_50": 0, "slow": []}}, 0),
    ({"turns__1000__b2b": {"n": 300, "p50": 1.31, "p99": 1, "max": 1, "over_50": 0, "slow": []}}, 4),
    ({"turns__100__b2b": {"n": 2000, "p50": 1.0, "p99": 1, "max": 51, "over_50": 1, "slow": []}}, 6),
    ({"open__large__open_ms": 30.1}, 8),
    ({"open__large__rss_mib": 65.1}, 9),
    ({"growth__growth_bytes": 6096.5}, 10),
])
def test_a_target_just_missed_is_not_met(change, index):
    got = verdicts(base_results(**change))
    assert got[index] == "NOT met"
    assert got[:index] + got[index + 1:] == [v for i, v in enumerate(verdicts(base_results())) if i != index]


def test_naive_ratios_at_their_boundaries():
    at = verdicts(base_results(turns__100__paced={"n": 300, "p50": 2.0, "p99": 1, "max": 1, "over_50": 0,
                                                    "slow": []}))
    assert at[2] == "met"  # 1000 ÷ 2.0 = 500×
    under = verdicts(base_results(turns__100__paced={"n": 300, "p50": 2.01, "p99": 1, "max": 1, "over_50": 0,
                                                       "slow": []}))
    assert under[2] == "NOT met"
    assert verdicts(base_results(turns__100__b2b={"n": 300, "p50": 1.001, "p99": 1, "max": 1, "over_50": 0,
                                                   "slow": []}))[3] == "NOT met"
