"""Issue 16 item 2: a PostgreSQL URL selects the PostgreSQL store (never a local
file), and its password — in the URL, in PGPASSWORD, ~/.pgpass or a service
file — is never kept and never shown: not by `%ocw doctor`, `%config Ocw`,
`repr(ocw.config())`, a repr, an error line or a log record. Against the real
test server, with a role that must give its password (scram-sha-256)."""
from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ocw
from ocw.store.postgres import url as urls
from ocw.text.errors import BadDatabasePath, StoreError

PASSWORD = "Pa55-w0rd-of-alice-9f3k"  # long enough to be a secret (8+ characters)
_n = itertools.count(1)


@pytest.fixture
def role(pg_cluster):
    """(user, dbname, port): a role that logs in with PASSWORD, owning a new database."""
    user, db = f"alice{next(_n)}", None
    db = f"team_{user}"
    with pg_cluster.admin() as conn:
        conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE DATABASE {db} OWNER {user}")
    return user, db, pg_cluster.port


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for k in ("PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGHOST", "PGPORT", "PGUSER",
              "PGDATABASE", "OCW_DB"):
        monkeypatch.delenv(k, raising=False)
    # No ~/.pgpass or service file of the machine's. (HOME itself stays: IPython keeps its
    # history under it for the life of the process.)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "no-services"))
    monkeypatch.setenv("PGSYSCONFDIR", str(tmp_path / "no-sysconf"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)  # a URL turned into a folder would appear here
    return tmp_path


def no_local_files(folder: Path) -> None:
    names = {p.name for p in folder.iterdir()} - {"home"}
    assert not any(n.startswith("postgres") or n.startswith("mysql") for n in names), names


def shows_no_secret(*texts: str) -> None:
    for t in texts:
        assert PASSWORD not in t, t


# -- the URL picks the store; the password stays out of everything shown ------------------------
def test_password_in_the_url_connects_and_is_shown_nowhere(role, clean_env):
    user, db, port = role
    store = ocw.Store(f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{db}")
    try:
        assert store.backend.kind == "postgresql"
        s = store.create_session(name="team")
        s.append("user", "hello team")
        assert store.path == f"postgresql://{user}@127.0.0.1:{port}/{db}"
        assert store.backend.describe() == f"postgresql://{user}@127.0.0.1:{port}/{db}"
        assert repr(store) == f"Store('postgresql://{user}@127.0.0.1:{port}/{db}')"
        shows_no_secret(store.path, repr(store), repr(store.backend), str(store.sessions()))
        # The kept URL reopens it in this process (the password stays in memory only).
        again = ocw.Store(store.path)
        assert again.open_session("team").head == s.head
        again.close()
    finally:
        store.close()
    no_local_files(clean_env)


def test_postgres_scheme_and_a_password_parameter_work_too(role, clean_env):
    user, db, port = role
    store = ocw.Store(f"postgres://{user}@127.0.0.1:{port}/{db}?password={PASSWORD}&connect_timeout=5")
    try:
        assert store.backend.kind == "postgresql" and store.path == (
            f"postgresql://{user}@127.0.0.1:{port}/{db}?connect_timeout=5")
        assert store.backend.describe() == f"postgresql://{user}@127.0.0.1:{port}/{db}"  # no parameter shown
    finally:
        store.close()
    no_local_files(clean_env)


def test_a_wrong_password_is_one_line_without_either_password(role, clean_env):
    user, db, port = role
    wrong = "Wr0ng-but-long-password"
    with pytest.raises(StoreError) as e:
        ocw.Store(f"postgresql://{user}:{wrong}@127.0.0.1:{port}/{db}")
    text = e.value.user_message()
    assert text.startswith(f"cannot connect to the ocw database postgresql://{user}@127.0.0.1:{port}/{db}: ")
    assert f'password authentication failed for user "{user}"' in text
    assert e.value.hint.startswith("check the user and its password")
    assert "\n" not in text and wrong not in text and PASSWORD not in text
    no_local_files(clean_env)


def test_pgpassword_from_the_environment(role, clean_env, monkeypatch):
    user, db, port = role
    url = f"postgresql://{user}@127.0.0.1:{port}/{db}"
    with pytest.raises(StoreError, match="no password supplied|password authentication failed"):
        ocw.Store(url)  # the control: without it, refused
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    store = ocw.Store(url)
    store.create_session(name="x")
    store.close()
    # The environment's password is masked in log records too (ocw/text/secrets.py).
    from ocw.text import secrets

    assert secrets.scrub(f"connecting with {PASSWORD}") == "connecting with <redacted>"


def test_pgpass_file(role, clean_env, monkeypatch):
    user, db, port = role
    passfile = clean_env / "home" / ".pgpass"
    passfile.write_text(f"127.0.0.1:{port}:{db}:{user}:{PASSWORD}\n")
    passfile.chmod(0o600)
    monkeypatch.delenv("PGPASSFILE")
    monkeypatch.setenv("HOME", str(clean_env / "home"))
    store = ocw.Store(f"postgresql://{user}@127.0.0.1:{port}/{db}")  # ~/.pgpass, found by libpq under HOME
    try:
        assert store.create_session(name="p").name == "p"
    finally:
        store.close()


@pytest.mark.parametrize("how", ["url", "PGSERVICE"])
def test_a_service_file(role, clean_env, monkeypatch, how):
    user, db, port = role
    services = clean_env / "services.conf"
    services.write_text(f"[team]\nhost=127.0.0.1\nport={port}\ndbname={db}\nuser={user}\npassword={PASSWORD}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    if how == "url":
        url = "postgresql://?service=team"
    else:
        monkeypatch.setenv("PGSERVICE", "team")
        url = "postgresql://"
    store = ocw.Store(url)
    try:
        assert store.backend.describe() == f"postgresql://{user}@127.0.0.1:{port}/{db}"  # what the server says
        store.create_session(name="svc")
        shows_no_secret(repr(store), store.path)
    finally:
        store.close()
    no_local_files(clean_env)


def test_an_unreachable_server_is_one_line_and_no_file(clean_env):
    from ocw.store.postgres.cluster import free_port

    port = free_port()
    with pytest.raises(StoreError) as e:
        ocw.Store(f"postgresql://bob:{PASSWORD}@127.0.0.1:{port}/team")
    text = e.value.user_message()
    assert text.startswith(f"cannot connect to the ocw database postgresql://bob@127.0.0.1:{port}/team: ")
    assert "is the PostgreSQL server running and reachable" in text and "\n" not in text
    shows_no_secret(text)
    no_local_files(clean_env)


@pytest.mark.parametrize("url", [f"mysql://bob:{PASSWORD}@db.example/team", f"http://bob:{PASSWORD}@h/x",
                                 f"postgresql+psycopg://bob:{PASSWORD}@h/x"])
def test_a_url_of_another_kind_is_refused_in_one_line(url, clean_env):
    with pytest.raises(BadDatabasePath) as e:
        ocw.Store(url)
    text = e.value.user_message()
    assert "it is a URL ocw cannot use" in text and "postgresql://user@host/database" in text
    assert "bob@" in text and PASSWORD not in text
    no_local_files(clean_env)


def test_a_bad_port_is_one_line(clean_env):
    with pytest.raises(BadDatabasePath, match="cannot use 'postgresql://<unreadable>' as the ocw database: Port out of range") as e:
        ocw.Store(f"postgresql://bob:{PASSWORD}@h:99999/x")
    assert PASSWORD not in e.value.user_message()


def test_no_driver_is_one_line_saying_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "import ocw\n"
            "from ocw.text.errors import OcwError\n"
            "try:\n"
            f"    ocw.Store('postgresql://bob:{PASSWORD}@127.0.0.1:5/team')\n"
            "except OcwError as e:\n"
            "    print(e.user_message())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("the PostgreSQL driver psycopg is not installed")
    assert "pip install 'ocw[postgres]'" in line and "\n" not in line and PASSWORD not in line
    assert list(tmp_path.iterdir()) == []


# -- the notebook surface -------------------------------------------------------------------------
def test_config_doctor_and_repr_show_user_host_database_only(role, clean_env, ip, capsys, caplog):
    user, db, port = role
    caplog.set_level(logging.DEBUG)
    shown = f"postgresql://{user}@127.0.0.1:{port}/{db}"
    seen = []
    for cell in (f"%config Ocw.db = 'postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{db}'",
                 "%%chat\nhello from a team notebook", "%config Ocw", "%ocw doctor", "%sessions",
                 "import ocw; print(repr(ocw.config())); print(ocw.config().db)"):
        res = ip.run_cell(cell)
        cap = capsys.readouterr()
        assert res.error_in_exec is None, (cell, res.error_in_exec)
        seen.append(cap.out + cap.err)
    config_out, doctor, listing, reprs = seen[2], seen[3], seen[4], seen[5]
    assert f"'{shown}'" in config_out
    assert f"database:      {shown}" in doctor and "psycopg 3." in doctor
    assert f"db='{shown}'" in reprs
    assert "hello from a team notebook" not in listing and "default" in listing
    shows_no_secret(*seen, caplog.text, *(r.getMessage() for r in caplog.records))
    # The turn went to PostgreSQL, and nothing local was made.
    import psycopg

    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/{db}") as conn:
        assert conn.execute("SELECT role FROM nodes ORDER BY seq").fetchall() == [("user",), ("assistant",)]
    no_local_files(clean_env)


def test_ocw_db_from_the_environment(role, clean_env, monkeypatch):
    user, db, port = role
    monkeypatch.setenv("OCW_DB", f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{db}")
    from ocw.notebook.config import Ocw

    cfg = Ocw()
    assert repr(cfg.db) == f"'postgresql://{user}@127.0.0.1:{port}/{db}'"
    assert str(cfg.db) == f"postgresql://{user}@127.0.0.1:{port}/{db}"  # the kept value has no password either
    shows_no_secret(repr(cfg))
    store = ocw.Store()  # OCW_DB names it
    try:
        assert store.backend.kind == "postgresql"
    finally:
        store.close()


def test_a_refused_config_value_says_why_without_the_password(clean_env, ip, capsys, caplog):
    res = ip.run_cell(f"%config Ocw.db = 'mysql://bob:{PASSWORD}@h/x'")
    cap = capsys.readouterr()
    text = cap.out + cap.err + str(res.error_in_exec or "") + caplog.text
    assert "it is a URL ocw cannot use" in text and PASSWORD not in text
    no_local_files(clean_env)


def test_the_log_filter_masks_a_url_password(clean_env, caplog):
    urls.checked(f"postgresql://bob:{PASSWORD}@h/x")  # remembered as a Secret
    from ocw.store.postgres.conn import driver

    driver()  # imports psycopg (its loggers exist now) and installs the filter on them
    names = ["ocw"] + sorted(n for n in logging.Logger.manager.loggerDict
                             if n == "psycopg" or n.startswith("psycopg."))
    assert "psycopg" in names and len(names) > 2
    caplog.set_level(logging.INFO)
    for name in names:
        logging.getLogger(name).warning("dsn was %s", f"password={PASSWORD}")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["dsn was password=<redacted>"] * len(names)


def test_display_and_redact_pure():
    assert urls.display("postgresql://u:p@h:5433/d?sslmode=require") == "postgresql://u@h:5433/d"
    assert urls.display("postgresql:///d?host=/run/pg&port=5433&user=u") == \
        "postgresql://u@/d (socket /run/pg, port 5433)"
    assert urls.display("postgresql://?service=team") == "postgresql:/// (service team)"
    assert urls.redact("mysql://u:secret@h:1/db?x=1") == "mysql://u@h:1/db"
    assert urls.is_postgres_url("PostgreSQL://h/d") and urls.is_postgres_url("postgres://h")
    assert not urls.is_postgres_url("postgresql:/h") and not urls.is_postgres_url("./postgresql://x")
    clean = urls.checked("postgresql://u:p%40ss-word-long@h/d?sslpassword=k3y-secret-long&sslmode=require")
    assert clean == "postgresql://u@h/d?sslmode=require"
    assert urls.connect_url(clean) == "postgresql://u:p%40ss-word-long@h/d?sslmode=require&sslpassword=k3y-secret-long"
    os.environ.pop("OCW_UNUSED", None)


@pytest.mark.parametrize("value, url", [
    ("s://host/db", True), ("postgresql+psycopg://me@h/db", True), ("md:my_db", True), (" https://h/x ", True),
    ("/tmp/ocw.duckdb", False), ("notes/ocw.duckdb", False), ("://nothing", False), (42, False),
])
def test_is_url_tells_a_url_of_any_scheme_from_a_file_path(value, url):
    assert urls.is_url(value) is url


@pytest.mark.parametrize("bad", ["postgresql://me:pw@localhost/my db", "postgresql://me@local host/db",
                                 "postgresql://me@localhost/db\x00", "postgresql://me@localhost/db\tx"])
def test_a_url_with_a_space_or_a_control_character_is_refused_in_one_line_before_any_connect(bad):
    with pytest.raises(BadDatabasePath) as e:
        ocw.Store(bad)
    msg = e.value.user_message()
    assert "the URL contains a space or a control character" in msg and "percent-encode it (%20)" in msg
    assert "pw" not in msg and "\n" not in msg
    assert urls.checked("postgresql://me@localhost/my%20db")  # percent-encoded: accepted


def test_remember_keeps_only_a_checked_urls_secrets():
    plain = "postgresql://remember-test@localhost/db"
    urls.remember(plain)  # a plain string carries no secrets: nothing kept, nothing raised
    urls.remember(urls.checked(plain))  # a checked URL with none: nothing kept
    assert urls.checked(plain).secrets == {}
    urls.remember(urls.checked("postgresql://remember-test:s3cret@localhost/db"))
    assert [s.get() for s in urls.checked(plain).secrets.values()] == ["s3cret"]
