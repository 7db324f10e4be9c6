"""Issue 16's acceptance under load: four writer processes × 300 turns each, two of
them on the same session, on one PostgreSQL database — 0 lost, 0 duplicated,
0 errors shown, every session's branch intact. And the benchmark's report
prints p50 / p99 for the DuckDB file and PostgreSQL side by side."""
from __future__ import annotations

import psycopg
import pytest

import ocw
from ocw.bench import pg as bench_pg


@pytest.mark.timeout(600)
def test_four_processes_300_turns_two_on_one_session(pg_url):
    r = bench_pg.run(pg_url, 4, 300)
    assert r["errors"] == []
    assert (r["turns"], r["lost"], r["duplicated"], r["intact"]) == (1200, 0, 0, True)
    st = ocw.Store(pg_url)
    try:
        sizes = {x["name"]: x["messages"] for x in st.sessions()}
    finally:
        st.close()
    # Writers 0 and 1 on bench-0 (2 × 300 turns × 2 messages, one chain); 2 and 3 alone.
    assert sizes == {"bench-0": 1200, "bench-1": 600, "bench-2": 600}


def test_the_check_sees_a_lost_node_and_a_broken_branch(pg_url):
    r = bench_pg.run(pg_url, 1, 3)
    assert (r["lost"], r["duplicated"], r["intact"]) == (0, 0, True)
    fake = [{"ids": ["n_never_written"]}]
    assert bench_pg.check(pg_url, 1, fake)["lost"] == 1
    with psycopg.connect(pg_url, autocommit=True) as conn:  # an append under an old HEAD: a fork
        sid, first = conn.execute("SELECT session_id, id FROM nodes ORDER BY seq LIMIT 1").fetchone()
        conn.execute("INSERT INTO nodes (id, session_id, parent_id, role, content, tokens, depth, cum_tokens, epoch)"
                     " VALUES ('n_fork', %s, %s, 'user', '[]', 1, 2, 2, 0)", [sid, first])
    st = ocw.Store(pg_url)
    ids = [n for n in st.open_session("bench-0").branch()]
    st.close()
    result = bench_pg.check(pg_url, 1, [{"ids": ids[:6] + ["n_fork"]}])
    assert result["intact"] is False and result["lost"] == 0


@pytest.mark.timeout(300)
def test_the_report_prints_both_stores_for_each_writer_count(capsys):
    assert bench_pg.main(["--turns", "4", "--writers", "1,2"]) == 0
    out = capsys.readouterr().out.splitlines()
    kinds = [(ln[:12].strip(), ln.split()[2] if ln.startswith("duckdb") else ln.split()[1]) for ln in out
             if ln.startswith(("duckdb file", "postgresql ")) and not ln.startswith("postgresql turn")]
    assert kinds == [("duckdb file", "1"), ("duckdb file", "2"), ("postgresql", "1"), ("postgresql", "2")]
    assert all(col in out[1] for col in ("turns/s", "floor/s", "ratio", "p50 ms", "p99 ms", "max ms", "cpu ms", "load"))
    rows = [ln for ln in out if ln.startswith(("duckdb file", "postgresql ")) and not ln.startswith("postgresql turn")]
    assert len(rows) == 4 and all(ln.rstrip().endswith("intact") for ln in rows)
    # The floor ran beside each row: a floor rate above zero and a ratio printed.
    assert all(float(ln.split("x ")[0].split()[-1]) > 0 for ln in rows)
    # A turn on the wire: the write is 1 commit in 1 round trip, 2 after another kernel's write
    # (the target: 1 and ≤ 5).
    wire = [ln for ln in out if ln.startswith("postgresql turn:")]
    assert wire and wire[0].startswith("postgresql turn: 1 round trip, 1 commit (floor: 5 round trips, 1 commit);"
                                       " after another kernel's write: 2 round trips, 1 commit;")


def test_the_floor_runs_the_same_sharing_and_loses_nothing(pg_url):
    """The PostgreSQL floor: one process per writer, writers 0 and 1 on one row; every
    raw transaction commits and the shared row's chain is whole."""
    r = bench_pg.floor_run(pg_url, 4, 25)
    assert r["errors"] == [] and r["turns"] == 100 and r["turns_per_s"] > 0 and r["cpu_ms"] > 0
    assert r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        per = dict(conn.execute("SELECT session_id, count(*) FROM floor_nodes GROUP BY 1").fetchall())
        heads = dict(conn.execute("SELECT id, rev FROM floor_sessions").fetchall())
    assert per == {"bench-0": 100, "bench-1": 50, "bench-2": 50}
    assert heads == {"bench-0": 50, "bench-1": 25, "bench-2": 25}


def test_the_wire_counts_of_a_turn(pg_url):
    w = bench_pg.turn_on_the_wire(pg_url)
    assert w["write"] == {"round_trips": 1, "transactions": 1, "commits": 1}  # on the row it wrote
    assert w["read_first"] == {"round_trips": 2, "transactions": 1, "commits": 1}  # the row read under the lock
    # a whole %%chat turn syncs first: one more round trip, a read-only transaction
    assert w["whole"] == {"round_trips": 2, "transactions": 2, "commits": 2}


def test_the_cpu_of_a_turn_is_the_writers_cpu_over_their_turns():
    """Every writer's own CPU over its timed turns, pooled, per turn (in ms); a result
    without the figure (an older writer) counts none."""
    results = [{"times": [0.01, 0.02], "cpu": 0.3}, {"times": [0.01, 0.03], "cpu": 0.1}, {"times": [0.02]}]
    assert bench_pg._figures(results, 1.0)["cpu_ms"] == pytest.approx(80.0)
    assert bench_pg._figures([{"times": []}], 1.0)["cpu_ms"] == 0.0


def test_writers_on_sessions_of_their_own_and_their_floor(pg_url, pg_cluster):
    """`own`: every writer, and every floor writer, on a session of its own."""
    r = bench_pg.run(pg_url, 2, 5, shared=False)
    assert r["errors"] == [] and (r["turns"], r["lost"], r["duplicated"], r["intact"]) == (10, 0, 0, True)
    st = ocw.Store(pg_url)
    try:
        assert {x["name"]: x["messages"] for x in st.sessions()} == {"bench-0": 10, "bench-1": 10}
    finally:
        st.close()
    floor_url = pg_cluster.create_database("floor_own")
    f = bench_pg.floor_run(floor_url, 2, 5, floor_url, shared=False)
    assert f["errors"] == [] and f["turns"] == 10
    with psycopg.connect(floor_url, autocommit=True) as conn:
        assert dict(conn.execute("SELECT id, rev FROM floor_sessions").fetchall()) == {"bench-0": 5, "bench-1": 5}


@pytest.mark.timeout(300)
def test_the_report_names_a_count_of_own_sessions_and_refuses_a_bad_one(capsys):
    assert bench_pg.main(["--turns", "3", "--writers", "2own"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("postgresql ")
            and not ln.startswith("postgresql turn")]
    assert len(rows) == 1 and "2 (own)" in rows[0] and rows[0].rstrip().endswith("intact")
    with pytest.raises(SystemExit):
        bench_pg.main(["--writers", "2x"])
    assert "--writers takes counts like 1,2,8,8own, not '2x'" in capsys.readouterr().err
