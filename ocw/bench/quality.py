"""Quality benchmark (issue 22): what the model still knows after many compactions.

`python -m ocw.bench.quality [--quick] [--sessions N] [--turns LO HI] [--windows 16384 8192]`
(`make quality`; `make quality QUICK=1`).

Sessions come from `ocw.bench.quality_gen` (planted facts of every kind in
varied wording, some changed, retracted or closed later, long tool outputs
among them). Every user step runs through the real `%%chat` path — a
`Turn` on a real DuckDB session with the offline model and automatic
compaction at 80 % of the window; tool steps are stored as a call and its
result, as a turn with tools stores them. The last turn is a probe: what the
provider receives for it (system prompt and every message, exactly) is the
context scored.

Scores, per kind: recall = current facts whose every check string occurs in
the context; staleness errors = values that were changed, retracted or closed
and occur in the context without the statement that made them stale. Beside
ocw, in the same run and on the same transcript: keep-last-N (the last 80 %
of the window) and a structural fallback (an identifier extractor over what
falls out of the window, newest first, in a quarter of it, then the tail).
Also counted: compactions that grew the context, and the memory's largest
share of the window. Figures are printed, never asserted (tests check the
shape and the invariants).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import defaultdict

from ocw.bench.quality_gen import KINDS, generate

THRESHOLD = 0.8
PROBE = "Where do we stand? Summarise what is current before we continue."
METHODS = ("ocw", "keep-last-N", "structural")


class Recording:
    """The offline provider, recording what each chat request sends."""

    def __init__(self, inner):
        self._inner = inner
        self.last_sent = ""

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def stream(self, messages, *, system=None, **kw):
        from ocw.text.tokens import render_block

        parts = [system or ""] + [render_block(b) if isinstance(b, dict) else str(b)
                                  for m in messages for b in (m["content"] if isinstance(m["content"], list)
                                                              else [{"type": "text", "text": m["content"]}])]
        self.last_sent = "\n".join(parts)
        return self._inner.stream(messages, system=system, **kw)


def _occurs(value: str, text: str) -> bool:
    # Whole tokens: `128` is not found in `128.4` or `1280`, `run_1` not in `run_10`.
    return re.search(r"(?<![\w.])" + re.escape(value) + r"(?![\w]|\.\d)", text) is not None


def score(context: str, facts) -> dict:
    """{kind: [kept, total]} for current facts, and the stale values shown."""
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    stale = []
    for f in facts:
        if f.current and f.checks:
            by_kind[f.kind][1] += 1
            by_kind[f.kind][0] += all(_occurs(c, context) for c in f.checks)
        for v in f.stale:
            if _occurs(v, context) and not (f.killer and f.killer in context):
                stale.append((f.kind, v))
    return {"recall": dict(by_kind), "stale": stale}


def _newest_within(items: list[str], room: int, cost) -> tuple[list[str], int]:
    """The newest items whose costs add up to at most `room` (stopping at the first that
    does not fit), in their original order, and what they cost."""
    kept, used = [], 0
    for item in reversed(items):
        n = cost(item)
        if used + n > room:
            break
        kept.insert(0, item)
        used += n
    return kept, used


def baselines(transcript: list[str], window: int, encoding: str) -> dict[str, str]:
    from ocw.context.facts import extract_identifiers
    from ocw.text.tokens import count_text

    room = int(window * THRESHOLD)
    tail, _ = _newest_within(transcript, room, lambda line: count_text(line, encoding))
    keep = "\n".join(tail)
    # Structural: identifiers of what fell out, newest first, in a quarter of the window.
    out_text = "\n".join(transcript[: len(transcript) - len(tail)])
    idents = list(dict.fromkeys(reversed(extract_identifiers(out_text))))
    # idents is newest first: take from its front, the same rule as the tails
    chosen, used_i = _newest_within(idents[::-1], window // 4, lambda i: count_text(i, encoding) + 1)
    chosen.reverse()
    s_tail, _ = _newest_within(tail, room - used_i, lambda line: count_text(line, encoding))
    return {"keep-last-N": keep, "structural": "Identifiers: " + "; ".join(chosen) + "\n" + "\n".join(s_tail)}


def run_session(gen, window: int, workdir: str) -> dict:
    """Run one generated session through the real path; score ocw and the baselines."""
    import ocw
    from ocw.conversation.turn import Turn
    from ocw.providers.offline import OfflineProvider

    store = ocw.Store(f"{workdir}/q_{gen.seed}_{window}.duckdb")
    try:
        s = store.create_session(model="ocw-offline", context_window=window)
        prov = Recording(OfflineProvider(context_window=window))
        transcript, grew, compactions, mem_max = [], 0, 0, 0
        for k, step in enumerate(gen.steps):
            if step.kind == "tool":
                tid = f"q{k}"
                s.append_many([("assistant", [{"type": "tool_use", "id": tid, "name": "run_cell",
                                               "input": {"code": "show()"}}]),
                               ("tool", [{"type": "tool_result", "tool_use_id": tid, "content": step.text}])])
                transcript.append(f"[tool] {step.text}")
                continue
            res = Turn(s, prov, threshold=THRESHOLD).run(step.text)
            transcript += [f"[user] {step.text}", f"[assistant] {res.text}"]
            for c in res.compactions:
                if c.outcome == "succeeded":
                    compactions += 1
                    grew += c.tokens_after >= c.tokens_before
                    mem_max = max(mem_max, s.occupancy()["breakdown"].get("memory", 0))
        Turn(s, prov, threshold=THRESHOLD).run(PROBE)
        contexts = {"ocw": prov.last_sent, **baselines(transcript, window, s.encoding.name)}
        return {"phrasings": gen.phrasings, "contexts": contexts, "scores": {m: score(c, gen.facts) for m, c in contexts.items()}, "grew": grew,
                "compactions": compactions, "memory_max": mem_max, "turns": sum(st.kind == "user" for st in gen.steps),
                "tokens": sum(len(t) for t in transcript) // 4}
    finally:
        store.close()


def table(results: list[dict], window: int) -> str:
    rows = [f"window {window:,}: {len(results)} sessions, {sum(r['turns'] for r in results):,} turns, "
            f"{sum(r['compactions'] for r in results)} compactions, "
            f"{sum(r['grew'] for r in results)} grew the context, memory ≤ "
            f"{max((r['memory_max'] for r in results), default=0):,} tokens "
            f"({max((r['memory_max'] for r in results), default=0) / window:.1%} of the window)",
            "| kind | " + " | ".join(METHODS) + " |", "|---|" + "---|" * len(METHODS)]
    for kind in KINDS + ("all",):
        cells = []
        for m in METHODS:
            kept = tot = 0
            for r in results:
                for k, (a, b) in r["scores"][m]["recall"].items():
                    if kind in ("all", k):
                        kept, tot = kept + a, tot + b
            cells.append(f"{kept / tot:.0%} ({kept}/{tot})" if tot else "–")
        rows.append(f"| {kind} | " + " | ".join(cells) + " |")
    for ps, label in (("A", "all, wording set A"), ("B", "all, wording set B"), ("C", "all, held-out set C")):
        part = [r for r in results if r.get("phrasings") == ps]
        if part and len(part) < len(results):
            cells = []
            for m in METHODS:
                kept = sum(a for r in part for a, _ in r["scores"][m]["recall"].values())
                tot = sum(b for r in part for _, b in r["scores"][m]["recall"].values())
                cells.append(f"{kept / tot:.0%} ({kept}/{tot})" if tot else "–")
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
    rows.append("| staleness errors | " + " | ".join(
        str(sum(len(r["scores"][m]["stale"]) for r in results)) for m in METHODS) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ocw.bench.quality", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 sessions of 60 turns at 8k, one per wording set")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--turns", type=int, nargs=2, default=(150, 400))
    ap.add_argument("--windows", type=int, nargs="+", default=(16384, 8192))
    ap.add_argument("--phrasings", choices=("A", "B", "C", "all"), default="all",
                    help="A, B or C: one set of wordings (C is the held-out one); all: take turns")
    ap.add_argument("--show-stale", action="store_true", help="list the stale values each method showed")
    a = ap.parse_args(argv)
    if a.quick:
        a.sessions, a.turns, a.windows = 3, (60, 60), (8192,)
    import random

    rng = random.Random(22)
    gens = [generate(1000 + n, rng.randint(*a.turns),
                     phrasings=("ABC"[n % 3] if a.phrasings == "all" else a.phrasings)) for n in range(a.sessions)]
    with tempfile.TemporaryDirectory() as d:
        for w in a.windows:
            t0 = time.perf_counter()
            results = [run_session(g, w, d) for g in gens]
            print(table(results, w))
            if a.show_stale:
                for m in METHODS:
                    print(m, [v for r in results for v in r["scores"][m]["stale"]])
            print(f"({time.perf_counter() - t0:.0f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
