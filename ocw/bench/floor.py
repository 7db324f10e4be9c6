"""The raw transaction a turn cannot beat, per store, for `ocw.bench.pg` to compare against.

PostgreSQL: each writer process runs, on its own connection, the least a turn's
write needs — BEGIN; lock the session's row FOR UPDATE; INSERT the two messages
(one statement); UPDATE the row's head and rev; COMMIT: 5 round trips, 1 commit,
statement by statement as a hand-written client would. Tables of its own
(`floor_sessions`, `floor_nodes`) in a database of its own, with the same
sharing as ocw's writers (writers 0 and 1 on one row), on the same server in the
same run.

DuckDB: one process may write a file at a time, so the most any number of
writers can get from one file is one process running the raw durable
transaction (ocw/bench/turns.py `Floor`) back to back: that is the floor for
every writer count.
"""
from __future__ import annotations

import json
import time

FLOOR_SQL = (
    "CREATE TABLE IF NOT EXISTS floor_sessions (id text PRIMARY KEY, head text, rev bigint NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS floor_nodes (seq bigint GENERATED ALWAYS AS IDENTITY, id text PRIMARY KEY,"
    " session_id text NOT NULL REFERENCES floor_sessions (id), parent_id text, content text NOT NULL)",
)


def prepare_pg(url: str, sessions: list[str]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for stmt in FLOOR_SQL:
            conn.execute(stmt)
        for sid in sessions:
            conn.execute("INSERT INTO floor_sessions (id) VALUES (%s) ON CONFLICT DO NOTHING", [sid])


def timed_turns(start_at: float, turns: int, step, out: str) -> None:
    """A writer process's timed loop, the same for ocw's writers and the floor's so the two
    are timed alike: wait for the common start (every process has imported and opened by
    then), run `step(i)` `turns` times — it returns the ids it wrote — timing each, counting
    its errors rather than stopping (the acceptance wants none, and shows them), and write
    what it did to `out` as JSON, with the CPU seconds the process spent on its turns."""
    times, ids, errors = [], [], []
    while time.time() < start_at:
        time.sleep(0.001)
    began, cpu = time.time(), time.process_time()
    for i in range(turns):
        t0 = time.perf_counter()
        try:
            ids += step(i)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
        times.append(time.perf_counter() - t0)
    ended, cpu = time.time(), time.process_time() - cpu
    with open(out, "w") as f:
        json.dump({"times": times, "ids": ids, "errors": errors, "began": began, "ended": ended, "cpu": cpu}, f)


def pg_worker(url: str, sid: str, writer: int, turns: int, start_at: float, out: str, text) -> None:
    """One floor writer process: `turns` raw transactions, timed like ocw's turns."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        def step(i: int) -> list:
            with conn.transaction():  # BEGIN ... COMMIT
                (head,) = conn.execute("SELECT head FROM floor_sessions WHERE id = %s FOR UPDATE",
                                       [sid]).fetchone()
                q, a = f"f{writer}-{i}-q", f"f{writer}-{i}-a"
                conn.execute("INSERT INTO floor_nodes (id, session_id, parent_id, content) VALUES"
                             " (%s, %s, %s, %s), (%s, %s, %s, %s)",
                             [q, sid, head, json.dumps(text(i, 30)), a, sid, q, json.dumps(text(i + 7, 60))])
                conn.execute("UPDATE floor_sessions SET head = %s, rev = rev + 1 WHERE id = %s", [a, sid])
            return []

        timed_turns(start_at, turns, step, out)


def duckdb_floor(path: str, turns: int) -> dict:
    """One process, `turns` raw durable transactions back to back: (turns/s, times)."""
    from ocw.bench.turns import Floor

    floor = Floor(path)
    try:
        t0 = time.perf_counter()
        watch = floor.time_turns(turns, warmup=5)
        wall = time.perf_counter() - t0
    finally:
        floor.close()
    return {"turns_per_s": turns / wall if wall > 0 else 0.0, "times": [ms / 1e3 for ms in watch.ms]}
