"""Issue 11 item 2: the store never touches what it does not own.

Every test goes through `ocw.Store(path)` on a real DuckDB file. A refused file
is compared byte for byte (sha256 of the file and of its .wal) and the folder
listing before and after, so "refused" also means "nothing written, nothing
left beside it".
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import duckdb
import pytest

import ocw
from ocw.store.duckdb import migrations, ownership
from ocw.text.errors import BadDatabasePath, ForeignDatabase, InvalidArgument, NewerSchema, OcwError, StoreError
from ocw.store.duckdb.migrations import MIGRATIONS, SCHEMA_VERSION
from ocw.store.duckdb.store import DUCKDB_CONFIG


def fingerprint(path) -> dict:
    """sha256 of the file and its .wal (None when absent), and the folder listing."""
    path = str(path)

    def sha(p):
        if not os.path.exists(p):
            return None
        with open(p, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    folder = os.path.dirname(path)
    return {"file": sha(path), "wal": sha(path + ".wal"),
            "listing": sorted(os.listdir(folder)) if os.path.isdir(folder) else None}


def make_db(path, *sql):
    con = duckdb.connect(str(path), config=DUCKDB_CONFIG)
    for q in sql:
        con.execute(q)
    con.close()


def refused(path, kind=StoreError, match=None):
    """Open `path` with ocw.Store; assert a one-line `kind` and the file untouched."""
    before = fingerprint(path)
    with pytest.raises(kind) as e:
        ocw.Store(str(path))
    msg = e.value.user_message()
    assert "\n" not in msg and e.value.hint, msg
    if match:
        assert match in msg, msg
    assert fingerprint(path) == before
    return msg


def marker(path) -> dict:
    con = duckdb.connect(str(path), read_only=True, config=DUCKDB_CONFIG)
    try:
        return dict(con.execute("SELECT key, value FROM ocw_meta").fetchall())
    finally:
        con.close()


# -- foreign DuckDB files -------------------------------------------------------------------


def test_a_file_with_unrelated_tables_is_refused_untouched(tmp_path):
    db = tmp_path / "theirs.duckdb"
    make_db(db, "CREATE TABLE invoices (id INTEGER, total DECIMAL(10,2))", "INSERT INTO invoices VALUES (1, 9.5)")
    msg = refused(db, ForeignDatabase, "invoices")
    assert "another application" in msg
    assert not (tmp_path / "theirs.duckdb.ocw-lock").exists()  # nothing left beside it


def test_a_foreign_file_with_a_pending_wal_is_not_replayed(tmp_path):
    """A read-write open would replay the WAL into the file and delete it; the
    ownership check opens read-only, so both stay byte for byte."""
    db = tmp_path / "crashed.duckdb"
    subprocess.run([sys.executable, "-c", f"""
import duckdb, os
c = duckdb.connect({str(db)!r})
c.execute("CREATE TABLE t (a INTEGER)"); c.execute("CHECKPOINT"); c.execute("INSERT INTO t VALUES (1)")
os._exit(0)
"""], check=True)
    assert (tmp_path / "crashed.duckdb.wal").exists()  # the control: there is a WAL to protect
    before = fingerprint(db)
    refused(db, ForeignDatabase)
    assert fingerprint(db) == before and before["wal"] is not None


def test_a_clashing_sessions_table_is_refused_before_schema_version_exists(tmp_path):
    db = tmp_path / "clash.duckdb"
    make_db(db, "CREATE TABLE sessions (user_id INTEGER, started TIMESTAMP)")
    refused(db, ForeignDatabase, "sessions")
    con = duckdb.connect(str(db), read_only=True)
    assert [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()] == ["sessions"]
    con.close()


@pytest.mark.parametrize("sql", [
    # someone else's schema_version: another app's tables next to it
    ["CREATE TABLE schema_version (version INTEGER)", "INSERT INTO schema_version VALUES (7)",
     "CREATE TABLE accounts (id INTEGER)"],
    # a schema_version with other columns
    ["CREATE TABLE schema_version (version VARCHAR, applied TIMESTAMP)", "INSERT INTO schema_version VALUES ('3', now())"],
    # ocw's table names, someone else's columns
    ["CREATE TABLE schema_version (version INTEGER)", "INSERT INTO schema_version VALUES (1)",
     "CREATE TABLE sessions (id VARCHAR)", "CREATE TABLE nodes (id VARCHAR)"],
    # a schema_version alone but with a version no ocw wrote without a marker
    ["CREATE TABLE schema_version (version INTEGER)", "INSERT INTO schema_version VALUES (1), (2), (3), (4), (5)"],
    # a marker table that is not ocw's
    ["CREATE TABLE ocw_meta (key VARCHAR, value VARCHAR)", "INSERT INTO ocw_meta VALUES ('app', 'other')"],
    # only a view, only a sequence
    ["CREATE VIEW v AS SELECT 1 AS x"],
    ["CREATE SEQUENCE s"],
    # a table in another schema
    ["CREATE SCHEMA crm", "CREATE TABLE crm.people (id INTEGER)"],
], ids=["foreign-schema_version", "schema_version-other-columns", "ocw-names-other-columns",
        "schema_version-5-unmarked", "marker-of-another-app", "view", "sequence", "other-schema"])
def test_foreign_layouts_are_refused_untouched(tmp_path, sql):
    db = tmp_path / "foreign.duckdb"
    make_db(db, *sql)
    refused(db, ForeignDatabase)


def test_an_earlier_ocw_file_with_an_extra_table_is_not_ocws_any_more(tmp_path):
    """Recognition by exact schema: a v3 file plus a user's own table is refused."""
    db = tmp_path / "v3-plus.duckdb"
    con = duckdb.connect(str(db), config=DUCKDB_CONFIG)
    ownership.migrate(con, target=3)
    con.execute("DROP TABLE IF EXISTS ocw_meta")
    con.execute("CREATE TABLE my_notes (t VARCHAR)")
    con.close()
    refused(db, ForeignDatabase, "my_notes")


# -- files ocw wrote --------------------------------------------------------------------------


def legacy_file(path, version: int):
    """A file exactly as an ocw before the marker wrote it at `version`."""
    con = duckdb.connect(str(path), config=DUCKDB_CONFIG)
    con.execute("CREATE TABLE schema_version (version INTEGER)")
    for n in range(1, version + 1):
        MIGRATIONS[n - 1](con)
        con.execute("INSERT INTO schema_version VALUES (?)", [n])
    if version >= 1:
        con.execute("INSERT INTO sessions (id, name, provider, model, context_window, system_prompt, metadata)"
                    " VALUES ('s_old', 'kept', 'offline', 'ocw-offline', 8192, '', '{}')")
    con.close()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_files_of_earlier_ocw_versions_are_recognised_and_upgraded(tmp_path, version):
    db = tmp_path / f"v{version}.duckdb"
    legacy_file(db, version)
    st = ocw.Store(str(db))
    if version:
        assert st.open_session("kept").id == "s_old"
    st.close()
    assert marker(db) == {"app": "ocw", "schema_version": str(SCHEMA_VERSION), "written_by": ocw.__version__,
                          "needs_ocw": migrations.OCW_VERSION_OF_SCHEMA[SCHEMA_VERSION]}


def test_a_new_file_carries_the_marker_and_reopens(tmp_path):
    db = tmp_path / "new.duckdb"
    ocw.Store(str(db)).create_session(name="a").store.close()
    assert marker(db)["app"] == "ocw" and marker(db)["schema_version"] == str(SCHEMA_VERSION) == "5"
    st = ocw.Store(str(db))
    assert [s["name"] for s in st.sessions()] == ["a"]
    st.close()


def test_an_empty_duckdb_database_and_a_zero_byte_file_are_new_files(tmp_path):
    empty_db = tmp_path / "empty.duckdb"
    make_db(empty_db)  # a valid DuckDB file holding nothing
    zero = tmp_path / "zero.duckdb"
    zero.write_bytes(b"")  # what `touch` or mkstemp leaves
    for db in (empty_db, zero):
        st = ocw.Store(str(db))
        st.create_session(name="here")
        st.close()
        assert marker(db)["app"] == "ocw"
        assert ocw.Store(str(db)).open_session("here").name == "here"


def newer_file(path, version=SCHEMA_VERSION + 3, needs="9.1.0", written_by="9.4.2"):
    con = duckdb.connect(str(path), config=DUCKDB_CONFIG)
    ownership.migrate(con)
    con.execute("INSERT INTO schema_version VALUES (?)", [version])
    con.execute("UPDATE ocw_meta SET value = ? WHERE key = 'schema_version'", [str(version)])
    con.execute("UPDATE ocw_meta SET value = ? WHERE key = 'needs_ocw'", [needs])
    con.execute("UPDATE ocw_meta SET value = ? WHERE key = 'written_by'", [written_by])
    con.execute("CREATE TABLE future_things (x INTEGER)")
    con.close()


def test_a_newer_schema_is_refused_and_says_which_ocw_it_needs(tmp_path):
    db = tmp_path / "future.duckdb"
    newer_file(db)
    msg = refused(db, NewerSchema, "9.1.0")
    assert f"schema {SCHEMA_VERSION + 3}" in msg and "9.4.2" in msg and f"schema {SCHEMA_VERSION})" in msg


def test_one_schema_version_ahead_is_refused_too(tmp_path, monkeypatch):
    """Boundary: the version this ocw writes opens; one above it does not."""
    db = tmp_path / "edge.duckdb"
    newer_file(db, version=SCHEMA_VERSION + 1, needs="0.2.0")
    refused(db, NewerSchema, "0.2.0")
    at = tmp_path / "at.duckdb"
    ocw.Store(str(at)).close()
    assert marker(at)["schema_version"] == str(SCHEMA_VERSION)
    ocw.Store(str(at)).close()  # at the version: opens


@pytest.mark.parametrize("stated, opens", [("0", True), ("-1", False)])
def test_a_marker_stating_schema_0_is_still_ocws_and_minus_1_is_unreadable(tmp_path, stated, opens):
    """Boundary of marker_version's `version >= 0`, seen from the user: an ocw file whose
    marker states schema 0 is still ocw's (its `schema_version` table decides the migrations)
    and opens with its sessions; a marker stating -1 is not a version, so the file is judged
    by its tables alone — not a layout ocw ever wrote — and refused untouched."""
    db = tmp_path / f"stated{stated}.duckdb"
    ocw.Store(str(db)).create_session(name="kept").store.close()
    con = duckdb.connect(str(db), config=DUCKDB_CONFIG)
    con.execute("UPDATE ocw_meta SET value = ? WHERE key = 'schema_version'", [stated])
    con.close()
    if opens:
        st = ocw.Store(str(db))
        assert [s["name"] for s in st.sessions()] == ["kept"]
        st.close()
    else:
        refused(db, ForeignDatabase, "another application's DuckDB database")


# -- paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "   ", "\t\n"])
def test_an_empty_path_is_refused_not_an_in_memory_database(value):
    with pytest.raises(BadDatabasePath) as e:
        ocw.Store(value)
    assert "empty" in str(e.value) and ":memory:" in str(e.value)
    assert isinstance(e.value, InvalidArgument) and isinstance(e.value, ValueError)


def test_memory_only_when_asked_for():
    st = ocw.Store(":memory:")
    st.create_session(name="m").append("user", "hi")
    assert st.open_session("m").branch()
    st.close()


def test_a_directory_and_a_folder_name_are_refused(tmp_path):
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(BadDatabasePath, match="is a directory"):
        ocw.Store(str(tmp_path))
    with pytest.raises(BadDatabasePath, match="names a folder"):
        ocw.Store(str(tmp_path / "sub") + "/")
    assert sorted(os.listdir(tmp_path)) == before


def test_a_path_under_a_regular_file_is_refused(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    for path in (f / "ocw.duckdb", f / "deeper" / "ocw.duckdb"):
        with pytest.raises(BadDatabasePath, match="is a file, not a folder"):
            ocw.Store(str(path))
    assert f.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_a_folder_that_cannot_be_created_is_one_line(tmp_path):
    with pytest.raises(BadDatabasePath) as e:
        ocw.Store("/proc/ocw-cannot-exist/sub/ocw.duckdb")
    assert "cannot create the folder" in str(e.value) and "\n" not in e.value.user_message()
    assert not os.path.exists("/proc/ocw-cannot-exist")


def test_a_missing_folder_that_can_be_created_is_created(tmp_path):
    st = ocw.Store(str(tmp_path / "a" / "b" / "ocw.duckdb"))
    st.create_session(name="deep")
    st.close()
    assert (tmp_path / "a" / "b" / "ocw.duckdb").is_file()


@pytest.mark.parametrize("content", [b"hello, this is my diary\n" * 20, b"x", b"\x00" * 4096,
                                     b"SQLite format 3\x00" + b"\x00" * 100])
def test_a_file_that_is_not_a_duckdb_database_is_refused_untouched(tmp_path, content):
    f = tmp_path / "mine.duckdb"
    f.write_bytes(content)
    refused(f, BadDatabasePath, "not a DuckDB database")


@pytest.mark.parametrize("value, why", [
    ("/dev/null", "not a regular file"),
    ("mysql://localhost/ocw", "URL"),  # (a postgresql:// URL selects the PostgreSQL store: test_pg_secrets.py)
    ("md:my_db", "URL"),
    ("a\x00b.duckdb", "NUL"),
    ("bad\udcff.duckdb", "not valid Unicode"),
    (b"/tmp/x.duckdb", "as text"),
    (42, "as text"),
])
def test_other_paths_that_cannot_be_a_database(value, why, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadDatabasePath) as e:
        ocw.Store(value)
    assert why in str(e.value) and "\n" not in e.value.user_message()
    assert os.listdir(tmp_path) == []  # no folder named "mysql:" or file named "md:my_db"


def test_a_tilde_path_is_the_home_folder_not_a_folder_named_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    st = ocw.Store("~/ocw.duckdb")
    st.close()
    assert st.path == str(tmp_path / "home" / "ocw.duckdb") and os.path.isfile(st.path)
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("setup, why", [
    (lambda t: (t / "f").write_text("x") and str(t / "f" / "ocw.duckdb"), "is a file, not a folder"),
    (lambda t: "/proc/ocw-missing/ocw.duckdb", "cannot create the folder"),
    (lambda t: str(t), "is a directory"),
    (lambda t: "   ", "empty"),
])
def test_ocw_db_in_the_environment_is_checked_the_same_way(setup, why, tmp_path, monkeypatch):
    monkeypatch.setenv("OCW_DB", setup(tmp_path))
    with pytest.raises(BadDatabasePath, match=why):
        ocw.Store()


def test_store_options_are_checked(tmp_path):
    for bad in (0, -1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(InvalidArgument, match="idle_close"):
            ocw.Store(str(tmp_path / "o.duckdb"), idle_close=bad)
    assert not (tmp_path / "o.duckdb").exists()


def test_a_file_open_read_write_elsewhere_in_this_process(tmp_path):
    """DuckDB refuses a read-only connection beside a read-write one in the same
    process; the ownership check then shares that instance and only reads."""
    db = str(tmp_path / "shared.duckdb")
    ocw.Store(db).create_session(name="one").store.close()
    mine = duckdb.connect(db, config=DUCKDB_CONFIG)  # the user's own connection, held
    try:
        b = ocw.Store(db)
        assert [s["name"] for s in b.sessions()] == ["one"]
        b.close()
    finally:
        mine.close()
    foreign = str(tmp_path / "theirs.duckdb")
    theirs = duckdb.connect(foreign, config=DUCKDB_CONFIG)
    theirs.execute("CREATE TABLE t (a INTEGER)")
    try:
        with pytest.raises(ForeignDatabase):
            ocw.Store(foreign)
        assert [r[0] for r in theirs.execute("SELECT table_name FROM duckdb_tables()").fetchall()] == ["t"]
    finally:
        theirs.close()


def test_every_refusal_is_an_ocw_error_the_notebook_shows_in_one_line():
    for cls in (BadDatabasePath, ForeignDatabase, NewerSchema):
        assert issubclass(cls, StoreError) and issubclass(cls, OcwError) and cls.hint


# -- edges of the path check, classify and migrate (mutation sample) --------------------------------------
@pytest.mark.parametrize("url", ["duckdb+x://host/db", "s://host/db", "postgresql+psycopg://me@h/db"])
def test_a_url_of_any_scheme_shape_is_refused_as_a_url(url):
    from ocw.store.duckdb.ownership import check_path

    with pytest.raises(BadDatabasePath, match="URL"):
        check_path(url)


def _foreign_memory():
    con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    con.execute("CREATE TABLE invoices (id INTEGER)")
    return con


def test_classify_without_a_path_names_the_database_and_migrate_claims_before_writing():
    from ocw.store.duckdb import ownership as own

    con = _foreign_memory()
    try:
        with pytest.raises(ForeignDatabase, match="^the database is another application's DuckDB database "
                                                  r"\(it holds invoices\)"):
            own.classify(con)
        with pytest.raises(ForeignDatabase, match="invoices"):
            own.migrate(con)
        assert con.execute("SELECT table_name FROM duckdb_tables()").fetchall() == [("invoices",)]
    finally:
        con.close()


def test_classify_file_on_a_file_that_is_not_duckdb_says_the_path_and_duckdbs_first_line(tmp_path):
    from ocw.store.duckdb.ownership import classify_file

    path = tmp_path / "notes.duckdb"
    path.write_bytes(b"x" * 4096)
    with pytest.raises(BadDatabasePath) as ei:
        classify_file(str(path))
    msg = ei.value.user_message()
    assert msg.startswith(f"cannot use {str(path)!r} as the ocw database: ") and "\n" not in msg
    assert len(msg.split(": ", 1)[1]) > 10  # DuckDB's own first line follows
