"""ocw/notebook/cli.py (mirror): the `ocw` command as a user types it — where a copy
reads and writes by default (OCW_DB), the words of `ocw db`, and its one-line failures
— on real DuckDB files in a folder of their own. (The bad-input table is
test_cli_bad_input.py; copies to and from PostgreSQL are tests/store/test_transfer.py.)"""
from __future__ import annotations

import sys

import pytest

import ocw
from ocw.notebook import cli


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for k in ("OCW_DB", "PGPASSWORD", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"):
        monkeypatch.delenv(k, raising=False)
    st = ocw.Store(str(tmp_path / "mine.duckdb"))
    st.create_session(name="a").append("user", "hello")
    st.close()
    return tmp_path


def _names(path) -> list[str]:
    st = ocw.Store(str(path))
    try:
        return sorted(r["name"] for r in st.sessions())
    finally:
        st.close()


def test_export_reads_ocw_db_when_no_from_is_given(folder, monkeypatch, capsys):
    monkeypatch.setenv("OCW_DB", str(folder / "mine.duckdb"))
    assert cli.main(["export", "--to", "out.duckdb"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("1 copied, 0 updated, 0 already there, 0 refused")
    assert _names(folder / "out.duckdb") == ["a"]


def test_import_writes_ocw_db_when_no_to_is_given(folder, monkeypatch, capsys):
    monkeypatch.setenv("OCW_DB", str(folder / "home.duckdb"))
    assert cli.main(["import", "--from", "mine.duckdb"]) == 0
    assert "1 copied" in capsys.readouterr().out
    assert _names(folder / "home.duckdb") == ["a"]


def test_the_command_reads_its_words_from_the_command_line(folder, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["ocw", "export", "--from", "mine.duckdb", "--to", "argv.duckdb"])
    assert cli.main() == 0  # the installed `ocw` calls main() with nothing: sys.argv it is
    assert _names(folder / "argv.duckdb") == ["a"]


def test_a_memory_database_is_not_a_file_to_check_or_take_back():
    assert cli._is_file("mine.duckdb") and cli._is_file("/tmp/x.duckdb")
    assert not cli._is_file(":memory:") and not cli._is_file("postgresql://me@h/db")
    assert cli._created(":memory:") == [] and cli._created("postgresql://me@h/db") == []


def test_a_failed_copy_takes_back_only_the_files_it_created(folder, capsys):
    (folder / "new.duckdb.wal").write_text("someone else's")  # there before: kept
    assert cli._created(str(folder / "new.duckdb")) == [str(folder / "new.duckdb"), str(folder / "new.duckdb.ocw-lock")]
    assert cli.main(["export", "--from", "mine.duckdb", "--to", "new.duckdb", "--session", "nope"]) == 2
    assert "no session 'nope'" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("new")) == ["new.duckdb.wal"]


def test_db_grant_takes_one_or_more_roles():
    args = cli.parser().parse_args(["db", "grant", "postgresql://admin@h/db", "alice", "bob"])
    assert (args.command, args.db_command, args.roles, args.schema) == ("db", "grant", ["alice", "bob"], "ocw")
    args = cli.parser().parse_args(["db", "init", "postgresql://admin@h/db", "--grant", "alice", "--schema", "team"])
    assert (args.db_command, args.grant, args.schema) == ("init", ["alice"], "team")


def test_db_without_a_server_is_one_line_on_stderr_and_status_2(capsys):
    pw = "S3cretPassWord99"
    rc = cli.main(["db", "grant", f"postgresql://admin:{pw}@127.0.0.1:1/db", "alice"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1, (rc, out, err)
    assert lines[0].startswith("ocw db grant: cannot set up the ocw database postgresql://admin@127.0.0.1:1/db: ")
    assert "is the PostgreSQL server running and reachable?" in lines[0] and pw not in err
    rc = cli.main(["db", "init", "me@h/db"])  # not a URL: said, not a traceback
    out, err = capsys.readouterr()
    assert rc == 2 and err.startswith("ocw db init: ") and len(err.strip().splitlines()) == 1, err


def test_a_mistyped_command_is_one_line_and_status_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["export"])  # --to is required for export
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == "ocw export: the following arguments are required: --to (see ocw export --help)\n"
    with pytest.raises(SystemExit) as e:
        cli.main(["import", "--to", "x.duckdb"])  # --from is required for import
    assert e.value.code == 2 and "required: --from" in capsys.readouterr().err


def test_db_init_then_grant_on_a_real_server(pg_cluster, pg_url, capsys, monkeypatch):
    """`ocw db init URL` then `ocw db grant URL ROLE` against the test server: one line per
    change on stdout, nothing on stderr, status 0."""
    import os
    import time

    for k in ("PGPASSWORD", "PGSERVICE", "OCW_DB"):
        monkeypatch.delenv(k, raising=False)
    role = f"cli_{os.getpid()}_{int(time.time() * 1000) % 100000}"
    with pg_cluster.admin() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    assert cli.main(["db", "init", pg_url]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "ocw db init: created ocw's tables (schema version " in out, (out, err)
    assert all(ln.startswith("ocw db init: ") for ln in out.splitlines())
    assert cli.main(["db", "grant", pg_url, role]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(f"ocw db grant: granted {role} the use of schema ocw "), (out, err)


def test_help_names_the_default_database_only_where_there_is_one(capsys):
    def help_of(command: str) -> str:
        with pytest.raises(SystemExit) as e:
            cli.main([command, "--help"])
        assert e.value.code == 0
        return " ".join(capsys.readouterr().out.split())

    export, import_ = help_of("export"), help_of("import")
    assert "--from DB where the sessions are: a DuckDB file or a postgresql:// URL (default: OCW_DB or the default file)" \
        in export
    assert "--to DB where they go: a DuckDB file (created if new) or a postgresql:// URL --session" in export
    assert "--from DB where the sessions are: a DuckDB file or a postgresql:// URL --to" in import_
    assert "--to DB where they go: a DuckDB file (created if new) or a postgresql:// URL (default: OCW_DB or the " \
           "default file)" in import_
