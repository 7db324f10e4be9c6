"""Benchmark: many writers on one store — `python -m ocw.bench.pg [--turns 300] [--url URL]`.

For 1, 2 and 4 writer PROCESSES (each its own `ocw.Store`, as kernels are),
each doing `--turns` turns — a turn is a user message and its reply appended
with the provider's usage sample (`Session.append_many`, one transaction),
then `occupancy()` — on a DuckDB file (the kernels hand the file over) and on
a PostgreSQL database (a throwaway server started in a temporary folder with
PostgreSQL's default durability, unless `--url` names one). Writers 0 and 1
share a session; the others have one each: with 4 writers, two are on the same
session, as in issue 16's acceptance.

Prints per-turn p50 / p99 (milliseconds, each writer's turns pooled) and the
checks: nodes lost, duplicated, errors shown, and whether every session's
branch is intact — one chain in seq order (every append landed under the HEAD
its transaction read), a turn's two messages adjacent, HEAD its end. Timings
are printed, never asserted (tests/bench/test_bench_pg.py asserts the checks).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WRITER_COUNTS = (1, 2, 4)
WORDS = ("the team keeps its sessions in one database so every kernel on every machine sees the same branch "
         "a turn appends the question and the answer under the head it reads inside its transaction").split()


def session_of(writer: int) -> str:
    """Writers 0 and 1 share session 0; writer k ≥ 2 has session k − 1."""
    return f"bench-{max(0, writer - 1)}"


def _text(i: int, n: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))


def worker(db: str, writer: int, turns: int, start_at: float, out: str) -> None:
    """One writer process: wait for the common start, run its turns, write what it did."""
    import ocw

    store = ocw.Store(db)
    s = store.open_session(session_of(writer))
    times, ids, errors = [], [], []
    from ocw.text.tokens import count_text

    count_text("warm up", s.encoding.name)  # the tokenizer loads once per process (100-200 ms): not a turn
    s.occupancy()
    while time.time() < start_at:
        time.sleep(0.001)
    for i in range(turns):
        t0 = time.perf_counter()
        try:
            ids += s.append_many([("user", f"w{writer} t{i} " + _text(i, 30)),
                                  ("assistant", f"w{writer} r{i} " + _text(i + 7, 60))], usage=1000 + i)
            s.occupancy()
        except Exception as e:  # counted and shown: the acceptance wants none
            errors.append(f"{type(e).__name__}: {e}")
        times.append(time.perf_counter() - t0)
    store.close()
    with open(out, "w") as f:
        json.dump({"times": times, "ids": ids, "errors": errors}, f)


def check(db: str, writers: int, results: list[dict]) -> dict:
    """Lost / duplicated nodes and intact branches, read back from the store."""
    from ocw.conversation.sessions import open_backend

    backend = open_backend(db)
    try:
        lost = dup = 0
        intact = True
        for name in sorted({session_of(w) for w in range(writers)}):
            sid = backend.find_session(name)
            nodes = backend.nodes_since(sid, 0)
            stored = [n.id for n in nodes]
            wrote = [i for w, r in enumerate(results) if session_of(w) == name for i in r["ids"]]
            lost += len(set(wrote) - set(stored))
            dup += len(stored) - len(set(stored)) + len(set(stored) - set(wrote))
            chain = [n.parent_id for n in nodes] == [None] + stored[:-1]
            pairs = all(nodes[k].role == "user" and nodes[k + 1].role == "assistant"
                        and nodes[k + 1].parent_id == nodes[k].id for k in range(0, len(nodes) - 1, 2))
            head = backend.session_row(sid)["head_id"] == (stored[-1] if stored else None)
            leaves = [n.id for n in backend.leaves(sid)] == stored[-1:]
            intact = intact and chain and pairs and head and leaves and len(nodes) % 2 == 0
        return {"lost": lost, "duplicated": dup, "intact": intact}
    finally:
        backend.close()


def run(db: str, writers: int, turns: int) -> dict:
    """`writers` processes × `turns` turns on `db` (sessions created first)."""
    import ocw

    store = ocw.Store(db)
    for name in sorted({session_of(w) for w in range(writers)}):
        store.create_session(name=name, model="gpt-4o", context_window=1_000_000_000)
    store.close()
    with tempfile.TemporaryDirectory(prefix="ocw-bench-pg-") as tmp:
        start_at = time.time() + 1.5 + 0.3 * writers  # after every process has imported and opened
        procs, outs = [], []
        for w in range(writers):
            out = os.path.join(tmp, f"w{w}.json")
            outs.append(out)
            procs.append(subprocess.Popen([sys.executable, "-m", "ocw.bench.pg", "--worker", db, str(w), str(turns),
                                           repr(start_at), out]))
        t0 = time.time()
        codes = [p.wait() for p in procs]
        wall = time.time() - max(t0, start_at)
        results = []
        for w, (code, out) in enumerate(zip(codes, outs)):
            if code != 0 or not os.path.exists(out):
                results.append({"times": [], "ids": [], "errors": [f"writer {w} exited with {code}"]})
            else:
                with open(out) as f:
                    results.append(json.load(f))
    times = sorted(t for r in results for t in r["times"])
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    out = {"writers": writers, "turns": len(times), "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
           "turns_per_s": len(times) / wall if wall > 0 else 0.0,
           "errors": [e for r in results for e in r["errors"]]}
    out.update(check(db, writers, results))
    return out


def _row(store: str, r: dict) -> str:
    sessions = {1: "1", 2: "1 (shared)", 4: "3 (2 share)"}.get(r["writers"], "?")
    return (f"{store:<12} {r['writers']:>7}  {sessions:<12} {r['turns']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f}"
            f" {r['turns_per_s']:>8.0f}  {r['lost']:>4} {r['duplicated']:>4} {len(r['errors']):>6}  "
            f"{'intact' if r['intact'] else 'BROKEN'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench.pg", description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=300, help="turns per writer (default 300)")
    p.add_argument("--url", default=None, help="a PostgreSQL URL to use (an EMPTY database; default: start a "
                   "throwaway server)")
    p.add_argument("--writers", default="1,2,4", help="writer counts (default 1,2,4)")
    p.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        db, w, turns, start_at, out = args.worker
        worker(db, int(w), int(turns), float(start_at), out)
        return 0
    counts = [int(x) for x in args.writers.split(",")]
    cluster = None
    rows, failed = [], False
    print(f"ocw.bench.pg: {args.turns} turns per writer process; a turn = user message + reply appended with its "
          "usage sample (one transaction) + occupancy()")
    print(f"{'store':<12} {'writers':>7}  {'sessions':<12} {'turns':>6} {'p50 ms':>8} {'p99 ms':>8} {'turns/s':>8}"
          f"  {'lost':>4} {'dup':>4} {'errors':>6}  branches")
    try:
        with tempfile.TemporaryDirectory(prefix="ocw-bench-duck-") as tmp:
            for n in counts:
                r = run(os.path.join(tmp, f"w{n}.duckdb"), n, args.turns)
                rows.append(r)
                print(_row("duckdb file", r), flush=True)
        if args.url is None:
            from ocw.store.postgres.cluster import Cluster

            cluster = Cluster(durable=True).start()
        for n in counts:
            url = cluster.create_database(f"bench_w{n}") if cluster else args.url
            if not cluster and n != counts[0]:
                url = None  # one given database: one run only (it must start empty)
            if url is None:
                print(f"postgresql   {n:>7}  (skipped: --url names one database; give an empty one per run)")
                continue
            r = run(url, n, args.turns)
            rows.append(r)
            print(_row("postgresql", r), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    for r in rows:
        for e in r["errors"][:3]:
            print(f"  error ({r['writers']} writers): {e}")
        failed = failed or r["errors"] or r["lost"] or r["duplicated"] or not r["intact"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
