"""Benchmarks: `python -m ocw.bench occupancy|compaction|all` (`all`: occupancy,
then the compaction benchmark of `ocw.bench_compaction`, both at their full
default sizes unless `--quick`).

occupancy — the per-turn cost of keeping the occupancy figure current, against
a naive full re-tokenization of the same history, on sessions of 1k, 10k and
100k messages (10 % of them ~2k-token tool outputs, as tool_result blocks).

- Build (`build_session`, shared with `ocw.bench_compaction`): the nodes are
  bulk-inserted with SQL (INSERT … SELECT over a small table of message
  templates whose token counts were computed once, by the same function
  `Session.append` uses; a sample is recounted to prove it), each tool call with
  a unique id, then the session is loaded as a kernel would load it. 100k
  messages build in a few seconds.
- Per-turn: count the new message + append it (one DuckDB transaction) + read
  `occupancy()`; the median of `--turns` turns per size, after a short warm-up,
  timed in rounds that interleave the sizes so that each is measured under the
  same machine load.
- Naive: tokenize every message of `rendered_history()` again (the DuckDB read
  of the history is not timed, which only flatters naive). Timed in full, the
  best of a few runs for small sizes, once for the largest; `--naive-fraction`
  times every k-th message instead and scales linearly (the output says which).

Targets: at 100k the per-turn update ≥ 1000× faster than naive, and per-turn at
100k within 1.5× of 10k. Timings are printed, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

from .render import render_blocks
from .tokens import FRAME_TOKENS, count_message, get_encoding, render_message

DEFAULT_SIZES = (1000, 10000, 100000)
QUICK_SIZES = (100, 400)
TOOL_EVERY = 10  # one message in ten is a tool output (the one before it, its call)
TOOL_TOKENS = 2000
N_CHAT, N_TOOL = 64, 16  # templates: chat messages, tool calls, tool outputs (N_TOOL each)
SYSTEM_PROMPT = "You are a careful assistant working in a Jupyter notebook."

_WORDS = (
    "the context window holds every message a model reads next turn so a long session slowly fills it "
    "compaction folds older turns into a rolling summary while the recent tail stays verbatim "
    "duckdb stores each node once and the kernel keeps counts in memory with prefix sums "
    "occupancy is one subtraction and a lookup never a recount of the whole history "
    "tool outputs are long logs tables stack traces and file listings that dominate the budget "
    "数据 上下文 压缩 会话 模型 窗口 工具 结果 摘要 分支"
).split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _tool_output(rng: random.Random, tokens: int, enc) -> str:
    lines: list[str] = []
    while True:
        for _ in range(40):
            lines.append(f"{rng.randrange(10**6):06d} INFO worker[{rng.randrange(64)}] {_text(rng, 8)} "
                         f"status={rng.choice(['ok', 'retry', 'fail'])} t={rng.random() * 100:.3f}ms")
        ids = enc.encode_ordinary("\n".join(lines))
        if len(ids) >= tokens:
            return enc.decode(ids[:tokens])


def _templates(session, rng: random.Random) -> list[tuple[int, str, str, int]]:
    """(k, role, content JSON with @ID@ for the tool id, tokens) for chat messages, tool
    calls and tool outputs, counted exactly as `Session.append` counts: the rendered form,
    framing included. The tool id is not part of the rendered text (render_block), so
    making it unique per call never changes a count."""
    enc_name = session.encoding.name
    enc = get_encoding(enc_name)
    cap = session.tool_result_cap
    rows = []

    def add(role, blocks):
        tokens = count_message(role, render_blocks(blocks, cap, enc_name), enc_name, None)
        rows.append((len(rows), role, json.dumps(blocks, ensure_ascii=False), tokens))

    for i in range(N_CHAT):
        add("user" if i % 2 == 0 else "assistant", [{"type": "text", "text": _text(rng, rng.randint(20, 120))}])
    for i in range(N_TOOL):
        add("assistant", [{"type": "text", "text": _text(rng, 12)},
                          {"type": "tool_use", "id": "call_@ID@", "name": "run_shell",
                           "input": {"cmd": f"tail -n 400 /var/log/job{i}.log"}}])
    for i in range(N_TOOL):
        add("tool", [{"type": "tool_result", "tool_use_id": "call_@ID@",
                      "content": _tool_output(rng, TOOL_TOKENS, enc)}])
    return rows


def build_session(store, n: int, *, model: str = "gpt-4o", window: int = 1_000_000_000, seed: int = 7,
                  name: str | None = None, id_prefix: str = "n_b", verify: int = 24):
    """A session of `n` messages on one parent chain, HEAD and rev set, returned loaded as a
    kernel would load it. Every TOOL_EVERY-th message is a ~TOOL_TOKENS-token tool output
    answering the assistant's tool call just before it (each call with a unique id).
    Bulk SQL: INSERT … SELECT over a small table of templates. `verify` sampled rows (and
    one whole cycle of templates) are recounted; a stored count that differs raises."""
    s = store.create_session(model=model, context_window=window, name=name or f"bench-{n}",
                             system_prompt=SYSTEM_PROMPT)
    rng = random.Random(seed)
    tpl = _templates(s, rng)
    with store.db.transaction() as con:
        con.execute("CREATE TEMP TABLE IF NOT EXISTS bench_tpl (k INTEGER, role VARCHAR, content VARCHAR, tokens INTEGER)")
        con.execute("DELETE FROM bench_tpl")
        con.executemany("INSERT INTO bench_tpl VALUES (?, ?, ?, ?)", tpl)
        # Message i: a tool output when i % 10 == 9 (answering the call at i - 1, both with the
        # id call_<i - i % 10>), its call when i % 10 == 8, otherwise chat alternating user / assistant.
        con.execute(
            f"""
            INSERT INTO nodes (id, session_id, parent_id, role, name, content, tokens, encoding, depth, cum_tokens, epoch)
            SELECT CAST(? AS VARCHAR) || i, ?, CASE WHEN i = 0 THEN NULL ELSE CAST(? AS VARCHAR) || (i - 1) END, t.role, NULL,
                   replace(t.content, '@ID@', CAST(i - (i % {TOOL_EVERY}) AS VARCHAR))::JSON, t.tokens, ?,
                   i + 1, sum(t.tokens) OVER (ORDER BY i ROWS UNBOUNDED PRECEDING), 0
            FROM range(?) r(i)
            JOIN bench_tpl t ON t.k = CASE
                WHEN i % {TOOL_EVERY} = {TOOL_EVERY - 1} THEN {N_CHAT + N_TOOL} + (i // {TOOL_EVERY}) % {N_TOOL}
                WHEN i % {TOOL_EVERY} = {TOOL_EVERY - 2} THEN {N_CHAT} + (i // {TOOL_EVERY}) % {N_TOOL}
                ELSE ((i // 2) * 2 % {N_CHAT}) + (i % 2) END
            ORDER BY i
            """,
            [id_prefix, s.id, id_prefix, s.encoding.name, n],
        )
        con.execute("UPDATE sessions SET head_id = ?, rev = rev + 1 WHERE id = ?", [f"{id_prefix}{n - 1}", s.id])
        con.execute("DROP TABLE bench_tpl")
    with store.db.connect() as con:
        con.execute("CHECKPOINT")
        sample = con.execute(
            f"SELECT role, content, tokens FROM nodes WHERE session_id = ? "
            f"USING SAMPLE reservoir({int(verify)} ROWS) REPEATABLE ({int(seed)})", [s.id]).fetchall()
        sample += con.execute(  # and one whole cycle: every template kind
            f"SELECT role, content, tokens FROM nodes WHERE session_id = ? AND seq <= (SELECT min(seq) + {TOOL_EVERY}"
            " FROM nodes WHERE session_id = ?)", [s.id, s.id]).fetchall()
    enc = s.encoding.name
    for role, content, tokens in sample:  # the precomputed counts are the real ones
        real = count_message(role, render_blocks(json.loads(content), s.tool_result_cap, enc), enc, None)
        if real != tokens:
            raise RuntimeError(f"bench build: stored count {tokens} != recount {real}")
    s.sync()
    return s


def _turn_message(rng: random.Random, i: int) -> tuple[str, str]:
    return ("user" if i % 2 == 0 else "assistant", _text(rng, rng.randint(30, 90)))


def measure_turns(session, turns: int, *, warmup: int = 5, seed: int = 11) -> list[float]:
    """Per-turn cost in ms: count + append (Session.append counts the message) + occupancy()."""
    rng = random.Random(seed)
    for i in range(warmup):
        role, text = _turn_message(rng, i)
        session.append(role, text)
        session.occupancy()
    out = []
    for i in range(turns):
        role, text = _turn_message(rng, i)
        t0 = time.perf_counter()
        session.append(role, text)
        session.occupancy()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def naive_recount(history: list[dict], encoding: str, step: int = 1) -> tuple[int, float]:
    """Tokenize every `step`-th message of a rendered history again.
    Returns (tokens counted, seconds)."""
    enc = get_encoding(encoding)
    t0 = time.perf_counter()
    total = 0
    for m in history[::step]:
        total += FRAME_TOKENS + len(enc.encode_ordinary(render_message(m["role"], m["content"], m.get("name"))))
    return total, time.perf_counter() - t0


def bench_occupancy(sizes=DEFAULT_SIZES, turns: int = 50, *, naive_fraction: float | None = None,
                    model: str = "gpt-4o", out=None, tmpdir: str | None = None, rounds: int = 5,
                    quick: bool = False) -> list[dict]:
    """Build every size, then time the turns in `rounds` interleaved rounds (so every size
    is measured under the same machine load), then time naive per size."""
    from .sessions import Store

    out = out or sys.stdout
    print(f"ocw bench occupancy — model {model}, {turns} turns per size (median, in {rounds} rounds "
          f"interleaved across sizes), {100 // TOOL_EVERY} % of messages are ~{TOOL_TOKENS}-token tool outputs",
          file=out)
    results = []
    with tempfile.TemporaryDirectory(prefix="ocw-bench-", dir=tmpdir) as d:
        built = []
        for n in sizes:
            t0 = time.perf_counter()
            store = Store(os.path.join(d, f"bench-{n}.duckdb"))
            s = build_session(store, n, model=model)
            built.append((n, store, s, time.perf_counter() - t0, s.occupancy()["estimated_total"]))
            measure_turns(s, 0, warmup=5)  # tokenizer, DuckDB's index and caches warm
        per_turn: dict[int, list[float]] = {n: [] for n in sizes}
        rounds = max(1, min(rounds, turns))
        for r in range(rounds):
            k = turns // rounds + (1 if r < turns % rounds else 0)
            for n, _, s, _, _ in built:
                per_turn[n] += measure_turns(s, k, warmup=0, seed=1000 * r + 11)
        for n, store, s, build_s, tokens_before in built:
            history = s.rendered_history()
            enc = s.encoding.name
            est = s.occupancy()["estimated_total"]
            if naive_fraction:
                step = max(1, round(1 / naive_fraction))
                _, secs = naive_recount(history, enc, step)
                naive_ms = secs * 1000 * step
                how = f"1 message in {step} timed, ×{step}"
                full_total = None
            else:
                reps = 3 if n <= 10000 else 1
                runs = [naive_recount(history, enc) for _ in range(reps)]
                full_total = runs[0][0]
                naive_ms = min(r[1] for r in runs) * 1000
                how = "full, best of 3" if reps > 1 else "full, timed once"
            del history
            # The naive count of rendered_history (plus tool definitions: none here) is what
            # occupancy must equal: check it while we are here.
            agree = None if full_total is None else (full_total == est)
            times = sorted(per_turn[n])
            med = statistics.median(times)
            results.append({
                "messages": n,
                "history_tokens": tokens_before,
                "per_turn_ms": med,
                "per_turn_p90_ms": times[int(0.9 * (len(times) - 1))],
                "naive_ms": naive_ms,
                "ratio": naive_ms / med if med else float("inf"),
                "naive_method": how,
                "build_s": build_s,
                "recount_agrees": agree,
                "db_opens": store.db.opens,
            })
            store.close()
    _print_table(results, out)
    return results


def _print_table(rows: list[dict], out) -> None:
    print(file=out)
    head = f"{'messages':>9} | {'tokens':>11} | {'per-turn ms':>11} | {'p90 ms':>7} | {'naive ms':>10} | " \
           f"{'ratio':>8} | {'build s':>7} | {'exact':>5} | naive timing"
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        exact = "-" if r["recount_agrees"] is None else ("yes" if r["recount_agrees"] else "NO")
        print(f"{r['messages']:>9,} | {r['history_tokens']:>11,} | {r['per_turn_ms']:>11.3f} | "
              f"{r['per_turn_p90_ms']:>7.3f} | {r['naive_ms']:>10.1f} | {r['ratio']:>7.0f}× | "
              f"{r['build_s']:>7.2f} | {exact:>5} | {r['naive_method']}", file=out)
    print(file=out)
    print("ratio = naive ÷ per-turn; per-turn = count + append + occupancy(); "
          "naive = re-tokenize rendered_history; exact = naive total == occupancy total", file=out)
    for a, b in zip(rows, rows[1:]):
        print(f"per-turn({b['messages']}) ÷ per-turn({a['messages']}) = "
              f"{b['per_turn_ms'] / a['per_turn_ms']:.2f}", file=out)
    big = rows[-1]
    if big["messages"] >= 100000:
        ok_ratio = big["ratio"] >= 1000
        print(f"target: at {big['messages']:,} per-turn ≥ 1000× faster than naive: "
              f"{'met' if ok_ratio else 'NOT met'} ({big['ratio']:.0f}×)", file=out)
        prev = [r for r in rows if r["messages"] * 10 == big["messages"]]
        if prev:
            k = big["per_turn_ms"] / prev[0]["per_turn_ms"]
            print(f"target: per-turn({big['messages']:,}) within 1.5× of per-turn({prev[0]['messages']:,}): "
                  f"{'met' if k <= 1.5 else 'NOT met'} ({k:.2f}×)", file=out)


def bench_compaction(sizes, turns, *, quick: bool = False, model: str = "gpt-4o", **_) -> int:
    """The compaction benchmark of `ocw.bench_compaction`, at its own full default sizes
    (10k, 100k), or its quick sizes with --quick; `--sizes`/`--turns` are occupancy's.
    Returns its exit code: 1 if prepare and naive ever built different summarizer input."""
    from . import bench_compaction

    return bench_compaction.main(["--model", model] + (["--quick"] if quick else []))


BENCHES = {"occupancy": bench_occupancy, "compaction": bench_compaction}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench", description="ocw benchmarks")
    p.add_argument("bench", choices=[*BENCHES, "all"],
                   help="which benchmark to run; all = occupancy, then compaction (both full size unless --quick)")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="occupancy: comma-separated session sizes in messages (default 1000,10000,100000)")
    p.add_argument("--turns", type=int, default=50, help="occupancy: turns measured per size (median)")
    p.add_argument("--naive-fraction", type=float, default=None,
                   help="occupancy: time naive on this fraction of the messages and scale linearly (default: all)")
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few turns (for tests)")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.replace("_", "").split(",") if x.strip()]
    turns = args.turns
    if args.quick:
        sizes, turns = list(QUICK_SIZES), min(turns, 5)
    if any(n < TOOL_EVERY for n in sizes):
        p.error(f"sizes must be at least {TOOL_EVERY} messages")
    rc = 0
    for name in (BENCHES if args.bench == "all" else [args.bench]):
        res = BENCHES[name](sizes, turns, naive_fraction=args.naive_fraction, model=args.model, quick=args.quick)
        rc = max(rc, res if isinstance(res, int) else 0)
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
