"""Issue 16 item 4: `ocw export` / `ocw import` move sessions between a DuckDB file
and a PostgreSQL database, idempotently. The acceptance: a notebook session
(made by the magics: turns, a compaction, a rewind and a fork, a model switch
that recounts) moved DuckDB → PostgreSQL → DuckDB compares equal — nodes,
summaries, HEAD, count, recounts — row for row and through the Session."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import ocw
from ocw.notebook.cli import main
from ocw.conversation.sessions import open_backend
from ocw.store.transfer import snapshot

USER = "Tell me about the garden plan: " + "tomatoes basil peppers " * 40


def notebook_session(ip, capsys) -> None:
    """A session made the way a notebook makes one (offline model)."""
    for cell in ("%%chat\n" + USER, "%%chat\nand the watering schedule? " + "daily " * 60,
                 "%%chat\nwhat about pests? " + "aphids " * 80, "%%chat\nand the harvest? " + "autumn " * 80,
                 "%rewind 1", "%%chat\na different last question " + "compost " * 30, "%compact 50",
                 "%pin the beds are 1.2 m wide", "%pin a second pin", "%unpin 2",
                 "%%chat --model gpt-4o\nnow with another tokenizer", "%%chat --session second\nanother notebook"):
        res = ip.run_cell(cell)
        assert res.error_in_exec is None, (cell, res.error_in_exec)
    capsys.readouterr()


def cli(*args) -> tuple[int, str, str]:
    return main(list(args)), "", ""


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def snapshots(where: str) -> dict:
    b = open_backend(where)
    try:
        return {r["name"]: snapshot(b, r["id"]) for r in b.list_sessions()}
    finally:
        b.close()


def without_rev(snaps: dict) -> dict:
    return {k: {**v, "session": {c: x for c, x in v["session"].items() if c != "rev"}} for k, v in snaps.items()}


def table_sizes(url: str) -> dict:
    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT count(*), coalesce(max(seq), 0) FROM {t}" if t == "nodes" else
                                f"SELECT count(*) FROM {t}").fetchone() for t in ("sessions", "nodes", "node_counts")}


@pytest.fixture
def made(ip, capsys, ocw_env):
    """The DuckDB file of a notebook's sessions (the kernel let go of it)."""
    notebook_session(ip, capsys)
    ip.run_line_magic("unload_ext", "ocw")
    return str(ocw_env)


def test_a_notebook_session_moved_duckdb_postgres_duckdb_compares_equal(made, pg_url, tmp_path, capsys):
    back = str(tmp_path / "back" / "ocw.duckdb")
    code, out, err = run_cli(capsys, "export", "--from", made, "--to", pg_url)
    assert (code, err) == (0, "")
    assert out.count("copied ") == 2 and "2 copied, 0 updated, 0 already there, 0 refused" in out
    code, out, err = run_cli(capsys, "import", "--from", pg_url, "--to", back)
    assert (code, err) == (0, "") and "2 copied" in out

    original, on_pg, returned = snapshots(made), snapshots(pg_url), snapshots(back)
    assert set(original) == {"second", "default"}
    assert original == on_pg == returned  # every stored column, rev and times included, nodes in seq order
    main_session = original["default"]
    nodes = main_session["nodes"]
    summaries = [n for n in nodes if n["role"] == "llm" and n["name"] == "context/summary"]
    assert len(summaries) == 1 and main_session["session"]["metadata"]["context_compaction_count"] == 1
    assert main_session["counts"], "the model switch recounted into node_counts"
    assert main_session["session"]["count_epoch"] == 1
    assert [e["op"] for e in main_session["session"]["metadata"]["pins"]] == ["pin", "pin", "unpin"]  # issue 22.6
    # A fork: two leaves; HEAD on the newer branch.
    parents = [n["parent_id"] for n in nodes if not (n["role"] == "llm")]
    assert len(parents) != len(set(parents))

    # The same through the Session: what the model would read, and the ring.
    stores = [ocw.Store(made), ocw.Store(back)]
    try:
        a, b = (st.open_session("default") for st in stores)
        assert (a.head, a.generation, a.compaction_count, a.epoch) == (b.head, b.generation, b.compaction_count, b.epoch)
        assert a.branch() == b.branch() and [s.id for s in a.summaries()] == [s.id for s in b.summaries()]
        assert a.active_summary() is not None and a.active_summary().id == b.active_summary().id
        assert a.rendered_history() == b.rendered_history() and a.occupancy() == b.occupancy()
        assert b.occupancy()["breakdown"]["pins"] > 0
        assert [m["content"][0]["text"] for m in b.rendered_history() if m.get("name") == "context/pins"] == [
            "[Pinned by the user: kept verbatim whatever is compacted]\n[pin 1]\nthe beds are 1.2 m wide"]
        assert sorted(x["id"] for x in a.branches()) == sorted(x["id"] for x in b.branches())
    finally:
        for st in stores:
            st.close()


def test_running_it_twice_changes_nothing(made, pg_url, tmp_path, capsys):
    assert run_cli(capsys, "export", "--from", made, "--to", pg_url)[0] == 0
    before, sizes = snapshots(pg_url), table_sizes(pg_url)
    code, out, err = run_cli(capsys, "export", "--from", made, "--to", pg_url)
    assert code == 0 and out.count("same ") == 2 and "0 copied, 0 updated, 2 already there, 0 refused" in out
    assert snapshots(pg_url) == before and table_sizes(pg_url) == sizes  # no rev moved, no row added
    back = str(tmp_path / "b.duckdb")
    assert run_cli(capsys, "import", "--from", pg_url, "--to", back)[0] == 0
    file_before = snapshots(back)
    code, out, _ = run_cli(capsys, "import", "--from", pg_url, "--to", back)
    assert code == 0 and "2 already there" in out and snapshots(back) == file_before


def test_a_destination_behind_gets_the_new_turns(made, pg_url, capsys):
    assert run_cli(capsys, "export", "--from", made, "--to", pg_url)[0] == 0
    rev_before = snapshots(pg_url)["default"]["session"]["rev"]
    st = ocw.Store(made)
    s = st.open_session("default")
    s.append_many([("user", "one more"), ("assistant", "one more answer")])
    st.close()
    code, out, _ = run_cli(capsys, "export", "--from", made, "--to", pg_url, "--session", "default")
    assert code == 0 and "updated  'default'" in out and "+2 nodes" in out and "1 updated" in out
    after = snapshots(pg_url)
    assert without_rev(after)["default"] == without_rev(snapshots(made))["default"]
    assert after["default"]["session"]["rev"] == rev_before + 1  # other kernels see it move


def test_a_destination_that_moved_on_is_refused_and_left_alone(made, pg_url, capsys):
    assert run_cli(capsys, "export", "--from", made, "--to", pg_url)[0] == 0
    st = ocw.Store(pg_url)
    st.open_session("default").append("user", "written on the team database since")
    st.close()
    before = snapshots(pg_url)
    code, out, err = run_cli(capsys, "export", "--from", made, "--to", pg_url)
    assert code == 1
    assert "refused  'default'" in out and "has 1 message(s) the source lacks" in out
    assert "same     'second'" in out and "1 refused" in out
    assert snapshots(pg_url) == before


def test_another_session_of_the_same_name_is_refused(pg_url, tmp_path, capsys):
    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    for where in (a, pg_url):
        st = ocw.Store(where)
        st.create_session(name="notes").append("user", f"in {where[:10]}")
        st.close()
    code, out, _ = run_cli(capsys, "export", "--from", a, "--to", pg_url)
    assert code == 1 and "another session named 'notes'" in out
    code, out, _ = run_cli(capsys, "import", "--from", a, "--to", b)  # to a new file it goes
    assert code == 0 and "1 copied" in out


@pytest.mark.parametrize("case", ["no file", "same", "unknown session", "unreachable", "bad url"])
def test_bad_arguments_are_one_line_and_copy_nothing(case, pg_url, tmp_path, capsys):
    from ocw.store.postgres.cluster import free_port

    a = str(tmp_path / "a.duckdb")
    st = ocw.Store(a)
    st.create_session(name="x")
    st.close()
    secret = "Pa55word-never-printed"
    args = {"no file": ["export", "--from", str(tmp_path / "missing.duckdb"), "--to", pg_url],
            "same": ["export", "--from", pg_url, "--to", pg_url],
            "unknown session": ["export", "--from", a, "--to", pg_url, "--session", "x", "--session", "nope"],
            "unreachable": ["export", "--from", a, "--to", f"postgresql://u:{secret}@127.0.0.1:{free_port()}/d"],
            "bad url": ["import", "--from", f"mysql://u:{secret}@h/d", "--to", a]}[case]
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"ocw {args[0]}: ")
    assert secret not in err
    expect = {"no file": "there is no ocw database at", "same": "are the same database",
              "unknown session": "no session 'nope' in", "unreachable": "is the PostgreSQL server running",
              "bad url": "it is a URL ocw cannot use"}[case]
    assert expect in err
    assert not (tmp_path / "missing.duckdb").exists()
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'nodes'"
                              ).fetchone()[0]
        if tables:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_the_console_script(pg_url, tmp_path):
    a = str(tmp_path / "a.duckdb")
    st = ocw.Store(a)
    st.create_session(name="cli").append("user", "via the ocw command")
    st.close()
    script = Path(sys.executable).parent / "ocw"
    assert script.exists(), "pip install -e . did not install the ocw command"
    out = subprocess.run([str(script), "export", "--from", a, "--to", pg_url], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "copied   'cli'" in out.stdout and "1 messages, 0 summaries" in out.stdout
    assert json.dumps(snapshots(pg_url), default=str) == json.dumps(snapshots(a), default=str)
    usage = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr == "ocw: the following arguments are required: command (see ocw --help)\n"


def test_a_differing_node_is_refused_and_the_destination_is_untouched(tmp_path, capsys):
    """A node with the same id and other content in the destination: the copy says so and
    writes nothing there — not the source's new turns, not its session row (HEAD, rev)."""
    import duckdb

    from ocw.store.duckdb.store import DUCKDB_CONFIG

    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    st = ocw.Store(a)
    st.create_session(name="notes").append_many([("user", "the plan"), ("assistant", "the answer")])
    st.close()
    assert run_cli(capsys, "import", "--from", a, "--to", b)[0] == 0
    con = duckdb.connect(b, config=DUCKDB_CONFIG)
    con.execute("UPDATE nodes SET content = ? WHERE seq = (SELECT min(seq) FROM nodes)",
                [json.dumps([{"type": "text", "text": "edited in the destination"}])])
    con.close()
    st = ocw.Store(a)
    st.open_session("notes").append_many([("user", "one more"), ("assistant", "one more answer")])
    st.close()
    before = snapshots(b)
    code, out, err = run_cli(capsys, "import", "--from", a, "--to", b)
    assert code == 1 and "refused  'notes'" in out and "differs between the two copies" in out, (out, err)
    assert "1 refused" in out
    after = snapshots(b)
    assert after == before  # session row (HEAD, rev, updated_at) and nodes as they were
    assert len(after["notes"]["nodes"]) == 2


def test_the_copy_says_how_many_messages_and_summaries_it_moved(made, tmp_path, capsys):
    code, out, err = run_cli(capsys, "import", "--from", made, "--to", str(tmp_path / "c.duckdb"))
    assert (code, err) == (0, "")
    nodes = snapshots(made)["default"]["nodes"]
    summaries = sum(1 for n in nodes if n["role"] == "llm" and n["name"] == "context/summary")
    assert summaries == 1  # the notebook session's one %compact
    assert f": {len(nodes) - 1} messages, 1 summaries" in out, out
    assert "second" in out and ": 2 messages, 0 summaries" in out, out


def test_the_python_entry_points_refuse_an_unknown_session_in_one_line(tmp_path):
    """copy_session / copy_sessions from Python (a notebook): a session that is not in the
    source is a StoreError naming it, with what to do — nothing created in the destination."""
    from ocw.store.transfer import copy_session, copy_sessions
    from ocw.text.errors import StoreError

    a = open_backend(str(tmp_path / "a.duckdb"))
    b = open_backend(str(tmp_path / "b.duckdb"))
    try:
        a_name = a.describe()
        with pytest.raises(StoreError) as e:
            copy_session(a, b, "s_missing")
        assert e.value.user_message() == f"no session s_missing in {a_name}"
        with pytest.raises(StoreError) as e:
            copy_sessions(a, b, ["nope"])
        assert e.value.user_message() == f"no session 'nope' in {a_name} — list them with %sessions"
        assert b.list_sessions() == []
    finally:
        a.close()
        b.close()


def test_only_summaries_count_as_summaries(tmp_path, capsys):
    """An "llm" message of another name (a helper model's note) is a message, not a summary."""
    a = str(tmp_path / "a.duckdb")
    st = ocw.Store(a)
    st.create_session(name="notes").append_many([("user", "q"), ("llm", "a helper's note", "helper"),
                                                 ("assistant", "a")])
    st.close()
    code, out, _ = run_cli(capsys, "import", "--from", a, "--to", str(tmp_path / "b.duckdb"))
    assert code == 0 and ": 3 messages, 0 summaries" in out, out
