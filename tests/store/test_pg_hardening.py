"""Issue 25, the team database: secrets cached by the full credential, and more.
Against the real test server, with roles that must give their password."""
from __future__ import annotations

import itertools

import pytest

import ocw
from ocw.store.postgres.listen import wait_ready
from ocw.text.errors import StoreError

PASSWORD = "Pa55-w0rd-of-bob-77qz"
WRONG = "Wr0ng-but-long-password"
_n = itertools.count(1)


@pytest.fixture
def role(pg_cluster, monkeypatch, tmp_path):
    """(user, dbname, port): a role that logs in with PASSWORD, owning a new database;
    no password from the environment or a file of the machine's."""
    for k in ("PGPASSWORD", "PGSERVICE", "OCW_DB"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    user = f"bob{next(_n)}"
    db = f"hard_{user}"
    with pg_cluster.admin() as conn:
        conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE DATABASE {db} OWNER {user}")
    return user, db, pg_cluster.port


def _drop_connections(pg_cluster, user):
    """Terminate the role's connections and wait (with a deadline) until the server has
    closed them: pg_terminate_backend only signals."""
    import time

    with pg_cluster.admin() as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [user])
        deadline = time.monotonic() + 10
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
                           " AND application_name <> 'ocw-listen'", [user]).fetchone()[0]:  # it reconnects by itself
            assert time.monotonic() < deadline, "the server did not close the connections"
            time.sleep(0.01)


def test_a_mistyped_password_never_replaces_a_working_stores(role, pg_cluster):
    user, db, port = role
    store = ocw.Store(f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{db}")
    try:
        store.create_session(name="one").append("user", "hello")
        with pytest.raises(StoreError, match="password authentication failed"):
            ocw.Store(f"postgresql://{user}:{WRONG}@127.0.0.1:{port}/{db}")
        _drop_connections(pg_cluster, user)  # the server drops the working store's connections
        s = store.create_session(name="two")  # reconnects with its own password
        s.append("user", "still here")
        assert [x["name"] for x in store.sessions()][:2] and store.open_session("one") is not None
        # The URL without a password (what %config shows) reconnects with the one that worked.
        again = ocw.Store(f"postgresql://{user}@127.0.0.1:{port}/{db}")
        assert again.open_session("two").head == s.head
        again.close()
    finally:
        store.close()


def test_a_connection_the_server_closed_is_replaced_not_an_error(role, pg_cluster):
    user, db, port = role
    store = ocw.Store(f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{db}")
    try:
        s = store.create_session(name="idle")
        assert wait_ready(store.backend._listener)  # its first read of the session done (it takes a connection)
        connects = store.backend._pool.connects
        _drop_connections(pg_cluster, user)  # an idle timeout, a restart: the kept connection is gone
        s.append("user", "the next cell")  # no "is the server running?" first
        assert store.backend._pool.connects == connects + 1  # one new connection replaced it
    finally:
        store.close()


# -- bounded lock waits ------------------------------------------------------------------------
HOLDER = r'''
import sys, time, psycopg
url, sid, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
with psycopg.connect(url, application_name="ocw kernel abcdef12 (pid 4242)") as conn:
    conn.execute("BEGIN")
    conn.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", [sid]).fetchall()
    print("locked", flush=True)
    time.sleep(secs)
    conn.rollback()
'''


def _hold_row(url: str, sid: str, secs: float):
    """Another process (a kernel, as far as the server can tell) holding the session's row."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", HOLDER, url, sid, str(secs)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"  # waits until the lock is taken (or the child died)
    return p


def test_a_row_held_30_s_by_another_kernel_is_one_line_within_the_bound(pg_url, ip, capsys):
    import time

    from IPython.core.error import UsageError

    ip.run_line_magic("config", f"Ocw.db = {pg_url!r}")
    ip.run_line_magic("config", "Ocw.lock_timeout = 2")
    ip.run_line_magic("new", "--name held")
    ip.run_cell_magic("chat", "", "first")
    s = ocw.current_session()
    head, count = s.head, len(s.branch())
    holder = _hold_row(pg_url, s.id, 30)
    try:
        t0 = time.monotonic()
        with pytest.raises(UsageError) as e:
            ip.run_cell_magic("chat", "", "second")
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    line = str(e.value)
    assert "\n" not in line and "gave up after 2 s" in line, line
    assert "kernel abcdef12 (pid 4242)" in line, line  # the other writer, named
    assert 2 <= waited < 15, waited  # the bound, not the other kernel's 30 s
    assert "%ocw retry-save" in line  # the reply was shown: it can be stored again
    s.sync()
    assert (s.head, len(s.branch())) == (head, count)  # nothing written
    ip.run_line_magic("ocw", "retry-save")  # the lock gone: the turn the user read is stored
    s.sync()
    assert len(s.branch()) == count + 2
    assert s.rendered_history()[-2]["content"][0]["text"] == "second"
    ip.run_cell_magic("chat", "", "third")  # and the next cell writes as ever
    assert len(ocw.current_session().branch()) == count + 4


# -- a second role: the exact grants (README "A team database") ----------------------------------
def test_a_second_role_is_told_the_command_that_grants_it_then_sees_only_its_own(pg_cluster, monkeypatch, tmp_path,
                                                                                 capsys):
    """A database one user opened first (it owns the tables): a second role with CONNECT
    only is refused with the command that grants it; once granted (`ocw db grant`, as the
    README says), row-level security shows it its own sessions only."""
    from ocw.notebook import cli

    for k in ("PGPASSWORD", "PGSERVICE", "OCW_DB"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    n = next(_n)
    owner, other, db = f"own{n}", f"mate{n}", f"team{n}"
    with pg_cluster.admin() as conn:
        for r in (owner, other):
            conn.execute(f"CREATE ROLE {r} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE DATABASE {db} OWNER {owner}")
    url = f"postgresql://{{}}:{PASSWORD}@127.0.0.1:{pg_cluster.port}/{db}"
    first = ocw.Store(url.format(owner))
    first.create_session(name="owners").append("user", "hello")
    with pytest.raises(StoreError) as e:  # CONNECT only (PUBLIC's default): refused, the hint says what to grant
        ocw.Store(url.format(other))
    msg = e.value.user_message()
    assert "permission denied" in msg and "\n" not in msg and PASSWORD not in msg
    assert "ocw db grant" in e.value.hint
    assert cli.main(["db", "grant", pg_cluster.url(db), other, "--schema", "public"]) == 0
    assert f"granted {other} the use of schema public" in capsys.readouterr().out
    second = ocw.Store(url.format(other))
    try:
        s = second.create_session(name="mates")
        s.append("user", "hi")
        assert {r["name"] for r in second.sessions()} == {"mates"}  # isolated: the owner's is not seen
        assert {r["name"] for r in first.sessions()} == {"owners"}
    finally:
        second.close()
        first.close()


def test_psycopgs_own_log_lines_never_carry_the_password(role, caplog):
    """Opening a store loads the driver, whose loggers exist from then on: the secrets
    filter is put on them then, so a psycopg warning quoting a DSN shows no password."""
    import logging

    user, db, port = role
    store = ocw.Store(f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{db}")
    try:
        store.create_session(name="x")
        names = sorted(n for n in logging.Logger.manager.loggerDict if n == "psycopg" or n.startswith("psycopg."))
        assert "psycopg" in names
        caplog.set_level(logging.INFO)
        for name in names:
            logging.getLogger(name).warning("reconnecting to %s", f"host=127.0.0.1 password={PASSWORD}")
        assert [r.getMessage() for r in caplog.records] == ["reconnecting to host=127.0.0.1 password=<redacted>"] * len(names)
    finally:
        store.close()
