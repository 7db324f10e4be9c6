"""Benchmark: many writers on one store — `python -m ocw.bench.pg [--turns 300] [--url URL]`.

For 1, 2, 4 and 8 writer PROCESSES (each its own `ocw.Store`, as kernels are),
each doing `--turns` turns — a turn is a user message and its reply appended
with the provider's usage sample (`Session.append_many`, one transaction),
then `occupancy()` — on a DuckDB file (the kernels hand the file over) and on
a PostgreSQL database (a throwaway server started in a temporary folder with
PostgreSQL's default durability, unless `--url` names one). Writers 0 and 1
share a session; the others have one each: with 4 writers, two are on the same
session, as in issue 16's acceptance. A count with `own` (the default list ends
with `8own`, PostgreSQL only) gives every writer a session of its own, the floor
too: what the store costs when no two kernels write one session at once — the
shared pair's turns wait for each other's lock and must reach each other's
kernel (a NOTIFY, which wakes every listening server process in the database).

Beside each, in the same run, the raw transaction floor (ocw/bench/floor.py):
on PostgreSQL the same number of processes each running BEGIN, lock, INSERT,
UPDATE, COMMIT on tables of their own; on DuckDB one process running the raw
durable transaction back to back (one process writes a file at a time). Prints
turns/s and its ratio to the floor's, per-turn p50 / p99 / max (milliseconds,
each writer's turns pooled), the machine's 1-minute load average, and the
checks: nodes lost, duplicated, errors shown, and whether every session's
branch is intact — one chain in seq order (every append landed under the HEAD
its transaction read), a turn's two messages adjacent, HEAD its end. Then a
PostgreSQL turn's round trips and commits, counted from libpq's protocol trace
(ocw/bench/wire.py), beside the floor's. `cpu ms` is the CPU a turn costs its
writer process (its timed turns only; the floor's beside it): with 8 writers on
a small machine the run is CPU-bound, and this figure moves less with other load
than turns/s. Timings are printed, never asserted
(tests/bench/test_bench_pg.py asserts the checks and the counts).
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

WRITER_COUNTS = ("1", "2", "4", "8", "8own")
WORDS = ("the team keeps its sessions in one database so every kernel on every machine sees the same branch "
         "a turn appends the question and the answer under the head it reads inside its transaction").split()


def session_of(writer: int, shared: bool = True) -> str:
    """Writers 0 and 1 share session 0; writer k ≥ 2 has session k − 1. Not `shared`:
    writer k has session k."""
    return f"bench-{max(0, writer - 1)}" if shared else f"bench-{writer}"


def _text(i: int, n: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))


def worker(db: str, writer: int, turns: int, start_at: float, out: str, shared: bool = True) -> None:
    """One writer process: wait for the common start, run its turns, write what it did."""
    import ocw
    from ocw.bench.floor import timed_turns
    from ocw.text.tokens import count_text

    store = ocw.Store(db)
    s = store.open_session(session_of(writer, shared))
    count_text("warm up", s.encoding.name)  # the tokenizer loads once per process (100-200 ms): not a turn
    s.occupancy()

    def step(i: int) -> list:
        ids = s.append_many([("user", f"w{writer} t{i} " + _text(i, 30)),
                             ("assistant", f"w{writer} r{i} " + _text(i + 7, 60))], usage=1000 + i)
        s.occupancy()
        return ids

    try:
        timed_turns(start_at, turns, step, out)
    finally:
        store.close()


def check(db: str, writers: int, results: list[dict], shared: bool = True) -> dict:
    """Lost / duplicated nodes and intact branches, read back from the store."""
    from ocw.conversation.sessions import open_backend

    backend = open_backend(db)
    try:
        lost = dup = 0
        intact = True
        for name in sorted({session_of(w, shared) for w in range(writers)}):
            sid = backend.find_session(name)
            nodes = backend.nodes_since(sid, 0)
            stored = [n.id for n in nodes]
            wrote = [i for w, r in enumerate(results) if session_of(w, shared) == name for i in r["ids"]]
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


def _spawn(args: list[list[str]], writers: int, tmp: str) -> tuple[list[dict], float]:
    """Run one writer process per argument list at a common start; their results and the wall time."""
    start_at = time.time() + 1.5 + 0.3 * writers  # after every process has imported and opened
    procs, outs = [], []
    for w, extra in enumerate(args):
        out = os.path.join(tmp, f"w{w}.json")
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "ocw.bench.pg", *extra, repr(start_at), out]))
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
    return results, wall


def _figures(results: list[dict], wall: float) -> dict:
    """Pooled p50 / p99 / max, and turns/s over the span from the first writer's first
    turn to the last one's last (each writer says when; else the processes' wall time)."""
    spans = [r for r in results if "began" in r]
    if spans and len(spans) == len(results):
        wall = max(r["ended"] for r in spans) - min(r["began"] for r in spans)
    times = sorted(t for r in results for t in r["times"])
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    cpu = sum(r.get("cpu", 0.0) for r in results)  # the writer processes' own CPU (the server's is not seen)
    return {"turns": len(times), "p50_ms": q[49] * 1e3 if q else 0.0, "p99_ms": q[98] * 1e3 if q else 0.0,
            "max_ms": times[-1] * 1e3 if times else 0.0, "turns_per_s": len(times) / wall if wall > 0 else 0.0,
            "cpu_ms": cpu * 1e3 / len(times) if times else 0.0}


def floor_run(db: str, writers: int, turns: int, floor_db: str | None = None, shared: bool = True) -> dict:
    """The raw transaction floor for `writers` on the store `db` is (ocw/bench/floor.py)."""
    from ocw.bench import floor
    from ocw.store.postgres.url import is_postgres_url

    if not is_postgres_url(db):
        r = floor.duckdb_floor(db + ".floor", writers * turns)
        return {**_figures([{"times": r["times"]}], sum(r["times"]) or 1.0), "turns_per_s": r["turns_per_s"]}
    url = floor_db or db
    floor.prepare_pg(url, sorted({session_of(w, shared) for w in range(writers)}))
    with tempfile.TemporaryDirectory(prefix="ocw-bench-floor-") as tmp:
        results, wall = _spawn([["--floor", url, session_of(w, shared), str(w), str(turns)] for w in range(writers)],
                               writers, tmp)
    return {**_figures(results, wall), "errors": [e for r in results for e in r["errors"]]}


def run(db: str, writers: int, turns: int, shared: bool = True) -> dict:
    """`writers` processes × `turns` turns on `db` (sessions created first)."""
    import ocw

    store = ocw.Store(db)
    for name in sorted({session_of(w, shared) for w in range(writers)}):
        store.create_session(name=name, model="gpt-4o", context_window=1_000_000_000)
    store.close()
    with tempfile.TemporaryDirectory(prefix="ocw-bench-pg-") as tmp:
        results, wall = _spawn([["--worker", db, str(w), str(turns), "shared" if shared else "own"]
                                for w in range(writers)], writers, tmp)
    out = {"writers": writers, "shared": shared, **_figures(results, wall),
           "errors": [e for r in results for e in r["errors"]], "load": os.getloadavg()[0]}
    out.update(check(db, writers, results, shared))
    return out


def turn_on_the_wire(url: str) -> dict:
    """One PostgreSQL turn's round trips and commits (libpq's trace: ocw/bench/wire.py):
    the store path of a turn (append with its usage sample, then occupancy()), and a
    whole turn as `%%chat` runs it (a sync read of the session row first)."""
    import ocw
    from ocw.bench import wire
    from ocw.store.postgres.listen import wait_ready

    store = ocw.Store(url)
    try:
        s = store.create_session(name="wire", model="gpt-4o", context_window=1_000_000)
        # The listener's first read of the session (after recording its watch, schema p005)
        # runs on its own thread: done before the count, or it would take a connection of its
        # own; and its catch-up call, which drops the store's guess, before the turns.
        wait_ready(store.backend._listener)
        s.append_many([("user", "warm"), ("assistant", "up")], usage=10)  # the row read first
        s.append_many([("user", "warm"), ("assistant", "up")], usage=11)  # on the row it wrote
        with wire.traced(store.backend._pool) as write:
            s.append_many([("user", "q"), ("assistant", "a")], usage=20)
            s.occupancy()
        with wire.traced(store.backend._pool) as whole:
            s.sync()
            s.append_many([("user", "q2"), ("assistant", "a2")], usage=30)
            s.occupancy()
        store.backend._guesses.drop()  # as after another kernel's turn, or a compaction
        with wire.traced(store.backend._pool) as read_first:
            s.append_many([("user", "q3"), ("assistant", "a3")], usage=40)
            s.occupancy()
    finally:
        store.close()
    return {"write": write, "whole": whole, "read_first": read_first}


def _sessions(writers: int, shared: bool = True) -> str:
    if not shared:
        return f"{writers} (own)"
    pair = min(writers, 2)
    return f"{writers - pair + 1}" + (" (2 share)" if pair == 2 else "")


def _row(store: str, r: dict, f: dict) -> str:
    ratio = r["turns_per_s"] / f["turns_per_s"] if f.get("turns_per_s") else 0.0
    return (f"{store:<12} {r['writers']:>3}  {_sessions(r['writers'], r.get('shared', True)):<11} {r['turns']:>6}"
            f" {r['turns_per_s']:>7.0f}"
            f" {f['turns_per_s']:>7.0f} {ratio:>6.2f}x {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} {r['max_ms']:>7.1f}"
            f"   {f['p50_ms']:>6.1f} {f['p99_ms']:>6.1f} {r.get('cpu_ms', 0.0):>6.2f} {f.get('cpu_ms', 0.0):>6.2f}"
            f" {r['load']:>5.1f}  {r['lost']:>4} {r['duplicated']:>4}"
            f" {len(r['errors']):>6}  {'intact' if r['intact'] else 'BROKEN'}")


HEADER = (f"{'store':<12} {'w':>3}  {'sessions':<11} {'turns':>6} {'turns/s':>7} {'floor/s':>7} {'ratio':>7}"
          f" {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}   {'floor p50':>6} {'p99':>6} {'cpu ms':>6} {'floor':>6}"
          f" {'load':>5}  {'lost':>4} {'dup':>4}"
          f" {'errors':>6}  branches")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench.pg", description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=300, help="turns per writer (default 300)")
    p.add_argument("--url", default=None, help="a PostgreSQL URL to use (an EMPTY database; default: start a "
                   "throwaway server)")
    p.add_argument("--writers", default=",".join(WRITER_COUNTS),
                   help="writer counts; N`own`: each writer on a session of its own, PostgreSQL only "
                        "(default 1,2,4,8,8own)")
    p.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    p.add_argument("--floor", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        db, w, turns, sharing, start_at, out = args.worker
        worker(db, int(w), int(turns), float(start_at), out, sharing == "shared")
        return 0
    if args.floor:
        from ocw.bench.floor import pg_worker

        url, sid, w, turns, start_at, out = args.floor
        pg_worker(url, sid, int(w), int(turns), float(start_at), out, _text)
        return 0
    try:
        counts = [(int(x.removesuffix("own")), not x.endswith("own")) for x in args.writers.split(",")]
    except ValueError:
        p.error(f"--writers takes counts like 1,2,8,8own, not {args.writers!r}")
    cluster = None
    rows, failed = [], False
    print(f"ocw.bench.pg: {args.turns} turns per writer process; a turn = user message + reply appended with its "
          "usage sample (one transaction) + occupancy(); floor = the raw transaction (ocw/bench/floor.py)")
    print(HEADER)
    try:
        with tempfile.TemporaryDirectory(prefix="ocw-bench-duck-") as tmp:
            for n in sorted({n for n, shared in counts if shared}, key=[n for n, _ in counts].index):
                path = os.path.join(tmp, f"w{n}.duckdb")  # a DuckDB file has one writer at a time: sharing or not
                r = run(path, n, args.turns)
                f = floor_run(path, n, args.turns)
                rows.append((r, f))
                print(_row("duckdb file", r, f), flush=True)
        if args.url is None:
            from ocw.store.postgres.cluster import Cluster

            cluster = Cluster(durable=True).start()
        for k, (n, shared) in enumerate(counts):
            tag = f"{n}{'' if shared else 'own'}"
            url = cluster.create_database(f"bench_w{tag}") if cluster else args.url
            if not cluster and k:
                url = None  # one given database: one run only (it must start empty)
            if url is None:
                print(f"postgresql   {tag:>3}  (skipped: --url names one database; give an empty one per run)")
                continue
            r = run(url, n, args.turns, shared)
            f = floor_run(url, n, args.turns, cluster.create_database(f"floor_w{tag}") if cluster else None, shared)
            rows.append((r, f))
            print(_row("postgresql", r, f), flush=True)
        url = cluster.create_database("bench_wire") if cluster else None
        if url is not None:
            wire = turn_on_the_wire(url)
            w, whole, first = wire["write"], wire["whole"], wire["read_first"]
            trips = lambda n: f"{n} round trip{'' if n == 1 else 's'}"  # noqa: E731
            print(f"postgresql turn: {trips(w['round_trips'])}, {w['commits']} commit (floor: 5 round trips, "
                  f"1 commit); after another kernel's write: {trips(first['round_trips'])}, {first['commits']} "
                  f"commit; with the sync read a %%chat turn does first: {whole['round_trips']} round trips, "
                  f"{whole['transactions']} transactions ({whole['transactions'] - 1} of them a read)")
    finally:
        if cluster is not None:
            cluster.stop()
    for r, f in rows:
        for e in (r["errors"] + f.get("errors", []))[:3]:
            print(f"  error ({r['writers']} writers): {e}")
        failed = failed or r["errors"] or f.get("errors") or r["lost"] or r["duplicated"] or not r["intact"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
