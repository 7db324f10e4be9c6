"""File growth per compaction: what one rolling compaction adds to the DuckDB file.

A session is compacted `rounds` times through the real path (`Session.compact`:
plan, prepare, summarize, finish, persist) with a fake summarizer that returns a
fixed ~2 KB text at once; some turns (chat and a tool output) are appended
between compactions, so each one folds new messages onto the old summary. The
file's size is read after a CHECKPOINT just before and just after each
compaction (the WAL then holds nothing), so the growth is the compaction's
alone. The figure to compare with is what a compaction must store: the
summary's text (as stored, with the identifiers `finish` appends) plus 4 KB.
"""
from __future__ import annotations

import os
import random
import statistics

from .build import TOOL_TOKENS, summary_text, words

ROUND_TURNS = 8  # messages appended between two compactions (one of them a ~2k-token tool output)
KEEP_RECENT = 1000  # tokens each compaction keeps verbatim


class FakeSummarizer:
    """Answers every summarizer call at once with the same ~2 KB text."""

    name = "bench"
    model = "bench"
    offline = True

    def __init__(self, context_window: int, text: str | None = None):
        self.context_window = context_window
        self.text = text or summary_text()
        self.calls = 0

    def complete(self, messages, system=None, max_tokens=None, **_):
        self.calls += 1
        return type("Reply", (), {"text": self.text, "usage": None})()


def _file_bytes(store) -> int:
    with store.db.connect() as con:
        con.execute("CHECKPOINT")
    wal = store.path + ".wal"
    return os.path.getsize(store.path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)


def _append_round(session, rng: random.Random, r: int) -> None:
    msgs = [("user" if i % 2 == 0 else "assistant", words(rng, rng.randint(40, 90))) for i in range(ROUND_TURNS - 1)]
    log = "\n".join(f"{i:06d} INFO round {r} {words(rng, 10)}" for i in range(TOOL_TOKENS // 16))
    msgs.append(("user", [{"type": "text", "text": "the job log:\n" + log}]))
    session.append_many(msgs)


def run(store, session, rounds: int, seed: int = 5) -> dict:
    """`rounds` rolling compactions of `session`; per-compaction growth and text sizes."""
    rng = random.Random(seed)
    provider = FakeSummarizer(session.context_window)
    growth, texts, failed = [], [], 0
    for r in range(rounds):
        _append_round(session, rng, r)
        before = _file_bytes(store)
        res = session.compact(keep_recent_tokens=KEEP_RECENT, provider=provider)
        after = _file_bytes(store)
        if res.outcome != "succeeded":
            failed += 1
            continue
        growth.append(after - before)
        text = session.node(res.summary_id)["content"][0]["text"]
        texts.append(len(text.encode()))
    mean_text = statistics.mean(texts) if texts else 0.0
    mean_growth = statistics.mean(growth) if growth else float("nan")
    return {"compactions": len(growth), "failed": failed, "growth_bytes": mean_growth,
            "growth_max": max(growth) if growth else 0, "text_bytes": mean_text,
            "limit_bytes": mean_text + 4096, "file_bytes": _file_bytes(store)}
