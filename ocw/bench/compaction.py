"""Benchmark: compaction prepare — `python -m ocw.bench.compaction [--quick] [--sizes N ...]`.

"Prepare" is everything a compaction does before its LLM call, through the
engine's own entry point `ocw.context.engine.prepare`: sync with the file,
occupancy, the rendered-history read, cut selection over cached token counts,
and the summarizer's input (transcript lines, per-line token estimates from the
cached counts, the planned chunks). It is timed on a warm session (opened once,
as a kernel holds it), best of a few runs.

"Naive" is the same work done the obvious way, measured in the same run on
the same file: a recursive-CTE walk of the branch from HEAD (content included),
then re-tokenizing every message to choose the cut, then tokenizing every
transcript line again to group it into calls. Both paths must produce the same
cut and the same summarizer input; the table says whether they did.

Two states per size: "fresh" — no summary yet, the first compaction folds
nearly the whole history (prepare must read all of it); "rolling" — the steady
state, a summary (written through the real persist path) covering all but the
last 400 messages, so the next compaction folds only the turns since.

Sessions are built by the benchmarks' builder `ocw.bench.build.build_session`:
bulk SQL (INSERT … SELECT over a small table of templates whose token counts
were computed once, by the function `Session.append` uses; a sample of rows is
recounted to prove it), one parent chain, HEAD and rev set, 10 % of messages
~2k-token tool outputs, each tool call with a unique id. Timings are printed,
never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from ocw.bench.build import WORDS, TOOL_EVERY, TOOL_TOKENS
from ocw.bench.build import build_session as _build
from ocw.context.cut import find_cut_index
from ocw.conversation.compaction import summarizer_window
from ocw.context.engine import CUT_NOTE, SUMMARY_SYSTEM, WRAPPER_TOKENS, plan_compaction, prepare, summary_budget, transcript_line
from ocw.context.render import block_text, render_blocks
from ocw.context.graph import SUMMARY_NAME
from ocw.text.tokens import count_message, count_text, truncate_to_tokens

DEFAULT_SIZES = (10_000, 100_000)
QUICK_SIZES = (300, 1_000)
WINDOW = 128_000
STATES = ("fresh", "rolling")  # no summary yet / a summary and the turns since
ROLLING_TAIL = 400  # messages after the summary in the rolling state


class _NoCallProvider:
    """A summarizer that must never be called: prepare makes no LLM call."""

    name = "bench"
    model = "bench"
    offline = True

    def __init__(self, context_window: int):
        self.context_window = context_window

    def complete(self, *a, **kw):  # pragma: no cover - would be a bug in prepare
        raise AssertionError("prepare called the summarizer")


def build_session(store, n: int, *, window: int = WINDOW, model: str = "gpt-4o", seed: int = 7,
                  verify: int = 24):
    """The benchmarks' builder (`ocw.bench.build.build_session`) with this benchmark's
    window, name and node ids; returns the session loaded."""
    return _build(store, n, model=model, window=window, seed=seed, name=f"bench-compaction-{n}",
                  id_salt="n_c", verify=verify)


# -- the naive path -----------------------------------------------------------------------------
_WALK = """
WITH RECURSIVE chain(id, parent_id, role, name, content, depth) AS (
    SELECT id, parent_id, role, name, content, 0 FROM nodes WHERE id = ?
    UNION ALL
    SELECT n.id, n.parent_id, n.role, n.name, n.content, c.depth + 1
    FROM nodes n JOIN chain c ON n.id = c.parent_id
)
SELECT id, role, name, content FROM chain ORDER BY depth DESC
"""


def naive_prepare(store, session, window: int) -> dict:
    """The obvious way: walk the branch from HEAD with a recursive CTE (content
    included), find the active summary by comparing its covers with the walked
    branch, re-tokenize the summary and every uncovered message to choose the cut,
    then group the transcript into calls the pre-refactor way (tokenizing every
    line, and the partial summary once per line)."""
    enc = session.encoding.name
    cap = session.tool_result_cap
    with store.db.connect() as con:
        con.execute("SET enable_progress_bar = false")
        head = con.execute("SELECT head_id FROM sessions WHERE id = ?", [session.id]).fetchone()[0]
        rows = con.execute(_WALK, [head]).fetchall()
        summaries = con.execute(
            "SELECT id, content, parent_id, cover_count FROM nodes WHERE session_id = ? AND role = 'llm'"
            " AND name = 'context/summary' ORDER BY seq DESC", [session.id]).fetchall()
    branch = [r[0] for r in rows]
    start, old_text, old_tokens = 0, "", 0
    for sid, content, boundary, count in summaries:  # the newest whose boundary is on the branch
        covers = branch[:count] if count and len(branch) >= count and branch[count - 1] == boundary else None
        if covers:
            blocks = json.loads(content)
            start, old_text = len(covers), block_text(blocks)
            old_tokens = count_message("llm", blocks, enc, SUMMARY_NAME)
            break
    messages = []
    for nid, role, name, content in rows[start:]:
        blocks = render_blocks(json.loads(content), cap, enc)
        msg = {"id": nid, "role": role, "content": blocks, "tokens": count_message(role, blocks, enc, name)}
        if name:
            msg["name"] = name
        messages.append(msg)
    cut = find_cut_index(messages, window)
    folded = messages[:cut.index]
    replaced = old_tokens + sum(m["tokens"] for m in folded)
    out_budget = summary_budget(replaced, window)
    in_budget = window - out_budget - (count_text(SUMMARY_SYSTEM, enc) + 64)
    partial, chunks, chunk, chunk_tokens = old_text, 0, 0, 0
    lines = []
    for m in folded:
        line = transcript_line(m)
        room = in_budget - count_text(partial, enc) - WRAPPER_TOKENS
        tokens = count_text(line, enc)
        if tokens > room:
            line = truncate_to_tokens(line, max(64, room - 32), enc) + CUT_NOTE
            tokens = count_text(line, enc)
        if chunk and chunk_tokens + tokens > room:
            chunks += 1
            chunk, chunk_tokens = 0, 0
        chunk += 1
        chunk_tokens += tokens
        lines.append(line)
    chunks += bool(chunk)
    return {"cut": cut.index, "lines": lines, "chunks": chunks}


def make_rolling(session, tail: int) -> None:
    """Compact the session as an earlier run would have: a summary (through the real
    persist path) covering all but the last `tail` messages."""
    boundary = session.branch()[-tail - 1]
    text = "Summary of the earlier conversation. " + " ".join(WORDS) * 12
    session._persist_summary(text, boundary, session.head, session.generation)


def prepare_session(session, provider):
    """What a compaction does before its LLM call, through the engine's entry points:
    sync, occupancy, rendered history, the cut, the summarizer's input."""
    session.sync()
    tokens_before = session.occupancy()["total"]
    plan = plan_compaction(session.rendered_history(), session.context_window, None, session.calibration)
    if isinstance(plan, tuple):
        return tokens_before, None
    return tokens_before, prepare(plan, provider, window=summarizer_window(provider, session),
                                  calibration=session.calibration, encoding=session.encoding.name)


# -- the run ------------------------------------------------------------------------------------
def _best(fn, reps: int):
    best, value = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def run(sizes=None, quick: bool = False, *, window: int = WINDOW, model: str = "gpt-4o", reps: int | None = None,
        out=None, tmpdir: str | None = None) -> list[dict]:
    """Build each size, time prepare and the naive path, print the table, return its rows."""
    from ocw.conversation.sessions import Store

    out = out or sys.stdout
    sizes = tuple(sizes or (QUICK_SIZES if quick else DEFAULT_SIZES))
    print(f"ocw bench compaction — prepare (everything but the LLM call) vs naive, same run; "
          f"window {window:,}, model {model}, {100 // TOOL_EVERY} % of messages ~{TOOL_TOKENS:,}-token tool outputs",
          file=out)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ocw-bench-compaction-", dir=tmpdir) as d:
        for n in sizes:
            store = Store(os.path.join(d, f"compaction-{n}.duckdb"))
            try:
                t0 = time.perf_counter()
                s = build_session(store, n, window=window, model=model)
                build_s = time.perf_counter() - t0
                provider = _NoCallProvider(window)
                k = reps or (1 if quick else (3 if n <= 20_000 else 2))
                for state in STATES:
                    if state == "rolling":  # the steady state: a summary, and the turns since
                        make_rolling(s, min(ROLLING_TAIL, n // 2))
                    prep_s, (before, prep) = _best(lambda: prepare_session(s, provider), k)
                    naive_k = 1 if quick or (n > 20_000 and state == "fresh") else k
                    naive_s, naive = _best(lambda: naive_prepare(store, s, window), naive_k)
                    folded = len(prep.plan.new_messages) if prep else 0
                    same = naive["cut"] == folded and naive["lines"] == (prep.lines if prep else [])
                    rows.append({
                        "messages": n,
                        "state": state,
                        "history_tokens": before,
                        "folded": folded,
                        "chunks": len(prep.chunks) if prep else 0,
                        "prepare_ms": prep_s * 1000,
                        "naive_ms": naive_s * 1000,
                        "ratio": naive_s / prep_s if prep_s else float("inf"),
                        "same_input": same,
                        "build_s": build_s,
                    })
            finally:
                store.close()
    print(format_table(rows), file=out)
    return rows


COLUMNS = ("messages", "state", "rendered tokens", "folded", "calls planned", "prepare ms", "naive ms", "naive ÷ prepare",
           "same input")


def format_table(rows: list[dict]) -> str:
    body = [[f"{r['messages']:,}", r["state"], f"{r['history_tokens']:,}", f"{r['folded']:,}", f"{r['chunks']:,}",
             f"{r['prepare_ms']:,.1f}", f"{r['naive_ms']:,.1f}", f"{r['ratio']:,.1f}×",
             "yes" if r["same_input"] else "NO"] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(COLUMNS)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(COLUMNS), line(["-" * w for w in widths])] + [line(b) for b in body])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ocw.bench.compaction", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", help=f"session sizes (default {DEFAULT_SIZES})")
    ap.add_argument("--quick", action="store_true", help=f"small sizes {QUICK_SIZES}, one run each")
    ap.add_argument("--window", type=int, default=WINDOW)
    ap.add_argument("--model", default="gpt-4o")
    ap.add_argument("--reps", type=int, default=None, help="runs per measurement (best is kept)")
    args = ap.parse_args(argv)
    rows = run(args.sizes, args.quick, window=args.window, model=args.model, reps=args.reps)
    return 0 if all(r["same_input"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
