"""The store-level suite, run against both backends: a DuckDB file and a real
PostgreSQL server (tests/pg_server.py starts it). Rows in, rows out: every
method of the interface (ocw/store/api.py), its transaction boundaries, and
the invariants the sessions rely on."""
from __future__ import annotations

import inspect
import threading

from pathlib import Path

import pytest

from ocw.text.errors import StoreError
from ocw.context.graph import SUMMARY_NAME
from ocw.store.postgres.store import PostgresStore
from ocw.store.duckdb.store import DuckDBStore
from ocw.store.api import METHODS, StoreBackend


@pytest.fixture(params=["duckdb", "postgresql"])
def backend(request, tmp_path):
    if request.param == "duckdb":
        b = DuckDBStore(str(tmp_path / "contract.duckdb"))
    else:
        b = PostgresStore(request.getfixturevalue("pg_url"))
    yield b
    b.close()


@pytest.fixture
def reopen(backend, tmp_path):
    """A second store on the same database (another kernel's)."""
    opened = []

    def make():
        b = type(backend)(backend.path)
        opened.append(b)
        return b

    yield make
    for b in opened:
        b.close()


def new_session(backend, sid="s1", name=None, **meta):
    return backend.insert_session({"id": sid, "name": name or sid, "provider": "offline", "model": "gpt-4o",
                                   "context_window": 1000, "system_prompt": "sp",
                                   "metadata": {"context_compaction_count": 0, **meta}})


def msgs(*specs):
    """[(id, role, tokens)] -> node dicts."""
    return [{"id": i, "role": r, "name": None, "content": [{"type": "text", "text": f"text of {i}"}],
             "tokens": t, "encoding": "o200k_base"} for i, r, t in specs]


def summary(sid, parent, cover, supersedes=None, tokens=5):
    return {"id": sid, "parent_id": parent, "cover_count": cover, "content": [{"type": "text", "text": "sum"}],
            "tokens": tokens, "encoding": "o200k_base", "supersedes": supersedes}


# -- the interface ----------------------------------------------------------------------
def interface_gaps(cls) -> list[str]:
    """Methods of the Protocol that `cls` lacks or takes with other parameters."""
    gaps = []
    for name in METHODS:
        mine = getattr(cls, name, None)
        if not callable(mine):
            gaps.append(f"{name}: missing")
            continue
        want_sig, have_sig = inspect.signature(getattr(StoreBackend, name)), inspect.signature(mine)
        want, have = list(want_sig.parameters), list(have_sig.parameters)
        if have != want:
            gaps.append(f"{name}: {have} != {want}")
            continue
        # the same defaults too: a caller written against the interface (epoch=0, after_seq=0,
        # hi=None, change=None...) gets the same call from either backend
        differ = {n: (have_sig.parameters[n].default, p.default) for n, p in want_sig.parameters.items()
                  if have_sig.parameters[n].default != p.default}
        if differ:
            gaps.append(f"{name}: defaults {differ}")
    return gaps


@pytest.mark.parametrize("cls", [DuckDBStore, PostgresStore])
def test_both_backends_have_every_method_of_the_interface(cls):
    assert len(METHODS) == 21  # the interface as the brief lists it (kind and path besides)
    assert {"insert_session", "append_nodes", "insert_summary", "undo_sessions", "leaves", "describe",
            "close"} <= set(METHODS)
    assert interface_gaps(cls) == []
    assert isinstance(cls.kind, str)


def test_the_interface_check_sees_a_missing_or_different_method():
    class Short(DuckDBStore):
        leaves = None

        def node(self, sid, nid):  # no epoch
            return None

    assert interface_gaps(Short) == ["leaves: missing", "node: ['self', 'sid', 'nid'] != ['self', 'sid', 'nid', 'epoch']"]

    class OtherDefault(DuckDBStore):
        def summaries(self, sid, after_seq=1, epoch=0):  # the interface's after_seq is 0
            return []

    assert interface_gaps(OtherDefault) == ["summaries: defaults {'after_seq': (1, 0)}"]


def test_instances_satisfy_the_protocol(backend):
    assert isinstance(backend, StoreBackend)
    assert backend.kind in ("duckdb", "postgresql") and backend.path


# -- sessions ---------------------------------------------------------------------------
def test_insert_read_find(backend):
    row = new_session(backend, "s1", "work")
    assert (row["id"], row["name"], row["head_id"], row["occupancy_generation"], row["rev"], row["count_epoch"]) \
        == ("s1", "work", None, 0, 0, 0)
    assert row["metadata"] == {"context_compaction_count": 0}
    assert backend.session_row("s1") == row
    assert backend.find_session("work") == "s1" and backend.find_session("s1") == "s1"
    assert backend.find_session("nope") is None and backend.session_row("nope") is None
    assert backend.rev("s1") == 0 and backend.rev("nope") is None
    new_session(backend, "s2", "s1")  # a name that is another session's id: the id wins
    assert backend.find_session("s1") == "s1"


def test_a_taken_name_is_refused_and_nothing_is_inserted(backend):
    new_session(backend, "s1", "work")
    with pytest.raises(StoreError, match="a session named 'work' already exists"):
        new_session(backend, "s2", "work")
    assert [r["id"] for r in backend.list_sessions()] == ["s1"]


def test_archive_renames_and_creates_in_one_transaction(backend):
    new_session(backend, "old", "nb")
    backend.insert_session({"id": "new", "name": "nb", "provider": "offline", "model": "m", "context_window": 10,
                            "metadata": {}}, archive=("old", "nb @ then"))
    assert backend.session_row("old")["name"] == "nb @ then" and backend.session_row("old")["rev"] == 1
    assert backend.find_session("nb") == "new"
    # The holder changed meanwhile: neither the rename nor the create happens.
    with pytest.raises(StoreError, match="changed meanwhile"):
        backend.insert_session({"id": "newer", "name": "nb", "provider": "offline", "model": "m",
                                "context_window": 10, "metadata": {}}, archive=("old", "nb @ later"))
    assert backend.session_row("newer") is None and backend.session_row("old")["name"] == "nb @ then"
    assert backend.session_row("new")["rev"] == 0


def test_update_session_runs_change_on_the_stored_row_and_bumps_rev_by_one(backend):
    new_session(backend)
    seen = []

    def change(row):
        seen.append((row["rev"], row["metadata"]))
        return {"metadata": {**row["metadata"], "k": len(seen)}}

    assert backend.update_session("s1", change)["rev"] == 1
    assert backend.update_session("s1", change)["metadata"]["k"] == 2
    assert seen == [(0, {"context_compaction_count": 0}), (1, {"context_compaction_count": 0, "k": 1})]
    assert backend.update_session("s1", lambda row: None)["rev"] == 2  # nothing to write: no write
    assert backend.rev("s1") == 2


def test_a_change_that_raises_writes_nothing(backend):
    new_session(backend)
    backend.append_nodes("s1", msgs(("a", "user", 3)))
    before = backend.session_row("s1")

    def boom(row, parent=None):
        raise StoreError("refused by the caller")

    with pytest.raises(StoreError, match="refused by the caller"):
        backend.update_session("s1", boom)
    with pytest.raises(StoreError, match="refused by the caller"):
        backend.append_nodes("s1", msgs(("b", "assistant", 4)), boom)
    with pytest.raises(StoreError, match="refused by the caller"):
        backend.insert_summary("s1", summary("x", "a", 1), boom)
    with pytest.raises(StoreError, match="refused by the caller"):
        backend.set_counts("s1", [("a", 9, 1, 9, 1, "cl100k_base")], boom)
    assert backend.session_row("s1") == before
    assert backend.node_count("s1") == 1 and backend.node("s1", "a", 1).tokens == 3  # no recount kept


def test_rename_and_delete(backend):
    new_session(backend, "s1", "a")
    new_session(backend, "s2", "b")
    assert backend.rename_session("s1", "c")["name"] == "c"
    with pytest.raises(StoreError, match="already exists"):
        backend.rename_session("s1", "b")
    assert backend.session_row("s1")["name"] == "c"
    backend.append_nodes("s1", msgs(("a1", "user", 1), ("a2", "assistant", 2)))
    backend.insert_summary("s1", summary("sm", "a1", 1), lambda row: {})
    backend.set_counts("s1", [("a1", 5, 1, 5, 1, "cl100k_base")])
    assert backend.delete_session("s1") == 3
    assert backend.session_row("s1") is None and backend.node_count("s1") == 0
    assert backend.node("s1", "a1") is None and backend.find_session("c") is None
    assert backend.session_row("s2")["name"] == "b"  # the other session untouched
    assert backend.delete_session("s1") == 0


def test_list_sessions_newest_use_first_with_branch_size(backend):
    new_session(backend, "s1", "a")
    new_session(backend, "s2", "b")
    backend.append_nodes("s1", msgs(("a1", "user", 10), ("a2", "assistant", 7)))
    listed = backend.list_sessions()
    assert [r["id"] for r in listed] == ["s1", "s2"]
    assert (listed[0]["messages"], listed[0]["tokens"]) == (2, 17)
    assert (listed[1]["messages"], listed[1]["tokens"]) == (0, 0)
    assert set(listed[0]) == {"id", "name", "provider", "model", "context_window", "updated_at", "created_at",
                              "messages", "tokens", "shared_by"}
    assert listed[0]["shared_by"] is None  # the role's own (PostgreSQL), or a file's (DuckDB)


def test_undo_sessions_puts_rows_back_only_if_nothing_was_written_since(backend):
    new_session(backend, "s1", "nb")
    saved = backend.session_rows(["s1"])
    assert set(saved) == {"s1"}
    backend.update_session("s1", lambda row: {"model": "gpt-4", "context_window": 50})
    backend.insert_session({"id": "s2", "name": "other", "provider": "offline", "model": "m",
                            "context_window": 10, "metadata": {}})
    revs = {sid: r["rev"] for sid, r in backend.session_rows(["s1", "s2"]).items()}
    assert not backend.undo_sessions(restore=[saved["s1"]], delete=["s2"], expect_rev={**revs, "s1": revs["s1"] - 1})
    assert backend.session_row("s1")["model"] == "gpt-4" and backend.session_row("s2") is not None
    assert backend.undo_sessions(restore=[saved["s1"]], delete=["s2"], expect_rev=revs)
    row = backend.session_row("s1")
    assert (row["model"], row["context_window"], row["rev"]) == ("gpt-4o", 1000, 0)
    assert backend.session_row("s2") is None
    # A session the cell created that holds messages now is not deleted.
    new_session(backend, "s3", "third")
    backend.append_nodes("s3", msgs(("c1", "user", 1)))
    assert not backend.undo_sessions(restore=[], delete=["s3"], expect_rev={"s3": backend.rev("s3")})
    assert backend.node_count("s3") == 1


# -- nodes ----------------------------------------------------------------------------------
def test_append_chains_under_head_with_depth_totals_and_rising_seq(backend):
    new_session(backend)
    row, nodes = backend.append_nodes("s1", msgs(("a", "user", 10), ("b", "assistant", 20)))
    assert row["head_id"] == "b" and row["rev"] == 1
    assert [(n.id, n.parent_id, n.depth, n.cum, n.epoch) for n in nodes] == [("a", None, 1, 10, 0), ("b", "a", 2, 30, 0)]
    parents = []
    row, more = backend.append_nodes("s1", msgs(("c", "user", 5)),
                                     lambda row, parent: parents.append(parent.id) or {"occupancy_generation": 4})
    assert parents == ["b"] and row["occupancy_generation"] == 4 and row["head_id"] == "c" and row["rev"] == 2
    assert (more[0].parent_id, more[0].depth, more[0].cum) == ("b", 3, 35)
    seqs = [n.seq for n in nodes + more]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    stored = backend.node("s1", "c")
    assert (stored.seq, stored.parent_id, stored.depth, stored.cum, stored.tokens) == (more[0].seq, "b", 3, 35, 5)
    assert backend.content("s1", [stored]) == {"c": [{"type": "text", "text": "text of c"}]}
    assert backend.node("other", "c") is None  # a node is read within its session


def test_the_row_an_append_returns_is_the_row_stored(backend):
    """Whatever the append reads back and whatever it takes from what it wrote (PostgreSQL
    does not read the metadata back), the row it returns is the stored row, field for field."""
    new_session(backend)
    meta = {"context_compaction_count": 0, "context_window": {"used": 7, "head": "a", "note": "it's \\ \u00e9"},
            "calibration": {"recent": [0.25, 0.5]}}
    row, _ = backend.append_nodes("s1", msgs(("a", "user", 10)), lambda row, parent: {"metadata": meta})
    assert row == backend.session_row("s1") and row["metadata"] == meta
    row, _ = backend.append_nodes("s1", msgs(("b", "user", 10)))  # metadata not written: the row's own
    assert row == backend.session_row("s1") and row["metadata"] == meta and row["head_id"] == "b"


def test_appended_and_summary_nodes_carry_their_stored_time(backend):
    """The chat widget shows each message's time from the rows a write returns (issue 15):
    they must carry the created_at the database stored, on both backends."""
    new_session(backend)
    _, nodes = backend.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 1)))
    _, s = backend.insert_summary("s1", summary("sm", "a", 1), lambda row: {})
    for node in (*nodes, s):
        stored = backend.node("s1", node.id)
        assert node.created_at is not None and node.created_at == stored.created_at, node


def test_nodes_since_reads_a_seq_range_inclusive(backend):
    new_session(backend)
    _, nodes = backend.append_nodes("s1", msgs(*[(f"n{i}", "user", 1) for i in range(5)]))
    s = [n.seq for n in nodes]
    assert [n.id for n in backend.nodes_since("s1", s[2])] == ["n2", "n3", "n4"]
    assert [n.id for n in backend.nodes_since("s1", s[2] + 1)] == ["n3", "n4"]
    under = [n.id for n in backend.nodes_since("s1", s[2] - 1)]
    assert under[-3:] == ["n2", "n3", "n4"] and ("n1" in under) == (s[1] == s[2] - 1) and "n0" not in under
    assert [n.id for n in backend.nodes_since("s1", s[1], s[3])] == ["n1", "n2", "n3"]
    assert [n.id for n in backend.nodes_since("s1", s[1], s[3] - 1)] == ["n1", "n2"]
    assert [n.id for n in backend.nodes_since("s1", 0)] == [f"n{i}" for i in range(5)]
    assert backend.nodes_since("s1", s[4] + 1) == []


def test_summary_hangs_beside_the_branch_and_head_stays(backend):
    new_session(backend)
    backend.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 1), ("c", "user", 1)))
    row, node = backend.insert_summary("s1", summary("s", "b", 2),
                                       lambda row: {"occupancy_generation": row["occupancy_generation"] + 1,
                                                    "metadata": {**row["metadata"], "context_compaction_count": 1}})
    assert row["head_id"] == "c" and row["occupancy_generation"] == 1 and row["metadata"]["context_compaction_count"] == 1
    assert (node.parent_id, node.cover_count, node.is_summary, node.depth) == ("b", 2, True, None)
    assert [n.id for n in backend.summaries("s1")] == ["s"]
    assert backend.summaries("s1", after_seq=node.seq) == []
    assert [n.id for n in backend.summaries("s1", after_seq=node.seq - 1)] == ["s"]
    # A node whose only child is a summary is still a leaf; the summary is none.
    assert [n.id for n in backend.leaves("s1")] == ["c"]
    _, second = backend.insert_summary("s1", summary("s2", "c", 3, supersedes="s"), lambda row: {})
    assert second.supersedes == "s" and [n.id for n in backend.summaries("s1")] == ["s", "s2"]
    assert backend.node_count("s1") == 5


def test_leaves_are_every_branch_end(backend):
    new_session(backend)
    backend.append_nodes("s1", msgs(("a", "user", 1), ("b", "assistant", 1)))
    backend.update_session("s1", lambda row: {"head_id": "a"})  # a rewind
    backend.append_nodes("s1", msgs(("c", "assistant", 1)))
    assert [n.id for n in backend.leaves("s1")] == ["b", "c"]
    assert backend.node("s1", "c").parent_id == "a"


def test_recounts_go_beside_the_node_rows(backend):
    new_session(backend)
    backend.append_nodes("s1", msgs(("a", "user", 10), ("b", "assistant", 20)))
    row = backend.set_counts("s1", [("a", 11, 1, 11, 1, "cl100k_base"), ("b", 22, 2, 33, 1, "cl100k_base")],
                             lambda row: {"count_epoch": 1})
    assert row["count_epoch"] == 1
    assert (backend.node("s1", "b", 0).tokens, backend.node("s1", "b", 0).cum) == (20, 30)  # the row as written
    b1 = backend.node("s1", "b", 1)
    assert (b1.tokens, b1.cum, b1.epoch) == (22, 33, 1)
    assert [n.cum for n in backend.nodes_since("s1", 0, None, 1)] == [11, 33]
    # A recount for the same epoch replaces the earlier one.
    backend.set_counts("s1", [("b", 25, 2, 36, 1, "cl100k_base")])
    assert backend.node("s1", "b", 1).cum == 36
    # The next append continues from the recounted parent, in the session's epoch.
    _, (c,) = backend.append_nodes("s1", msgs(("c", "user", 4)))
    assert (c.depth, c.cum, c.epoch) == (3, 40, 1)


def test_an_append_under_a_stale_parent_is_marked_stale(backend):
    new_session(backend)
    backend.append_nodes("s1", msgs(("a", "user", 10)))
    backend.update_session("s1", lambda row: {"count_epoch": 2})  # no recount of "a" for epoch 2
    _, (b,) = backend.append_nodes("s1", msgs(("b", "user", 1)))
    assert b.epoch == -1 and backend.node("s1", "b", 2).epoch == -1


def test_content_keeps_unicode_and_blocks_exactly(backend):
    new_session(backend)
    blocks = [{"type": "text", "text": "数据 — \"quoted\" \\ \u0000 nul"},
              {"type": "tool_use", "id": "t1", "name": "f", "input": {"z": 1, "a": [1, 2.5, None, True]}}]
    backend.append_nodes("s1", [{"id": "a", "role": "assistant", "name": None, "content": blocks, "tokens": 3}])
    assert backend.content("s1", [backend.node("s1", "a")]) == {"a": blocks}
    assert backend.content("s1", []) == {}


def test_metadata_round_trips(backend):
    new_session(backend, calibration={"gpt-4o": [1.25, 3]}, text="数据 ✓", nested={"a": [1, {"b": None}]})
    row = backend.session_row("s1")
    assert row["metadata"] == {"context_compaction_count": 0, "calibration": {"gpt-4o": [1.25, 3]},
                               "text": "数据 ✓", "nested": {"a": [1, {"b": None}]}}


# -- two writers on one session ---------------------------------------------------------------
def test_concurrent_appends_to_one_session_form_one_chain(backend, reopen):
    """Two stores (two kernels' connections) append 30 turns each to one session at
    once: every append lands under the HEAD its transaction read — one chain, no
    node lost, none twice. (On PostgreSQL each store's turns after its first are sent
    on the row it wrote last, which the other keeps moving: ocw/store/postgres/guess.py.)"""
    new_session(backend)
    other = reopen()
    errors = []

    def writer(store, tag):
        try:
            for i in range(30):
                store.append_nodes("s1", msgs((f"{tag}{i}u", "user", 1), (f"{tag}{i}a", "assistant", 2)))
        except Exception as e:  # pragma: no cover - the assertion below shows it
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(b, t)) for b, t in ((backend, "x"), (other, "y"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    nodes = backend.nodes_since("s1", 0)
    assert len(nodes) == 120 and len({n.id for n in nodes}) == 120
    # One chain in seq order: each node's parent is the one before it; depths 1..120.
    assert [n.parent_id for n in nodes] == [None] + [n.id for n in nodes[:-1]]
    assert [n.depth for n in nodes] == list(range(1, 121))
    assert nodes[-1].cum == 60 * 1 + 60 * 2
    # A turn's two messages stay together.
    assert all(nodes[k].id[:-1] == nodes[k + 1].id[:-1] for k in range(0, 120, 2))
    row = backend.session_row("s1")
    assert row["head_id"] == nodes[-1].id and row["rev"] == 60
    assert [n.id for n in backend.leaves("s1")] == [nodes[-1].id]


def test_describe_names_the_database(backend):
    text = backend.describe()
    if backend.kind == "duckdb":
        assert text == backend.path and text.endswith("contract.duckdb")
    else:
        assert text.startswith("postgresql://postgres@127.0.0.1:") and text.endswith("/" + backend.path.rsplit("/", 1)[1])


# -- walls --------------------------------------------------------------------------------------
# That the store imports no session is tests/test_layers.py's rule (the store sits below the
# conversation layer); here, what only the PostgreSQL side must keep.
PG_MODULES = ("api.py", "postgres/store.py", "postgres/conn.py", "postgres/schema.py", "postgres/listen.py",
              "postgres/url.py", "transfer.py")


@pytest.mark.parametrize("module", PG_MODULES)
def test_the_postgres_store_modules_import_no_driver_at_import_time(module):
    import ast

    path = Path(__file__).resolve().parents[2] / "ocw" / "store" / module
    top = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("psycopg" in ast.dump(n) for n in top), f"{module} imports psycopg at import time"
    # the control: the check reads the module (a driver import inside a function is seen by ast.walk)
    assert any("psycopg" in ast.dump(n) for n in ast.walk(ast.parse(path.read_text()))) or module in (
        "api.py", "transfer.py", "postgres/url.py", "postgres/schema.py")


def test_load_ext_with_a_postgres_url_loads_no_driver(tmp_path):
    """`%load_ext ocw` and `%config Ocw` with OCW_DB a PostgreSQL URL import neither
    psycopg nor duckdb nor httpx (nothing connects until a command needs the store).
    The background warm-up is off here: it imports the driver on purpose, and what it
    imports (and that it connects nowhere) is tests/test_imports.py's."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
            "ip = InteractiveShell.instance()\nip.run_line_magic('load_ext', 'ocw')\n"
            "ip.run_line_magic('config', 'Ocw')\nip.run_line_magic('ocw', 'help')\n"
            "print('LOADED', sorted(m for m in ('psycopg', 'duckdb', 'httpx') if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCW_")}
    env.update(OCW_DB="postgresql://bob:Pa55word-long@127.0.0.1:1/team", IPYTHONDIR=str(tmp_path / "ipy"),
               OCW_WARM_UP="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout
    assert "postgresql://bob@127.0.0.1:1/team" in out.stdout and "Pa55word-long" not in out.stdout + out.stderr
