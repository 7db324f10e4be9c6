"""Benchmark: what a compaction costs against its floor — `python -m ocw.bench.compact_cost [--quick]`.

Issue 28, items 3 and 6. In the same run, on sessions built alike (`ocw.bench.build.build_session`:
one parent chain, 10 % of messages ~2k-token tool outputs, every message written for its place —
`unique` — so no line repeats) with a ~100k-token uncovered tail:

- "%compact": `Session.compact` with the offline summarizer, as `%compact` runs it (read,
  plan, summarize, memory and facts passes, what was lost, one write);
- "read + tokenize": its floor — the tail read from the file (`rendered_history`, the
  contents come from DuckDB each time) and every message tokenized once, as counted;
- "auto turn" / "normal turn": one `%%chat` turn (`Turn.run`, the offline model) on the
  same kind of session, once with a threshold the turn crosses (an automatic compaction
  runs inside it) and once with one it does not. Pruning is off in both, so the automatic
  compaction folds the same tail `%compact` does (with it on, stubbing the old tool
  outputs alone brings this session under any threshold worth testing).

The sessions are the offline model's own (`MODEL`): the offline summarizer is the model of a
session without a provider, so that is the session it compacts for a user. (With a session
of another model, e.g. gpt-4o's o200k tokens, the offline model would count the same input
a second time in its own cl100k tokens: a mix no user runs but by setting an own summarizer.)
The messages are unique because a compaction reads line by line and remembers what it read
(the facts pass's line memo, the summarizer's sentence dedup): sessions repeating the
builder's 96 templates let three lines in four be looked up instead of read (until session
12 they did; the figures of both are in the README).

Beside "%compact", the part of it the offline model itself took (its `complete`: counting
the request as a provider would and writing the summary — what a real summarizer does on
its server) and so ocw's own work, the rest. Each repetition builds a fresh session, so
every compaction starts from the same state.
Timings are printed with p50, p99 and max, the ratios of the p50s and the load average
(`os.getloadavg()`) before and after; never asserted. The checks — every compaction
succeeded, the summaries of all repetitions are identical, the auto turns compacted
and the normal turns did not, the tail is the size it claims — set the exit status.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from ocw.bench.build import build_session
from ocw.bench.turns import stats

WINDOW = 128_000
MODEL = "ocw-offline"  # the offline summarizer's own sessions (see above)
MESSAGES = 380  # ~103k tokens of tail at the builder's mix
QUICK_MESSAGES, QUICK_WINDOW = 60, 32_000
REPS, QUICK_REPS = 9, 2
AUTO_THRESHOLD, NORMAL_THRESHOLD = 0.5, 0.98  # the same session: crossed / not crossed
ASK = "What should we look at next in the worker logs?"


def read_and_tokenize(session) -> int:
    """The floor: the tail as the model reads it, from the file, each message tokenized once."""
    from ocw.text.tokens import count_message

    enc = session.encoding.name
    return sum(count_message(m["role"], m["content"], enc, m.get("name")) for m in session.rendered_history())


class TimedModel:
    """The model with a stopwatch on its answers (`complete`, `stream`); all else is the model's."""

    def __init__(self, model):
        self.model, self.ms = model, 0.0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def complete(self, *args, **kwargs):
        return self._time(self.model.complete, args, kwargs)

    def stream(self, *args, **kwargs):
        return self._time(self.model.stream, args, kwargs)

    def _time(self, fn, args, kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.ms += (time.perf_counter() - t0) * 1000


def _timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return (time.perf_counter() - t0) * 1000, value


def run(quick: bool = False, *, messages: int | None = None, window: int | None = None, reps: int | None = None,
        out=None, tmpdir: str | None = None) -> dict:
    """Time the four rows; print the table; return {rows, ratios, load, checks}."""
    from ocw.conversation.sessions import Store
    from ocw.conversation.turn import Turn
    from ocw.providers.offline import OfflineProvider
    from ocw.text.tokens import count_text

    out = out or sys.stdout
    n = messages or (QUICK_MESSAGES if quick else MESSAGES)
    window = window or (QUICK_WINDOW if quick else WINDOW)
    reps = reps or (QUICK_REPS if quick else REPS)
    provider = TimedModel(OfflineProvider(context_window=window))
    times = {"compact": [], "model": [], "own": [], "floor": [], "auto": [], "normal": []}
    summaries, tails, failures = set(), [], []
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="ocw-bench-compact-cost-", dir=tmpdir) as d:
        store = Store(os.path.join(d, "cost.duckdb"))
        try:
            def fresh(k: int, tag: str):
                return build_session(store, n, model=MODEL, window=window, name=f"cost-{tag}-{k}", id_salt=f"c{tag}{k}_",
                                     verify=4, unique=True)

            warm = fresh(0, "warm")  # the encodings load once per kernel: not part of any row
            count_text("warm", warm.encoding.name)
            count_text("warm", provider.encoding)
            warm.compact(provider=provider)
            for k in range(reps + 1):  # repetition 0 warms the file and the code paths
                s = fresh(k, "c")
                floor_ms, tail = _timed(lambda: read_and_tokenize(s))
                provider.ms = 0.0
                compact_ms, res = _timed(lambda: s.compact(provider=provider))
                model_ms = provider.ms
                if res.outcome != "succeeded":
                    failures.append(f"%compact: {res.outcome} {res.reason}")
                    continue
                summary = s._rows.get(res.summary_id)
                summaries.add(repr(s._contents([summary])[res.summary_id]))
                tails.append(tail)
                if k:
                    times["floor"].append(floor_ms)
                    times["compact"].append(compact_ms)
                    times["model"].append(model_ms)
                    times["own"].append(compact_ms - model_ms)
                for kind, threshold in (("auto", AUTO_THRESHOLD), ("normal", NORMAL_THRESHOLD)):
                    t = fresh(k, kind[0])
                    ms, r = _timed(lambda: Turn(t, provider, threshold=threshold, prune=False).run(ASK))
                    compacted = [c for c in r.compactions if c.outcome == "succeeded" and c.trigger == "auto"]
                    if (kind == "auto") != bool(compacted) or len(r.compactions) != len(compacted):
                        failures.append(f"{kind} turn: {[(c.trigger, c.outcome) for c in r.compactions]}")
                    elif k:
                        times[kind].append(ms)
        finally:
            store.close()
    load.append(os.getloadavg())
    rows = {key: stats(ms) for key, ms in times.items()}
    ratios = {"compact_vs_floor": rows["compact"]["p50"] / rows["floor"]["p50"] if times["floor"] else float("nan"),
              "own_vs_floor": rows["own"]["p50"] / rows["floor"]["p50"] if times["floor"] else float("nan"),
              "auto_vs_normal": rows["auto"]["p50"] / rows["normal"]["p50"] if times["normal"] else float("nan")}
    checks = {"compactions_succeeded": not failures, "same_summary": len(summaries) == 1,
              "tail_tokens": min(tails) if tails else 0, "failures": failures}
    result = {"messages": n, "window": window, "reps": reps, "rows": rows, "ratios": ratios, "load": load,
              "checks": checks}
    print(format_report(result), file=out)
    return result


LABELS = (("compact", "%compact, offline summarizer"), ("model", "  of which the offline model"),
          ("own", "  of which ocw's own work"), ("floor", "read + tokenize the tail"),
          ("auto", "turn with an automatic compaction"), ("normal", "normal turn"))


def format_report(r: dict) -> str:
    c = r["checks"]
    lines = [f"ocw bench compact_cost — {r['messages']:,} messages, {c['tail_tokens']:,}-token tail, window "
             f"{r['window']:,}, {r['reps']} runs each, same run; load average "
             + " → ".join("/".join(f"{x:.2f}" for x in la) for la in r["load"]),
             f"{'':34}  {'p50 ms':>9}  {'p99 ms':>9}  {'max ms':>9}"]
    for key, label in LABELS:
        s = r["rows"][key]
        lines.append(f"{label:34}  {s['p50']:9,.1f}  {s['p99']:9,.1f}  {s['max']:9,.1f}")
    lines.append(f"%compact ÷ read+tokenize: {r['ratios']['compact_vs_floor']:.1f}× (target ≤ 3×; ocw's own work "
                 f"alone {r['ratios']['own_vs_floor']:.1f}×); "
                 f"auto turn ÷ normal turn: {r['ratios']['auto_vs_normal']:.1f}× (target ≤ 3×)")
    lines.append("checks: " + ("every compaction succeeded" if c["compactions_succeeded"] else "FAILED: " + "; ".join(c["failures"]))
                 + ", " + ("one summary for every run" if c["same_summary"] else "SUMMARIES DIFFER"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ocw.bench.compact_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_MESSAGES} messages, {QUICK_REPS} runs")
    ap.add_argument("--messages", type=int, default=None, help=f"messages per session (default {MESSAGES})")
    ap.add_argument("--reps", type=int, default=None, help=f"timed runs (default {REPS})")
    args = ap.parse_args(argv)
    r = run(args.quick, messages=args.messages, reps=args.reps)
    return 0 if r["checks"]["compactions_succeeded"] and r["checks"]["same_summary"] else 1


if __name__ == "__main__":
    sys.exit(main())
