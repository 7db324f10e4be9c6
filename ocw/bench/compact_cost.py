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
    """Time the rows; print the table; return {rows, ratios, load, checks}."""
    from ocw.conversation import read_ahead
    from ocw.conversation.sessions import Store
    from ocw.conversation.turn import Turn
    from ocw.providers.offline import OfflineProvider
    from ocw.text.memo import forget_all
    from ocw.text.tokens import count_text

    out = out or sys.stdout
    n = messages or (QUICK_MESSAGES if quick else MESSAGES)
    window = window or (QUICK_WINDOW if quick else WINDOW)
    reps = reps or (QUICK_REPS if quick else REPS)
    provider = TimedModel(OfflineProvider(context_window=window))
    times: dict[str, list[float]] = {key: [] for key, _ in LABELS}
    tails, failures, differ = [], [], 0
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="ocw-bench-compact-cost-", dir=tmpdir) as d:
        store = Store(os.path.join(d, "cost.duckdb"))
        try:
            def fresh(k: int, tag: str, ahead: bool):
                """A session of its own text (seed k): none of it read yet in this process, or
                (`ahead`) read ahead as the kernel reads each turn's messages after the turn."""
                s = build_session(store, n, model=MODEL, window=window, name=f"cost-{tag}-{k}", id_salt=f"c{tag}{k}_",
                                  verify=4, unique=True, seed=100 + k)
                forget_all()
                if ahead:
                    t0 = time.perf_counter()
                    read_ahead.read_session(s, provider)
                    if not read_ahead.wait(120):
                        failures.append("the read-ahead did not finish")
                    if tag == "a" and k:
                        times["read_ahead"].append((time.perf_counter() - t0) * 1000)
                return s

            def compacted(s) -> tuple[float, float, str | None]:
                provider.ms = 0.0
                ms, res = _timed(lambda: s.compact(provider=provider))
                if res.outcome != "succeeded":
                    failures.append(f"%compact: {res.outcome} {res.reason}")
                    return ms, provider.ms, None
                return ms, provider.ms, repr(s._contents([s._rows.get(res.summary_id)])[res.summary_id])

            warm = fresh(0, "warm", False)  # the encodings load once per kernel: not part of any row
            count_text("warm", warm.encoding.name)
            count_text("warm", provider.encoding)
            warm.compact(provider=provider)
            for k in range(reps + 1):  # repetition 0 warms the file and the code paths
                s = fresh(k, "c", False)
                floor_ms, tail = _timed(lambda: read_and_tokenize(s))
                forget_all()
                cold_ms, cold_model, cold_text = compacted(s)
                ahead_ms, ahead_model, ahead_text = compacted(fresh(k, "a", True))  # the same text, read ahead
                differ += cold_text != ahead_text
                tails.append(tail)
                if k:
                    times["floor"].append(floor_ms)
                    times["compact"].append(ahead_ms)
                    times["model"].append(ahead_model)
                    times["own"].append(ahead_ms - ahead_model)
                    times["cold"].append(cold_ms)
                for kind, threshold, ahead in (("auto", AUTO_THRESHOLD, True), ("auto_cold", AUTO_THRESHOLD, False),
                                               ("normal", NORMAL_THRESHOLD, True)):
                    t = fresh(k, kind, ahead)
                    ms, r = _timed(lambda: Turn(t, provider, threshold=threshold, prune=False).run(ASK))
                    read_ahead.wait(120)  # the turn's own messages, read after it: not part of the next row
                    auto_done = [c for c in r.compactions if c.outcome == "succeeded" and c.trigger == "auto"]
                    if (kind != "normal") != bool(auto_done) or len(r.compactions) != len(auto_done):
                        failures.append(f"{kind} turn: {[(c.trigger, c.outcome) for c in r.compactions]}")
                    elif k:
                        times[kind].append(ms)
        finally:
            store.close()
    load.append(os.getloadavg())
    rows = {key: stats(ms) for key, ms in times.items()}

    def ratio(a: str, b: str) -> float:
        return rows[a]["p50"] / rows[b]["p50"] if times[a] and times[b] else float("nan")

    ratios = {"compact_vs_floor": ratio("compact", "floor"), "own_vs_floor": ratio("own", "floor"),
              "cold_vs_floor": ratio("cold", "floor"), "auto_vs_normal": ratio("auto", "normal"),
              "auto_cold_vs_normal": ratio("auto_cold", "normal")}
    checks = {"compactions_succeeded": not failures, "same_summary": differ == 0,
              "tail_tokens": min(tails) if tails else 0, "failures": failures}
    result = {"messages": n, "window": window, "reps": reps, "rows": rows, "ratios": ratios, "load": load,
              "checks": checks}
    print(format_report(result), file=out)
    return result


LABELS = (("compact", "%compact, read ahead"), ("model", "  of which the offline model"),
          ("own", "  of which ocw's own work"), ("cold", "%compact, nothing read ahead"),
          ("read_ahead", "the read-ahead itself (idle time)"), ("floor", "read + tokenize the tail"),
          ("auto", "turn with an automatic compaction"), ("auto_cold", "  the same, nothing read ahead"),
          ("normal", "normal turn"))


def format_report(r: dict) -> str:
    c, q = r["checks"], r["ratios"]
    lines = [f"ocw bench compact_cost — {r['messages']:,} messages, {c['tail_tokens']:,}-token tail, window "
             f"{r['window']:,}, {r['reps']} runs each, same run; load average "
             + " → ".join("/".join(f"{x:.2f}" for x in la) for la in r["load"]),
             f"{'':36}  {'p50 ms':>9}  {'p99 ms':>9}  {'max ms':>9}"]
    for key, label in LABELS:
        s = r["rows"][key]
        lines.append(f"{label:36}  {s['p50']:9,.1f}  {s['p99']:9,.1f}  {s['max']:9,.1f}")
    lines.append(f"%compact ÷ read+tokenize: {q['compact_vs_floor']:.1f}× read ahead (target ≤ 3×; ocw's own work "
                 f"alone {q['own_vs_floor']:.1f}×), {q['cold_vs_floor']:.1f}× with nothing read ahead; "
                 f"auto turn ÷ normal turn: {q['auto_vs_normal']:.1f}× read ahead (target ≤ 3×), "
                 f"{q['auto_cold_vs_normal']:.1f}× with nothing read ahead")
    lines.append("checks: " + ("every compaction succeeded" if c["compactions_succeeded"] else "FAILED: " + "; ".join(c["failures"]))
                 + ", " + ("the same summary read ahead or not" if c["same_summary"]
                           else "READ-AHEAD CHANGED A SUMMARY"))
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
