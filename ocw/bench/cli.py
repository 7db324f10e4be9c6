"""`python -m ocw.bench all|turns|open|growth|kernels|compaction [--quick]`.

Runs the measurements in one process (and the fresh / paced / kernel child
processes they need), then prints the tables and issue 14's targets. `all`
runs every section at full size (10k / 100k / 1M messages, 2,000
back-to-back and 300 human-paced turns) and the compaction-prepare benchmark
(ocw.bench.compaction); `--quick` runs tiny sizes in well under a minute, for
the tests. Exit status 0 unless a check of correctness failed (a recount that
disagrees, a lost turn); an unmet timing target is printed, not an error.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from ocw.bench import fresh
from ocw.bench import growth
from ocw.bench import kernels
from ocw.bench import paced
from ocw.bench import report
from ocw.bench.build import TOOL_EVERY, build_session, compact_to_tail
from ocw.bench.turns import Floor, Watch, naive_runs, stats, time_turns

FULL = dict(sizes=(10_000, 100_000, 1_000_000), b2b=2000, paced=300, naive_runs=5, naive_runs_large=3,
            open_small=1000, open_tail=300, open_runs=5, growth_size=100_000, growth_rounds=100, kernel_turns=300)
QUICK = dict(sizes=(300, 1000, 3000), b2b=40, paced=3, naive_runs=2, naive_runs_large=2,
             open_small=400, open_tail=100, open_runs=1, growth_size=1000, growth_rounds=3, kernel_turns=20)
SECTIONS = ("turns", "open", "growth", "kernels")
ROUNDS = 5  # back-to-back turns are timed in rounds interleaved across the stores (same machine load)


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_turns(cfg: dict, d: str, model: str, res: dict) -> None:
    from ocw.conversation.sessions import Store

    sizes = sorted(cfg["sizes"])
    built = {}
    for n in sizes:
        t0 = time.perf_counter()
        store = Store(os.path.join(d, f"turns-{n}.duckdb"))
        s = build_session(store, n, model=model)
        built[n] = (store, s)
        _log(f"built {n:,} messages in {time.perf_counter() - t0:.1f} s")
    floor = Floor(os.path.join(d, "floor.duckdb"))
    b2b = {key: Watch() for key in [*sizes, "floor"]}
    for n in sizes:
        time_turns(built[n][1], 0, warmup=20)
    floor.time_turns(0, warmup=20)
    for r in range(ROUNDS):
        k = cfg["b2b"] // ROUNDS + (r < cfg["b2b"] % ROUNDS)
        for n in sizes:
            time_turns(built[n][1], k, seed=1000 * r + n, watch=b2b[n])
        floor.time_turns(k, watch=b2b["floor"])
    _log("back-to-back turns done")
    res["turns"], res["sizes"] = {}, sizes
    for n in sizes:
        store, s = built[n]
        nv = naive_runs(store, s, cfg["naive_runs"] if n < max(sizes) or len(sizes) == 1 else cfg["naive_runs_large"])
        occ = s.occupancy()
        res["turns"][n] = {"b2b": stats(b2b[n].ms, b2b[n].slow), "naive": nv, "tokens": occ["estimated_total"],
                           "exact": None if nv["total"] is None else nv["total"] == occ["estimated_total"]}
        store.close()
        _log(f"naive at {n:,}: {nv['ms']:,.0f} ms ({nv['method']})")
    floor.close()
    jobs = [("floor", "floor", os.path.join(d, "floor.duckdb"), "-")]
    jobs += [(str(n), "ocw", built[n][0].path, built[n][1].name) for n in sizes]
    out = paced.run(jobs, cfg["paced"])
    for n in sizes:
        res["turns"][n]["paced"] = stats(out[str(n)]["ms"], out[str(n)]["slow"])
        res["turns"][n]["paced_checkpoints"] = out[str(n)]["checkpoints"]
        res["turns"][n]["paced_rss_gain_mib"] = out[str(n)]["rss_gain_kib"] / 1024
    res["floor"] = {"b2b": stats(b2b["floor"].ms, b2b["floor"].slow),
                    "paced": stats(out["floor"]["ms"], out["floor"]["slow"])}
    res.update(b2b_turns=cfg["b2b"], paced_turns=cfg["paced"], pause=paced.PERIOD, paced_overlaps=out["floor"]["overlaps"],
               turn_files={n: (built[n][0].path, built[n][1].name) for n in sizes})
    _log("human-paced turns done")


def run_open(cfg: dict, d: str, model: str, res: dict) -> None:
    """A compacted session of `open_small` messages and one of the largest size (the
    turn benchmark's, if it ran), each a summary + `open_tail` messages."""
    from ocw.conversation.sessions import Store

    large_n = max(cfg["sizes"])
    cases = []
    for label, n in (("small", cfg["open_small"]), ("large", large_n)):
        path, name = res.get("turn_files", {}).get(n, (os.path.join(d, f"open-{n}.duckdb"), None))
        store = Store(path)
        s = store.open_session(name) if name else build_session(store, n, model=model, name=f"open-{n}")
        compact_to_tail(s, cfg["open_tail"])
        cases.append((label, path, s.name))
        store.close()
    figures = fresh.compare(cases, cfg["open_runs"], model)
    res["open"] = {**figures, "small_n": cfg["open_small"], "large_n": large_n}
    _log("fresh-process opens done")


def run_growth(cfg: dict, d: str, model: str, res: dict) -> None:
    from ocw.conversation.sessions import Store

    pair = []
    for label in ("growth", "twin"):
        store = Store(os.path.join(d, f"{label}.duckdb"))
        s = build_session(store, cfg["growth_size"], model=model, window=128_000, name="growth")
        compact_to_tail(s, cfg["open_tail"])
        pair.append((store, s))
    res["growth"] = growth.run(pair[0], pair[1], cfg["growth_rounds"])
    for store, _ in pair:
        store.close()
    _log("file growth done")


def run_kernels(cfg: dict, d: str, model: str, res: dict) -> None:
    res["kernels"] = kernels.run(cfg["kernel_turns"], model=model, tmpdir=d)
    _log("two kernels done")


RUNNERS = {"turns": run_turns, "open": run_open, "growth": run_growth, "kernels": run_kernels}


def run(sections=SECTIONS, *, quick: bool = False, model: str = "gpt-4o", tmpdir: str | None = None,
        out=None, **overrides) -> dict:
    """Run `sections`, print the tables to `out`, return the results."""
    cfg = {**(QUICK if quick else FULL), **overrides}
    out = out or sys.stdout
    res: dict = {"quick": quick}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ocw-bench-", dir=tmpdir) as d:
        for name in SECTIONS:
            if name in sections:
                RUNNERS[name](cfg, d, model, res)
    res["seconds"] = time.time() - t0
    print(f"ocw bench — model {model}; {100 // TOOL_EVERY} % of messages are ~2,000-token tool outputs; "
          f"{res['seconds']:.0f} s", file=out)
    print(report.render(res), file=out)
    return res


def ok(res: dict) -> bool:
    """Correctness, not speed: every exact recount agreed, every kernel turn landed."""
    exact = all(t["exact"] is not False for t in res.get("turns", {}).values())
    return exact and res.get("kernels", {}).get("all_landed", True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench", description="ocw benchmarks (issue 14's figures)")
    p.add_argument("bench", choices=[*SECTIONS, "compaction", "all"],
                   help="a section, or all of them and the compaction-prepare benchmark")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few turns (for the tests; under a minute)")
    p.add_argument("--sizes", help="comma-separated session sizes for the turn benchmark (default 10k,100k,1M)")
    p.add_argument("--turns", type=int, help="back-to-back turns per size (default 2,000)")
    p.add_argument("--paced-turns", type=int, help="human-paced turns per size (default 300)")
    p.add_argument("--model", default="gpt-4o")
    args = p.parse_args(argv)
    overrides = {}
    for key, value in (("b2b", args.turns), ("paced", args.paced_turns)):
        if value is not None:
            if value < 1:
                p.error("--turns and --paced-turns take a whole number ≥ 1")
            overrides[key] = value
    if args.sizes:
        try:
            sizes = tuple(int(x) for x in args.sizes.replace("_", "").split(",") if x.strip())
        except ValueError:
            p.error("--sizes takes comma-separated whole numbers, like 10000,100000")
        if not sizes or any(n < 2 * TOOL_EVERY for n in sizes):
            p.error(f"--sizes: every size must be at least {2 * TOOL_EVERY} messages")
        overrides["sizes"] = sizes
    rc = 0
    if args.bench != "compaction":
        sections = SECTIONS if args.bench == "all" else (args.bench,)
        rc = 0 if ok(run(sections, quick=args.quick, model=args.model, **overrides)) else 1
    if args.bench in ("compaction", "all"):
        from ocw.bench import compaction as bench_compaction

        rc = max(rc, bench_compaction.main(["--model", args.model] + (["--quick"] if args.quick else [])))
    return rc
