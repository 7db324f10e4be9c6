"""The quality benchmark (issue 22) in its quick mode: the generator plants every kind,
the scoring counts what it should, and one session through the real %%chat path
(Turn, DuckDB, the offline model, automatic compaction) keeps the invariants."""
from __future__ import annotations

import re

from ocw.bench import quality as q
from ocw.bench import quality_gen as gen


def test_generator_plants_every_kind_with_changes_retractions_and_closings():
    g = gen.generate(7, 150, "A")
    assert {f.kind for f in g.facts} == set(gen.KINDS)
    assert sum(s.kind == "user" for s in g.steps) == 150
    assert any(s.kind == "tool" and len(s.text) > 2_000 for s in g.steps)  # long tool outputs
    stale = [f for f in g.facts if f.stale]
    assert {f.kind for f in stale} >= {"path", "column", "setting", "todo"}
    assert all(f.killer for f in stale)
    text = "\n".join(s.text for s in g.steps)
    for f in g.facts:  # every planted value is in the session, and unique to its fact
        for v in f.checks + f.stale:
            assert v in text
    assert gen.generate(7, 150, "A").steps[5].text == g.steps[5].text  # deterministic


def test_the_three_wording_sets_share_no_template():
    for kind, (a, b, c) in gen._P.items():
        assert not set(a) & set(b) and not set(a) & set(c) and not set(b) & set(c), kind
    ga, gb, gc = (gen.generate(3, 80, p) for p in "ABC")
    assert "TODO:" in "\n".join(s.text for s in ga.steps) or "Remember to" in "\n".join(s.text for s in ga.steps)
    assert "TODO:" not in "\n".join(s.text for s in gb.steps + gc.steps)
    assert gc.phrasings == "C" and any("Still pending:" in s.text or "At some point we have to" in s.text
                                       for s in gc.steps)


def test_scoring_counts_recall_and_staleness():
    f_cur = gen.Fact("setting", ["4792"], stale=["319"], killer="Change the rate to 4792.")
    f_gone = gen.Fact("path", [], stale=["data/a_1.csv"], killer="Forget data/a_1.csv, it is corrupt.", current=False)
    r = q.score("rate = 4792; data/a_1.csv", [f_cur, f_gone])
    assert r["recall"] == {"setting": [1, 1]} and r["stale"] == [("path", "data/a_1.csv")]
    r = q.score("rate = 47920; Forget data/a_1.csv, it is corrupt. old 319", [f_cur, f_gone])
    assert r["recall"] == {"setting": [0, 1]}  # a longer number is not the value
    assert q.score("rate 4792.5", [f_cur])["recall"] == {"setting": [0, 1]}  # nor a decimal that begins with it
    assert r["stale"] == [("setting", "319")]  # the retraction excuses its value; the change was not said


def test_quick_run_through_the_real_chat_path(tmp_path):
    g = gen.generate(1000, 60, "A")
    r = q.run_session(g, 8192, str(tmp_path))
    assert r["compactions"] >= 2 and r["grew"] == 0
    assert 0 < r["memory_max"] <= 8192 * 0.10  # the memory within its share of the window
    sent = r["contexts"]["ocw"]
    assert "[Session memory:" in sent and sent.rstrip().endswith(q.PROBE)  # exactly what the provider got
    ocw_s, keep = r["scores"]["ocw"], r["scores"]["keep-last-N"]
    kept = sum(a for a, _ in ocw_s["recall"].values())
    total = sum(b for _, b in ocw_s["recall"].values())
    assert total == sum(f.current and bool(f.checks) for f in g.facts)
    assert kept >= total - 1 and kept > sum(a for a, _ in keep["recall"].values())
    assert ocw_s["stale"] == []
    # The table names every kind and every method.
    t = q.table([r], 8192)
    assert all(re.search(rf"^\| {k} \|", t, re.M) for k in gen.KINDS) and "keep-last-N" in t
