"""The throwaway PostgreSQL server the tests and the benchmark start
(ocw/store/postgres/cluster.py): which server programs it picks, what it says when a
program fails or the server does not start, and that only the benchmark's server
keeps PostgreSQL's durability."""
from __future__ import annotations

import glob
import os
import socket
import sys

import psycopg
import pytest

from ocw.store.postgres import cluster as cl
from ocw.store.postgres.cluster import Cluster, ClusterError


def _versions(tmp_path, monkeypatch, have: dict[str, bool]) -> None:
    """/usr/lib/postgresql/<N>/bin folders under tmp_path (with initdb or not), and no
    pg_ctl on PATH: bin_dir looks there."""
    for version, with_initdb in have.items():
        d = tmp_path / "usr/lib/postgresql" / version / "bin"
        d.mkdir(parents=True)
        if with_initdb:
            (d / "initdb").write_text("")
    real = glob.glob
    monkeypatch.setattr(cl.glob, "glob", lambda pattern: real(str(tmp_path) + pattern))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))


def test_the_newest_server_programs_are_picked_by_number(tmp_path, monkeypatch):
    _versions(tmp_path, monkeypatch, {"9": True, "15": True, "10": True, "12": True})
    assert cl.bin_dir() == str(tmp_path / "usr/lib/postgresql/15/bin")  # 15 > 12 > 10 > 9, not by name


def test_a_version_without_initdb_is_passed_over(tmp_path, monkeypatch):
    _versions(tmp_path, monkeypatch, {"14": True, "16": False})  # 16: the client package only
    assert cl.bin_dir() == str(tmp_path / "usr/lib/postgresql/14/bin")


def test_no_server_programs_is_one_line_saying_what_to_install(tmp_path, monkeypatch):
    _versions(tmp_path, monkeypatch, {"16": False})
    with pytest.raises(ClusterError, match=r"no PostgreSQL server programs .*apt-get install postgresql"):
        cl.bin_dir()


def test_a_failed_program_says_its_name_code_and_last_words(tmp_path):
    c = Cluster()
    c.folder = str(tmp_path)
    with pytest.raises(ClusterError) as e:
        c._run(sys.executable, "-c", "import sys; print('out words'); sys.stderr.write('err words'); sys.exit(3)")
    assert str(e.value) == f"{os.path.basename(sys.executable)} failed (3): err words"
    with pytest.raises(ClusterError) as e:  # nothing on stderr: stdout says it
        c._run(sys.executable, "-c", "import sys; print('only out'); sys.exit(1)")
    assert str(e.value) == f"{os.path.basename(sys.executable)} failed (1): only out"
    assert c._run(sys.executable, "-c", "print('fine')") == "fine\n"


def test_the_log_tail_is_its_last_2000_characters(tmp_path):
    c = Cluster()
    c.folder = str(tmp_path)
    text = "".join(f"line {i}\n" for i in range(1000))
    (tmp_path / "server.log").write_text(text)
    assert c.log_tail() == text[-2000:] and len(c.log_tail()) == 2000
    assert c.log_tail(10) == text[-10:]
    (tmp_path / "server.log").write_text("short")
    assert c.log_tail() == "short"


def test_a_server_that_cannot_start_says_why_from_its_log(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    monkeypatch.setattr(cl, "free_port", lambda: taken.getsockname()[1])  # a port another program holds
    c = Cluster()
    try:
        with pytest.raises(ClusterError) as e:
            c.start()
        assert str(e.value).startswith("the PostgreSQL server did not start; its log ends:\n")
        assert "could not" in str(e.value)  # the server's own words (could not bind / create any socket)
        assert c.folder is None  # the folder removed
    finally:
        taken.close()
        c.stop()


def test_the_test_server_trades_durability_for_speed_and_the_benchmarks_keeps_it(pg_cluster):
    with pg_cluster.admin() as conn:
        assert [conn.execute(f"SHOW {k}").fetchone()[0] for k in ("fsync", "synchronous_commit")] == ["off", "off"]
    durable = Cluster(durable=True).start()
    try:
        with psycopg.connect(durable.url(), autocommit=True) as conn:
            assert [conn.execute(f"SHOW {k}").fetchone()[0] for k in ("fsync", "synchronous_commit")] == ["on", "on"]
        assert durable.create_database("another") == durable.url("another")
        with psycopg.connect(durable.url("another"), autocommit=True) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("another",)
    finally:
        durable.stop()
    assert durable.folder is None
