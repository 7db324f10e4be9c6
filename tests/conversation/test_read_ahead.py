"""The read-ahead (ocw/conversation/read_ahead.py): each turn's messages are read on a worker
after the turn, so a later compaction finds its lines read — and stores exactly what it
stores with nothing read ahead."""
from __future__ import annotations

import threading

import pytest
import tiktoken

import ocw
from ocw.bench.quality_gen import generate
from ocw.context import compaction_log, facts
from ocw.context.engine import transcript_line
from ocw.context.render import block_text
from ocw.conversation import read_ahead
from ocw.conversation.turn import Turn
from ocw.providers import offline_reading
from ocw.providers.offline import OfflineProvider
from ocw.text.memo import forget_all

WINDOW = 32_000


@pytest.fixture
def store(tmp_path):
    s = ocw.Store(str(tmp_path / "ahead.duckdb"))
    yield s
    s.close()


def said(seed: int = 3, turns: int = 24) -> list[str]:
    """What a user says over a long session: settings, decisions, TODOs, in varied words."""
    return [st.text for st in generate(seed, turns, "B").steps if st.kind == "user"]


def converse(store, provider, texts, name="a"):
    s = store.create_session(name=name, model="ocw-offline", context_window=WINDOW)
    for text in texts:
        Turn(s, provider, threshold=0.98, prune=False).run(text)
    assert read_ahead.wait(60)
    return s


def copy_of(store, s, name):
    """The same messages in a session of their own, appended directly: nothing read ahead."""
    c = store.create_session(name=name, model="ocw-offline", context_window=WINDOW)
    c.append_many([(m["role"], m["content"]) for m in (s.node(i) for i in s.branch())])
    return c


def stored(s, res) -> tuple:
    """What a compaction wrote that a user or the model reads: the summary's blocks and its record."""
    (entry,) = compaction_log.entries(s.metadata)
    record = {k: entry.get(k) for k in ("lost", "folded", "before")}
    return s.node(res.summary_id)["content"], record, res.summarised_count, res.tokens_after


def test_a_compaction_after_the_read_ahead_stores_what_it_stores_without(store):
    provider = OfflineProvider(context_window=WINDOW)
    a = converse(store, provider, said())
    b = copy_of(store, a, "b")
    ahead = a.compact(keep_recent_tokens=200, provider=provider)  # the turns' messages were read after each turn
    forget_all()
    cold = b.compact(keep_recent_tokens=200, provider=provider)  # a kernel that read nothing
    assert ahead.outcome == cold.outcome == "succeeded" and ahead.summarised_count > 20
    assert stored(a, ahead) == stored(b, cold)
    text = block_text(stored(a, ahead)[0])
    assert "Session memory" in text or "Key identifiers" in text  # the passes that read ahead had work to do


def test_the_read_ahead_covers_every_line_a_compaction_folds(store, monkeypatch):
    provider = OfflineProvider(context_window=WINDOW)
    texts = said(5, 20)
    a = converse(store, provider, texts)
    folded = a.rendered_history()[1:-2]  # all but the system prompt and the last turn (kept)
    lines = {ln for m in folded for ln in (transcript_line(m) + "\n" + block_text(m["content"])).split("\n") if ln}
    matched, read, encoded = [], [], []

    class Spy:  # the facts pass's matcher: which lines it is given afresh
        def finditer(self, text):
            matched.append(text)
            return real.finditer(text)

    real = facts._RX
    monkeypatch.setattr(facts, "_RX", Spy())
    orig_read = offline_reading._read_lines
    monkeypatch.setattr(offline_reading, "_read_lines", lambda ls: read.extend(ls) or orig_read(ls))
    orig_encode = tiktoken.Encoding.encode_ordinary
    monkeypatch.setattr(tiktoken.Encoding, "encode_ordinary", lambda self, t: encoded.append(t) or orig_encode(self, t))
    res = a.compact(keep_recent_tokens=200, provider=provider)
    assert res.outcome == "succeeded" and res.summarised_count >= len(folded) - 2
    assert matched and not lines & set(matched)  # it matched new text only (the summaries)
    assert not [ln for ln in read if ln.strip()]  # the summarizer read no line afresh (no summary before this one)
    long_said = [t for t in texts[:-1] if len(t) > 40]
    assert long_said and not [t for t in long_said if any(t in e for e in encoded)]  # and tokenized none


def test_a_turn_hands_over_its_own_messages_only(store, monkeypatch):
    provider = OfflineProvider(context_window=WINDOW)
    s = converse(store, provider, said(7, 4))
    handed = []
    monkeypatch.setattr(read_ahead, "_submit", lambda sid, messages, enc, off: handed.append((sid, messages, off)))
    Turn(s, provider, threshold=0.98, prune=False).run("Set the batch size to 64 from now on.")
    assert len(handed) == 1
    sid, messages, off = handed[0]
    assert sid == s.id and [m["role"] for m in messages] == ["user", "assistant"]
    assert block_text(messages[0]["content"]) == "Set the batch size to 64 from now on."
    assert off == provider.encoding  # the offline model summarizes: its reading is kept too
    assert read_ahead.read_session(s, None) == len(s.tail())  # no ids: the whole tail
    assert handed[-1][2] is None  # a real model reads on its server
    empty = store.create_session(name="empty", model="ocw-offline", context_window=WINDOW)
    assert read_ahead.read_session(empty, provider) == 0 and len(handed) == 2  # nothing to hand over


def test_a_reading_that_fails_costs_nothing_but_its_time(store, monkeypatch, caplog):
    provider = OfflineProvider(context_window=WINDOW)

    def broken(*args):
        raise RuntimeError("cannot read")

    monkeypatch.setattr(read_ahead, "read_lines", broken)
    s = converse(store, provider, said(9, 10))  # every turn's reading fails on the worker
    worker = [t for t in threading.enumerate() if t.name == "ocw-read-ahead"]
    assert len(worker) == 1 and worker[0].daemon and worker[0].is_alive()  # one, still there for the next job
    assert s.compact(keep_recent_tokens=200, provider=provider).outcome == "succeeded"  # it reads for itself

    def refuse(*a, **k):
        raise RuntimeError("no read-ahead")

    monkeypatch.setattr(read_ahead, "read_session", refuse)
    result = Turn(s, provider, threshold=0.98, prune=False).run("One more question about the loss.")
    assert result.text and len(result.node_ids) == 2  # the turn is stored and answered all the same
