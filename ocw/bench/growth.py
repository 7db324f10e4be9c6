"""File growth per compaction: what one rolling compaction adds to the DuckDB file.

Two identical files are built (the same session, compacted once to a summary
and a recent tail) and fed the same turns, round after round; in one of them
each round ends with a rolling compaction through the real path
(`Session.compact`: plan, prepare, summarize, finish, persist), with a fake
summarizer that returns a ~2 KB text at once (other words each time). Figures, every size read
after a CHECKPOINT (the WAL then holds nothing):

- per compaction, as the issue asks: the size just before and just after each
  compaction, averaged — of the file, and of its used blocks (the file minus its
  free blocks). Printed, but not the verdict: DuckDB writes 256 KB blocks
  copy-on-write, and every checkpoint rewrites the table's last, growing row
  group — the turns' rows with the summary's — so blocks freed and allocated
  for the turns land in whichever checkpoint comes next. The file's delta
  swings by ±1.5 MB (its mean is negative: the compaction's checkpoint gives
  back the free blocks the turns' checkpoint left), and the used blocks' delta
  charges the compactions with blocks the turns need;
- against the twin: (growth of the compacted file − growth of the twin) ÷
  compactions, in used blocks — the compactions' own cost, whatever the turns
  and the block allocator did — and in file size (printed: it carries the free
  blocks either file happens to hold at the end, up to ~6 blocks, 1.5 MB).
  The verdict takes the used blocks, resolved to a block ÷ the number of
  compactions (printed), and compares them with what a compaction must store:
  the summary's text (as stored, with the identifiers `finish` appends) + 4 KB.
"""
from __future__ import annotations

import os
import random
import statistics

from ocw.bench.build import TOOL_TOKENS, summary_text, words

ROUND_TURNS = 8  # messages appended between two compactions (one of them a ~2k-token job log)
KEEP_RECENT = 1000  # tokens each compaction keeps verbatim


class FakeSummarizer:
    """Answers every summarizer call at once with a ~2 KB text: a fixed size, but not
    the same words each time — identical texts would compress to nothing in DuckDB's
    dictionary and flatter the figure."""

    name = "bench"
    model = "bench"
    offline = True

    def __init__(self, context_window: int, seed: int = 3):
        self.context_window = context_window
        self.rng = random.Random(seed)
        self.calls = 0

    def complete(self, messages, system=None, max_tokens=None, **_):
        self.calls += 1
        text = summary_text(self.rng)
        return type("Reply", (), {"text": text, "usage": None})()


def sizes(store) -> tuple[int, int, int]:
    """(file bytes, used bytes, block size) after a CHECKPOINT."""
    with store.db.connect() as con:
        con.execute("CHECKPOINT")
        block, total, free = con.execute(
            "SELECT block_size, total_blocks, free_blocks FROM pragma_database_size()").fetchone()
    return os.path.getsize(store.path), (total - free) * block, block


def _append_round(session, rng: random.Random, r: int) -> None:
    msgs = [("user" if i % 2 == 0 else "assistant", words(rng, rng.randint(40, 90))) for i in range(ROUND_TURNS - 1)]
    log = "\n".join(f"{i:06d} INFO round {r} {words(rng, 10)}" for i in range(TOOL_TOKENS // 16))
    msgs.append(("user", [{"type": "text", "text": "the job log:\n" + log}]))
    session.append_many(msgs)


def run(compacted: tuple, twin: tuple, rounds: int, seed: int = 5) -> dict:
    """`compacted`, `twin`: (store, session) built alike. `rounds` rounds of turns on
    both, each ending with a rolling compaction of the first only."""
    (store, s), (twin_store, t) = compacted, twin
    rng_s, rng_t = random.Random(seed), random.Random(seed)
    provider = FakeSummarizer(s.context_window)
    start, twin_start = sizes(store), sizes(twin_store)
    deltas, used, texts, failed = [], [], [], 0
    for r in range(rounds):
        _append_round(s, rng_s, r)
        _append_round(t, rng_t, r)
        before = sizes(store)
        res = s.compact(keep_recent_tokens=KEEP_RECENT, provider=provider)
        after = sizes(store)
        deltas.append(after[0] - before[0])
        used.append(after[1] - before[1])
        sizes(twin_store)  # the same checkpoints on the twin
        if res.outcome != "succeeded":
            failed += 1
            continue
        texts.append(len(s.node(res.summary_id)["content"][0]["text"].encode()))
    end, twin_end = sizes(store), sizes(twin_store)
    n = max(1, len(texts))
    file_vs_twin = ((end[0] - start[0]) - (twin_end[0] - twin_start[0])) / n
    used_vs_twin = ((end[1] - start[1]) - (twin_end[1] - twin_start[1])) / n
    text = statistics.mean(texts) if texts else 0.0
    per_used = sum(used) / n
    return {"compactions": len(texts), "failed": failed, "per_compaction": sum(deltas) / n, "per_compaction_used": per_used,
            "file_vs_twin": file_vs_twin, "used_vs_twin": used_vs_twin, "resolution": end[2] / n,
            "growth_bytes": used_vs_twin, "text_bytes": text, "limit_bytes": text + 4096,
            "file_bytes": end[0], "twin_bytes": twin_end[0]}
