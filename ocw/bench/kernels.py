"""Two kernels on one file: two processes appending turns at once.

DuckDB lets one process at a time open a file; ocw's `Db` hands the connection
over when another process waits (ocw/store/duckdb/db.py). Each worker process opens ONE
Store for its whole life, opens its session, loads the tokenizer, says it is
ready, waits for the start signal, then runs `turns` turns (count + append +
occupancy) back to back — the contended worst case. Measured three ways: one
process alone; two processes on two sessions of the file; two on one session.
Figures: the two's combined throughput ÷ one process's, and the worst turn
either of them saw (a turn includes its wait for the file). Every turn must
land: the session's node count and its single chain are checked afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def worker(path: str, name: str, tag: str, go: str, turns: int) -> dict:
    """Runs in a worker process (`python -m ocw.bench.kernels PATH NAME TAG GO TURNS`)."""
    import random

    from ocw.conversation.sessions import Store
    from ocw.text.tokens import get_encoding

    from ocw.bench.turns import Watch, one_turn, turn_message

    store = Store(path)
    s = store.open_session(name)
    get_encoding(s.encoding.name)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    rng = random.Random(tag)
    watch = Watch()
    start = time.time()
    with watch:
        for i in range(turns):
            role, text = turn_message(rng, i)
            watch.time(one_turn, s, role, f"{tag}: {text}")
    end = time.time()
    out = {"tag": tag, "ms": watch.ms, "start": start, "end": end, "opens": store.db.opens, "handoffs": store.db.handoffs}
    store.close()
    return out


def _spawn(path: str, runs: list[tuple[str, str]], turns: int, d: str) -> list[dict]:
    go = os.path.join(d, f"go-{time.monotonic_ns()}")
    procs = [subprocess.Popen([sys.executable, "-m", "ocw.bench.kernels", path, name, tag, go, str(turns)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, tag in runs]
    try:
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"kernel worker did not start: {line!r} {p.stderr.read()[-2000:]}")
        open(go, "w").close()
        outs = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"kernel worker failed: {stderr.strip()[-2000:]}")
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def _throughput(outs: list[dict]) -> float:
    turns = sum(len(o["ms"]) for o in outs)
    return turns / (max(o["end"] for o in outs) - min(o["start"] for o in outs))


def _chain_ok(path: str, name: str, expect: int) -> bool:
    from ocw.conversation.sessions import Store

    store = Store(path)
    try:
        with store.db.connect() as con:
            n, parents = con.execute(
                "SELECT count(*), count(DISTINCT parent_id) + count(*) FILTER (WHERE parent_id IS NULL) FROM nodes"
                " WHERE session_id = (SELECT id FROM sessions WHERE name = ?)", [name]).fetchone()
    finally:
        store.close()
    return n == expect and parents == n  # every turn landed, on one chain (no two share a parent)


def run(turns: int, *, model: str = "gpt-4o", tmpdir: str | None = None, base: int = 1000) -> dict:
    """One process alone, two on two sessions, two on one session: figures."""
    from ocw.conversation.sessions import Store

    from ocw.bench.build import build_session

    with tempfile.TemporaryDirectory(prefix="ocw-bench-kernels-", dir=tmpdir) as d:
        path = os.path.join(d, "kernels.duckdb")
        store = Store(path)
        build_session(store, base, model=model, name="k-a", id_salt="n_ka")
        build_session(store, base, model=model, name="k-b", id_salt="n_kb")
        store.close()
        solo = _spawn(path, [("k-a", "S")], turns, d)
        two_sessions = _spawn(path, [("k-a", "A"), ("k-b", "B")], turns, d)
        one_session = _spawn(path, [("k-a", "A"), ("k-a", "B")], turns, d)
        lost_ok = _chain_ok(path, "k-a", base + 4 * turns) and _chain_ok(path, "k-b", base + turns)
    one = _throughput(solo)
    return {
        "turns": turns,
        "solo_tps": one,
        "two_sessions_ratio": _throughput(two_sessions) / one,
        "two_sessions_worst_ms": max(max(o["ms"]) for o in two_sessions),
        "one_session_ratio": _throughput(one_session) / one,
        "one_session_worst_ms": max(max(o["ms"]) for o in one_session),
        "all_landed": lost_ok,
        "handoffs": sum(o["handoffs"] for o in two_sessions + one_session),
    }


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))))
