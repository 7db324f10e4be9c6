"""What a compaction lost (issue 27): per compaction, the identifiers and memory items
the folded turns had and the new context (new summary + kept turns) does not, kept in
the compaction log and listed by %summary; after many compactions %summary says so once,
with %new --from-summary as the way out."""
from __future__ import annotations

import re

import pytest

import ocw
from ocw.context import compaction_log
from ocw.context.facts import extract_identifiers
from ocw.context.lost import LIST_MAX, MANY, lines, lost
from ocw.context.render import block_text
from ocw.notebook.summary_view import summary_text


@pytest.fixture
def sess(tmp_path):
    store = ocw.Store(str(tmp_path / "l.duckdb"))
    s = store.create_session(context_window=4_000)
    yield s
    store.close()


def turns(s, start, n):
    s.append_many([("user", f"Turn {i}: tickets " + ", ".join(f"OPS-{10 * i + j}" for j in range(10)) + ". "
                    + "words " * 30) if i % 2 == 0 else ("assistant", f"Checked run_{i}. " + "words " * 30)
                   for i in range(start, start + n)])


def context_text(s) -> str:
    return "\n".join(block_text(m["content"]) for m in s.rendered_history())


def test_the_lost_identifiers_are_in_the_folded_turns_and_nowhere_in_the_new_context(sess, fake_summarizer):
    turns(sess, 0, 40)
    source = "\n".join(block_text(sess.node(n)["content"]) for n in sess.branch())
    result = sess.compact(provider=fake_summarizer("The user reviewed many handlers."))
    (entry,) = compaction_log.entries(sess.metadata)
    gone = entry["lost"]
    assert gone["n_identifiers"] > LIST_MAX and len(gone["identifiers"]) == LIST_MAX  # capped, counted in full
    now = context_text(sess)
    for ident in gone["identifiers"]:
        assert ident in source and not re.search(r"(?<![\w.])" + re.escape(ident) + r"(?![\w])", now), ident
    present = [i for i in extract_identifiers(source) if re.search(r"(?<![\w.])" + re.escape(i) + r"(?![\w])", now)]
    assert present and not set(present) & set(gone["identifiers"])
    assert gone["identifiers"] == sorted(gone["identifiers"], key=source.rfind, reverse=True)  # newest first
    text = summary_text(sess)
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("lost ")]
    assert line.strip() == (f"lost {gone['n_identifiers']} identifiers: " + ", ".join(gone["identifiers"])
                            + f" (+{gone['n_identifiers'] - LIST_MAX} more)")
    assert result.summary_id == entry["summary"]


def test_lost_memory_items_and_the_lines():
    class Item:
        def __init__(self, kind, key, value, status="current"):
            self.kind, self.key, self.value, self.status = kind, key, value, status

        def line(self):
            return f"- {self.value} (turn 1)"

    old = [Item("setting", "retries", "retries = 3"), Item("fact", "db", "db is DuckDB"),
           Item("fact", "old", "gone thing", status="retracted")]
    got = lost("see conf/prod.yaml and OPS-4471", "OPS-4471 and db is DuckDB", old, [])
    assert got == {"identifiers": ["conf/prod.yaml"], "memory": ["retries = 3 (turn 1)"], "n_identifiers": 1,
                   "n_memory": 1}
    assert lines(got) == ["lost 1 identifiers: conf/prod.yaml", "lost 1 memory items: retries = 3 (turn 1)"]
    assert lines(None) == [] and lines({"identifiers": [], "n_identifiers": 0}) == []


def test_after_many_compactions_summary_says_so_once(sess, fake_summarizer):
    note = "%new --from-summary continues in a fresh session from here."
    for k in range(1, MANY + 1):
        turns(sess, 100 * k, 16)
        assert sess.compact(provider=fake_summarizer(f"Summary {k}.")).outcome == "succeeded"
        text = summary_text(sess)
        assert text.count(note) == (1 if k >= MANY else 0), k
    assert f"This session has been compacted {MANY} times" in text and MANY == 5


def test_at_most_twelve_of_each_are_listed_newest_first_and_all_are_counted():
    twelve = " ".join(f"OPS-{100 + k}" for k in range(1, 13))
    got = lost(twelve, "nothing kept", [], [])
    assert got["n_identifiers"] == 12 and got["identifiers"] == [f"OPS-{100 + k}" for k in range(12, 0, -1)]
    assert lines(got) == ["lost 12 identifiers: " + ", ".join(got["identifiers"])]  # all listed: no "more"
    got = lost(twelve + " OPS-113", "nothing kept", [], [])
    assert got["n_identifiers"] == 13 and got["identifiers"] == [f"OPS-{100 + k}" for k in range(13, 1, -1)]
    assert lines(got) == ["lost 13 identifiers: " + ", ".join(got["identifiers"]) + " (+1 more)"]
