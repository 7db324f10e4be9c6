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
             if ln.startswith(("duckdb file", "postgresql"))]
    assert kinds == [("duckdb file", "1"), ("duckdb file", "2"), ("postgresql", "1"), ("postgresql", "2")]
    assert "p50 ms" in out[1] and "p99 ms" in out[1]
    assert all(ln.rstrip().endswith("intact") for ln in out if ln.startswith(("duckdb file", "postgresql")))
