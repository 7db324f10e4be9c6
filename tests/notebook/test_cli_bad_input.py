"""Issue 25 item 4: the `ocw` command's bad-input table.

Each row runs `ocw export|import` (ocw/notebook/cli.py, in this process: its
stdout and stderr captured) against real DuckDB files in a folder of their own
and measures: exit status 2 (or 1 for a refused session) with exactly one line
on stderr, no traceback; the marker password nowhere in any output; every file
that was there byte-identical (the source above all); no file left behind that
was not there (a refused copy creates nothing). A PostgreSQL URL row that would
need a server uses one that does not exist: its password must still not show.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import ocw
from ocw.notebook import cli
from ocw.store.duckdb import ownership
from ocw.store.duckdb.store import DUCKDB_CONFIG

PW = "S3cret/Pass#wd?9x"  # holds / # ? (urllib's errors quoted the part before them)
PW_PLAIN = "S3cretPassWord99"
MARKERS = (PW, PW_PLAIN, "S3cr", "S3cret")


def _files(d: Path) -> dict:
    """Every file under `d` by sha256 (a folder as "dir"); an ocw sidecar lock by
    presence only — its token changes each time a process takes the file, by design."""
    def mark(p: Path) -> str:
        if not p.is_file():
            return "dir"
        return "lock" if p.name.endswith(".ocw-lock") else hashlib.sha256(p.read_bytes()).hexdigest()
    return {str(p.relative_to(d)): mark(p) for p in sorted(d.rglob("*"))}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "f"
    d.mkdir()
    monkeypatch.chdir(d)
    monkeypatch.delenv("OCW_DB", raising=False)
    for k in ("PGPASSWORD", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"):
        monkeypatch.delenv(k, raising=False)
    st = ocw.Store(str(d / "src.duckdb"))
    st.create_session(name="a").append("user", "hello")
    st.close()
    open(d / "zero.duckdb", "wb").close()
    (d / "notes.txt").write_text("my notes")
    con = duckdb.connect(str(d / "future.duckdb"), config=DUCKDB_CONFIG)
    ownership.migrate(con)
    con.execute("UPDATE ocw_meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    con = duckdb.connect(str(d / "other.duckdb"))
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.close()
    return d


ROWS = [  # (label, argv, what the line must say)
    ("url-one-slash", ["export", "--from", "src.duckdb", "--to", f"postgresql:/me:{PW}@127.0.0.1/db"], "URL ocw cannot use"),
    ("url-no-scheme", ["export", "--from", "src.duckdb", "--to", f"me:{PW_PLAIN}@127.0.0.1/db"], "URL ocw cannot use"),
    ("url-no-scheme-port", ["export", "--from", "src.duckdb", "--to", f"me:{PW_PLAIN}@h:5432/db"], "URL ocw cannot use"),
    ("url-pw-slash", ["export", "--from", "src.duckdb", "--to", f"postgresql://me:{PW}@127.0.0.1/db"], "port"),
    ("url-pw-hash", ["export", "--from", "src.duckdb", "--to", "postgresql://me:S3cret#PassWord@127.0.0.1/db"], "port"),
    ("url-pw-param", ["export", "--from", "src.duckdb", "--to", f"me@h/db?password={PW_PLAIN}"], "URL ocw cannot use"),
    ("url-from-one-slash", ["import", "--from", f"postgres:/me:{PW}@h/db", "--to", "x.duckdb"], "URL ocw cannot use"),
    ("url-no-server", ["export", "--from", "src.duckdb", "--to", f"postgresql://me:{PW_PLAIN}@127.0.0.1:1/db"],
     "cannot connect"),
    ("from-zero-byte", ["export", "--from", "zero.duckdb", "--to", "out.duckdb"], "holds no ocw sessions"),
    ("from-missing", ["export", "--from", "nothere.duckdb", "--to", "out.duckdb"], "no ocw database at"),
    ("from-text-file", ["export", "--from", "notes.txt", "--to", "out.duckdb"], "not a DuckDB database"),
    ("from-newer", ["export", "--from", "future.duckdb", "--to", "out.duckdb"], "schema 99"),
    ("from-foreign", ["export", "--from", "other.duckdb", "--to", "out.duckdb"], "another application"),
    ("from-folder", ["export", "--from", ".", "--to", "out.duckdb"], "directory"),
    ("session-unknown", ["export", "--from", "src.duckdb", "--to", "out.duckdb", "--session", "nope"], "no session 'nope'"),
    ("to-newer", ["export", "--from", "src.duckdb", "--to", "future.duckdb"], "schema 99"),
    ("to-foreign", ["export", "--from", "src.duckdb", "--to", "other.duckdb"], "another application"),
    ("to-text-file", ["export", "--from", "src.duckdb", "--to", "notes.txt"], "not a DuckDB database"),
    ("to-folder-slash", ["export", "--from", "src.duckdb", "--to", "newdir/"], "folder"),
    ("to-under-a-file", ["export", "--from", "src.duckdb", "--to", "notes.txt/x.duckdb"], "is a file"),
    ("to-unwritable", ["export", "--from", "src.duckdb", "--to", "/proc/nope.duckdb"], "cannot open"),
    ("same-file", ["export", "--from", "src.duckdb", "--to", "src.duckdb"], "same database"),
    ("to-nul", ["export", "--from", "src.duckdb", "--to", "a\x00b"], "NUL"),
]


@pytest.mark.parametrize("label,argv,says", ROWS, ids=[r[0] for r in ROWS])
def test_cli_row(label, argv, says, folder, capsys, caplog):
    before = _files(folder)
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith(f"ocw {argv[0]}: ") and "Traceback" not in err, err
    assert says in lines[0], lines[0]
    shown = out + err + caplog.text
    for m in MARKERS:
        assert m not in shown, (m, shown)
    assert _files(folder) == before  # nothing written, nothing created, the source untouched


def test_a_good_copy_still_works_and_twice_changes_nothing(folder, capsys):
    assert cli.main(["export", "--from", "src.duckdb", "--to", "out.duckdb"]) == 0
    first = capsys.readouterr().out
    assert "1 copied" in first
    snap = _files(folder)["out.duckdb"]
    assert cli.main(["export", "--from", "src.duckdb", "--to", "out.duckdb"]) == 0
    assert "1 already there" in capsys.readouterr().out
    assert _files(folder)["out.duckdb"] == snap  # the second copy wrote nothing


def test_the_installed_command_prints_one_line_and_no_password(folder):
    """The same through a real process (what a shell runs): no traceback on stderr."""
    r = subprocess.run([sys.executable, "-m", "ocw.notebook.cli", "export", "--from", "src.duckdb", "--to",
                        f"me:{PW_PLAIN}@127.0.0.1/db"], capture_output=True, text=True, cwd=folder, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and PW_PLAIN not in r.stderr, r.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["src.duckdb", "src.duckdb.ocw-lock", "zero.duckdb", "notes.txt", "future.duckdb", "other.duckdb"])
