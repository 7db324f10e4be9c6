"""The team database on a real PostgreSQL (issue 25): `ocw db init`, row-level security
with two login roles, sharing, NOTIFY that tells a CONNECT-only role nothing, the upgrade
of a database an earlier ocw made, and the bad-input rows of the new flags.

The server is tests/pg_server.py's (initdb + pg_ctl, scram passwords for every role but
the superuser). Each test makes its own database and roles; the admin URL is the
superuser's. Raw SQL as the roles shows what the policies let through, whatever a
client does; the store API shows what a user sees.
"""
from __future__ import annotations

import itertools
import re
import time

import psycopg
import pytest

import ocw
from ocw.notebook import cli
from ocw.store.postgres import statements as pg_statements
from ocw.store.postgres import migrations as pg_migrations
from ocw.store.postgres import schema as pg_schema
from ocw.store.postgres.listen import wait_ready
from ocw.text.errors import InvalidArgument, SessionNotFound, StoreError
from pg_server import OLD_TELL_SQL
from waiting import wait_for

PW = "Te4m-S3cret-pw"  # the marker password: never in any output
_n = itertools.count(1)


class Team:
    def __init__(self, cluster, suffix: str):
        self.cluster, self.db = cluster, f"team_{suffix}"
        self.alice, self.bob, self.carol = (f"{r}_{suffix}" for r in ("alice", "bob", "carol"))
        with cluster.admin() as conn:
            for role in (self.alice, self.bob, self.carol):
                conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PW}'")
            conn.execute(f"CREATE DATABASE {self.db}")
        self.admin_url = cluster.url(self.db)

    def url(self, role: str) -> str:
        return f"postgresql://{role}:{PW}@127.0.0.1:{self.cluster.port}/{self.db}"

    def admin(self):
        """The superuser, in the team's database."""
        return psycopg.connect(self.admin_url, autocommit=True)

    def sql(self, role: str):
        """A raw connection as `role` (autocommit)."""
        return psycopg.connect(self.url(role), autocommit=True)


@pytest.fixture
def team(pg_cluster, monkeypatch, tmp_path, capsys):
    for k in ("PGPASSWORD", "PGSERVICE", "OCW_DB"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    t = Team(pg_cluster, f"{next(_n)}_{int(time.time() * 1000) % 100000}")
    assert cli.main(["db", "init", t.admin_url, "--grant", t.alice, "--grant", t.bob]) == 0
    out, err = capsys.readouterr()
    assert err == "" and PW not in out
    lines = out.splitlines()
    if lines[0] == "ocw db init: created role ocw_owner (NOLOGIN): it owns ocw's tables":
        lines = lines[1:]  # the role is the server's: made by the first test to run init only
    assert lines == [
        "ocw db init: created schema ocw, owned by ocw_owner",
        "ocw db init: created ocw's tables (schema version 8) with row-level security",
        f"ocw db init: granted {t.alice} the use of schema ocw (its own sessions, and those shared with it); "
        "its search_path in this database is ocw",
        f"ocw db init: granted {t.bob} the use of schema ocw (its own sessions, and those shared with it); "
        "its search_path in this database is ocw",
    ]
    return t


def texts(session) -> list[str]:
    """The branch's message texts, as the role that opened `session` reads them."""
    session.sync()
    return [session.node(i)["content"][0]["text"] for i in session.branch()]


def _stores(team):
    return ocw.Store(team.url(team.alice)), ocw.Store(team.url(team.bob))


def test_init_makes_ocw_owner_own_every_table_and_no_user_owns_anything(team):
    with team.admin() as conn:
        conn.execute("SET search_path TO ocw")
        owners = dict(conn.execute("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'ocw'").fetchall())
        rls = dict(conn.execute("SELECT relname, (relrowsecurity AND relforcerowsecurity) FROM pg_class c JOIN "
                                "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'ocw' AND relkind = 'r'"
                                ).fetchall())
        login = conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'ocw_owner'").fetchone()[0]
    assert set(owners.values()) == {"ocw_owner"} and login is False
    assert set(owners) == {"sessions", "nodes", "node_counts", "session_shares", "session_watchers", "ocw_meta",
                           "schema_version"}
    assert {t for t, on in rls.items() if on} == {"sessions", "nodes", "node_counts", "session_shares"}


def test_no_role_reads_the_watches_but_each_kernel_records_its_own(team):
    """p005: `session_watchers` is granted to no role (it would tell whose session is
    open where); a role records and clears its watches only through the SECURITY
    DEFINER functions, and a turn by another role sharing the session is notified —
    p007: on the watching kernel's own channel, which a third role listening on
    `ocw_sessions` never hears."""
    a, b = _stores(team)
    ear = psycopg.connect(team.url(team.carol), autocommit=True)
    try:
        s = a.create_session(name="watched")
        a.share_session(s.name, team.bob)
        with psycopg.connect(team.url(team.alice), autocommit=True) as alice:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                alice.execute("SELECT * FROM session_watchers")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                alice.execute("INSERT INTO session_watchers VALUES (%s, 1)", [s.id])
        with team.admin() as conn:
            defs = conn.execute("SELECT proname, prosecdef, pg_get_userbyid(proowner) FROM pg_proc p JOIN pg_namespace n"
                                " ON n.oid = p.pronamespace WHERE n.nspname = 'ocw' AND proname IN"
                                " ('ocw_watch', 'ocw_unwatch', 'ocw_watched', 'ocw_notify', 'ocw_tell', 'ocw_heard')"
                                " ORDER BY 1, 2").fetchall()
        assert defs == [(f, True, "ocw_owner") for f in ("ocw_heard", "ocw_notify", "ocw_tell", "ocw_unwatch",
                                                          "ocw_watch", "ocw_watch", "ocw_watched")]
        ear.execute("LISTEN ocw_sessions")
        seen_by_bob = b.open_session(s.id)  # bob's kernel opens it: its listener watches it
        assert wait_ready(b.backend._listener)
        with team.admin() as conn:
            channels = dict(conn.execute("SELECT pid, channel FROM ocw.session_watchers").fetchall())
        listeners = (a.backend._listener, b.backend._listener)  # each kernel's, on a channel of its own
        assert channels == {x.pid: x.channel for x in listeners} and len(set(channels.values())) == 2
        assert all(re.fullmatch(r"ocw_sessions_[0-9a-f]{16}", c) for c in channels.values())
        s.append("user", "alice writes; bob's kernel is told")
        assert wait_for(lambda: seen_by_bob.head == s.head), "bob's listener did not sync"
        with team.admin() as conn:  # delivered after anything committed before it
            conn.execute("NOTIFY ocw_sessions, 'after the turn'")
        heard = []
        deadline = time.monotonic() + 10
        while "after the turn" not in heard and time.monotonic() < deadline:
            heard += [n.payload for n in ear.notifies(timeout=0.2)]
        assert heard == ["after the turn"]  # the turn told bob's kernel alone
    finally:
        ear.close()
        a.close()
        b.close()


def test_each_role_sees_and_changes_only_its_own_sessions(team):
    a, b = _stores(team)
    try:
        sa = a.create_session(name="default")
        sa.append("user", "alice's secret plan")
        sb = b.create_session(name="default")  # the same name: each role's own, neither collides
        sb.append("user", "bob's notes")
        assert [s["id"] for s in a.sessions()] == [sa.id] and [s["id"] for s in b.sessions()] == [sb.id]
        assert b.open_session("default").id == sb.id
        with pytest.raises(SessionNotFound):
            b.open_session(sa.id)
        with team.sql(team.bob) as conn:  # what the policies let through, whatever a client sends
            assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
            assert conn.execute("SELECT count(*) FROM nodes WHERE session_id = %s", [sa.id]).fetchone()[0] == 0
            assert conn.execute("UPDATE sessions SET name = 'mine' WHERE id = %s", [sa.id]).rowcount == 0
            assert conn.execute("DELETE FROM sessions WHERE id = %s", [sa.id]).rowcount == 0
            assert conn.execute("DELETE FROM nodes WHERE session_id = %s", [sa.id]).rowcount == 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                conn.execute("INSERT INTO sessions (id, name, owner) VALUES ('s_forged', 'x', %s)", [team.alice])
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("INSERT INTO nodes (id, session_id, role, content, tokens, depth, cum_tokens)"
                             " VALUES ('n_forged', %s, 'user', '[]', 1, 1, 1)", [sa.id])
        a2 = ocw.Store(team.url(team.alice))
        assert texts(a2.open_session(sa.id)) == ["alice's secret plan"]
        assert a2.open_session(sa.id).name == "default"
        a2.close()
    finally:
        a.close()
        b.close()


def test_a_shared_session_is_seen_and_continued_by_the_role_it_was_shared_with_only(team):
    a, b = _stores(team)
    c = None
    try:
        sa = a.create_session(name="plan")
        sa.append("user", "step one")
        assert a.share_session("plan", team.bob) == ("plan", True)
        assert a.share_session("plan", team.bob) == ("plan", False)  # idempotent
        seen = b.open_session(sa.id)
        assert [s["id"] for s in b.sessions()] == [sa.id] and seen.name == "plan"
        seen.append("user", "bob adds step two")  # shared: bob continues it
        assert texts(a.open_session(sa.id)) == ["step one", "bob adds step two"]
        with pytest.raises(StoreError, match=f"shared with you by {team.alice}; only its owner shares it"):
            b.share_session(sa.id, team.carol)
        with team.sql(team.bob) as conn:
            assert conn.execute("DELETE FROM sessions WHERE id = %s", [sa.id]).rowcount == 0  # only the owner deletes
        with pytest.raises(StoreError, match=f"session 'plan' is shared with you by {team.alice}; only its owner "
                                             "deletes it, nothing was deleted"):
            b.delete_session(sa.id)
        assert texts(a.open_session(sa.id)) == ["step one", "bob adds step two"]
        # carol (granted now, not shared with): nothing
        assert cli.main(["db", "grant", team.admin_url, team.carol]) == 0
        c = ocw.Store(team.url(team.carol))
        assert c.sessions() == []
        with pytest.raises(SessionNotFound):
            c.open_session(sa.id)
        assert a.share_session("plan", team.bob, share=False) == ("plan", True)
        assert b.sessions() == []
        with pytest.raises(SessionNotFound):
            b.open_session(sa.id)
    finally:
        for s in (a, b, c):
            if s is not None:
                s.close()


def test_a_connect_only_role_learns_nothing_from_notify_and_the_listener_still_syncs(team):
    a, b = _stores(team)
    a_again = ocw.Store(team.url(team.alice))
    listen = psycopg.connect(team.url(team.carol), autocommit=True)  # CONNECT only: never granted
    try:
        listen.execute(f"LISTEN {pg_migrations.NOTIFY_CHANNEL}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            listen.execute("SELECT count(*) FROM ocw.sessions")
        s = a.create_session(name="private-name")
        mine = a_again.open_session(s.id)
        assert wait_ready(a_again.backend._listener)
        s.append("user", "private words")
        b.create_session(name="bob-private")
        deadline = time.monotonic() + 10  # alice's other kernel syncs through the policies
        while mine.head != s.head:
            assert time.monotonic() < deadline, "the listener did not sync"
            time.sleep(0.02)
        with team.admin() as conn:  # delivered after everything committed before it
            conn.execute(f"NOTIFY {pg_migrations.NOTIFY_CHANNEL}, 'end'")
        got = []
        deadline = time.monotonic() + 10
        while ("ocw_sessions", "end") not in got and time.monotonic() < deadline:
            got += [(n.channel, n.payload) for n in listen.notifies(timeout=0.2, stop_after=1)]
        # It hears that two sessions were created, and nothing else: no id, no name, no rev;
        # the turn told only the kernel watching its session, on that kernel's own channel (p007).
        assert got == [("ocw_sessions", ""), ("ocw_sessions", ""), ("ocw_sessions", "end")]
    finally:
        listen.close()
        for st in (a, b, a_again):
            st.close()


def test_init_twice_changes_nothing(team, capsys):
    a = ocw.Store(team.url(team.alice))
    a.create_session(name="kept").append("user", "hello")
    a.close()
    assert cli.main(["db", "init", team.admin_url, "--grant", team.alice]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"ocw db init: granted {team.alice} the use of schema ocw (its own sessions, and "
                                "those shared with it); its search_path in this database is ocw"]
    assert cli.main(["db", "init", team.admin_url]) == 0
    assert capsys.readouterr().out == "ocw db init: schema ocw is up to date (version 8); nothing changed\n"
    a = ocw.Store(team.url(team.alice))
    assert [s["name"] for s in a.sessions()] == ["kept"]
    a.close()


def test_a_database_of_the_previous_schema_is_upgraded_and_its_sessions_stay_their_owners(pg_cluster, monkeypatch,
                                                                                          tmp_path, capsys):
    """Schema 1 (one user owned every table) → opened by this ocw: version 8 (now), the
    sessions are that user's; then `ocw db init --schema public` hands the tables to
    ocw_owner and a second role granted sees none of them."""
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    t = Team(pg_cluster, f"old{next(_n)}_{int(time.time() * 1000) % 100000}")
    with pg_cluster.admin() as conn:
        conn.execute(f"ALTER DATABASE {t.db} OWNER TO {t.alice}")
    with monkeypatch.context() as m:  # the previous ocw: schema 1 only
        m.setattr(pg_schema, "MIGRATIONS", pg_migrations.MIGRATIONS[:1])
        m.setattr(pg_statements, "TELL_SQL", OLD_TELL_SQL)  # that ocw's turn
        m.setattr(pg_schema, "SCHEMA_VERSION", 1)
        old = ocw.Store(t.url(t.alice))
        s = old.create_session(name="before")
        s.append("user", "written by schema 1")
        old.close()
    with t.sql(t.alice) as conn:
        assert conn.execute("SELECT value FROM ocw_meta WHERE key = 'schema_version'").fetchone()[0] == "1"
    new = ocw.Store(t.url(t.alice))  # the upgrade, run by the user that owns the tables
    try:
        assert [x["name"] for x in new.sessions()] == ["before"]
        assert texts(new.open_session("before")) == ["written by schema 1"]
    finally:
        new.close()
    with t.sql(t.alice) as conn:
        assert conn.execute("SELECT value FROM ocw_meta WHERE key = 'schema_version'").fetchone()[0] == "8"
        assert conn.execute("SELECT owner FROM sessions").fetchall() == [(t.alice,)]
    assert cli.main(["db", "init", t.admin_url, "--schema", "public", "--grant", t.alice, "--grant", t.bob]) == 0
    out = capsys.readouterr().out
    assert "handed 19 of ocw's objects in schema public to ocw_owner" in out, out
    a, b = ocw.Store(t.url(t.alice)), ocw.Store(t.url(t.bob))
    try:
        assert [x["name"] for x in a.sessions()] == ["before"] and b.sessions() == []
        b.create_session(name="before").append("user", "bob's own")  # the same name, bob's own
        assert len(a.sessions()) == 1 and len(b.sessions()) == 1
    finally:
        a.close()
        b.close()
    with t.admin() as conn:
        owners = {r[0] for r in conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'"
                                             ).fetchall()}
    assert owners == {"ocw_owner"}


def test_a_schema_1_database_upgraded_by_init_keeps_its_sessions_their_owners(pg_cluster, monkeypatch, tmp_path,
                                                                              capsys):
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    t = Team(pg_cluster, f"up{next(_n)}_{int(time.time() * 1000) % 100000}")
    with pg_cluster.admin() as conn:
        conn.execute(f"ALTER DATABASE {t.db} OWNER TO {t.alice}")
    with monkeypatch.context() as m:
        m.setattr(pg_schema, "MIGRATIONS", pg_migrations.MIGRATIONS[:1])
        m.setattr(pg_statements, "TELL_SQL", OLD_TELL_SQL)  # that ocw's turn
        m.setattr(pg_schema, "SCHEMA_VERSION", 1)
        old = ocw.Store(t.url(t.alice))
        old.create_session(name="before").append("user", "schema 1")
        old.close()
    assert cli.main(["db", "init", t.admin_url, "--schema", "public", "--grant", t.alice, "--grant", t.bob]) == 0
    out = capsys.readouterr().out
    assert "upgraded schema public from version 1 to 8; its sessions stay their owner's" in out, out
    a, b = ocw.Store(t.url(t.alice)), ocw.Store(t.url(t.bob))
    try:
        assert [x["name"] for x in a.sessions()] == ["before"] and b.sessions() == []
    finally:
        a.close()
        b.close()


# -- bad input: one line, no traceback, no password, nothing changed --------------------------------
def _state(team) -> tuple:
    """Roles and databases of the server; schemas, grants and role settings of the team's database."""
    with team.cluster.admin() as conn:
        roles = sorted(r for (r,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname NOT LIKE 'pg\\_%'"))
        dbs = sorted(d for (d,) in conn.execute("SELECT datname FROM pg_database"))
        settings = sorted(map(str, conn.execute("SELECT setrole, setconfig FROM pg_db_role_setting")))
    with team.admin() as conn:
        schemas = sorted(n for (n,) in conn.execute("SELECT nspname FROM pg_namespace"))
        grants = sorted(map(str, conn.execute("SELECT grantee, table_schema, table_name, privilege_type"
                                              " FROM information_schema.role_table_grants")))
    return roles, dbs, settings, schemas, grants


@pytest.mark.parametrize("label, argv, says", [
    ("not-a-url", lambda t: ["db", "init", f"me:{PW}@127.0.0.1/db"], "not a postgresql:// URL"),
    ("one-slash", lambda t: ["db", "init", f"postgresql:/me:{PW}@127.0.0.1/db"], "not a postgresql:// URL"),
    ("no-url", lambda t: ["db", "init"], "the following arguments are required: URL"),
    ("grant-no-role", lambda t: ["db", "grant", t.admin_url], "the following arguments are required: ROLE"),
    ("no-server", lambda t: ["db", "init", f"postgresql://me:{PW}@127.0.0.1:1/db"], "is the PostgreSQL server running"),
    ("unknown-role", lambda t: ["db", "init", t.admin_url, "--grant", "nobody_here"], "there is no role 'nobody_here'"),
    ("grant-owner", lambda t: ["db", "grant", t.admin_url, "ocw_owner"], "never logs in"),
    ("empty-schema", lambda t: ["db", "init", t.admin_url, "--schema", ""], "--schema takes a PostgreSQL name"),
    ("long-role", lambda t: ["db", "grant", t.admin_url, "r" * 64], "ROLE takes a PostgreSQL name"),
    ("grant-no-schema", lambda t: ["db", "grant", t.admin_url, t.carol, "--schema", "nope"], "has no schema 'nope'"),
    ("not-privileged", lambda t: ["db", "init", t.url(t.carol), "--schema", "mine"], "may create roles and schemas"),
    ("wrong-password", lambda t: ["db", "init", t.url(t.carol).replace(PW, PW + "x")], "password authentication"),
    ("unknown-option", lambda t: ["db", "init", t.admin_url, "--grnat", "x"], "unrecognized arguments"),
])
def test_db_bad_input_row(team, label, argv, says, capsys, caplog):
    before = _state(team)
    if label in ("no-url", "grant-no-role", "unknown-option"):  # argparse's own refusals
        with pytest.raises(SystemExit) as ei:
            cli.main(argv(team))
        rc = ei.value.code
    else:
        rc = cli.main(argv(team))
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and out == "", (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith("ocw") and "Traceback" not in err, err
    assert says in lines[0], lines[0]
    assert PW not in out + err + caplog.text
    assert _state(team) == before  # no role, database, schema, grant or setting made


@pytest.mark.parametrize("label, call, error, says", [
    ("unknown-role", lambda a, t: a.share_session("s", "nobody_here"), InvalidArgument, "no database role 'nobody_here'"),
    ("self", lambda a, t: a.share_session("s", t.alice), InvalidArgument, "is yours"),
    ("no-session", lambda a, t: a.share_session("nope", t.bob), SessionNotFound, "no session 'nope'"),
    ("empty-role", lambda a, t: a.share_session("s", ""), InvalidArgument, "role"),
])
def test_share_bad_input_row(team, label, call, error, says):
    a = ocw.Store(team.url(team.alice))
    try:
        s = a.create_session(name="s")
        with team.sql(team.alice) as conn:
            before = conn.execute("SELECT * FROM session_shares").fetchall()
        with pytest.raises(error) as ei:
            call(a, team)
        msg = ei.value.user_message()
        assert says in msg and "\n" not in msg and PW not in msg
        with team.sql(team.alice) as conn:
            assert conn.execute("SELECT * FROM session_shares").fetchall() == before
    finally:
        a.close()


# -- %sessions --share / --unshare, as a user types them -------------------------------------------
def _magic(shell, line, capsys):
    """Run one line; returns (stdout, stderr, the error the cell raised or None)."""
    r = shell.run_cell(line)
    out, err = capsys.readouterr()
    return out, err, r.error_in_exec


def test_sessions_share_and_unshare_in_a_notebook(team, ip, capsys):
    ip.run_line_magic("config", f"Ocw.db = {team.url(team.alice)!r}")
    ip.run_cell("%%chat --session plan\nstep one")
    capsys.readouterr()
    out, err, e = _magic(ip, f"%sessions --share plan {team.bob}", capsys)
    assert e is None and out.strip() == (f"Shared session 'plan' with database role {team.bob}: it sees and "
                                         "continues it from now on."), (out, err)
    out, _, _ = _magic(ip, f"%sessions --share plan {team.bob}", capsys)
    assert out.strip() == f"Session 'plan' was already shared with {team.bob}; nothing changed."
    b = ocw.Store(team.url(team.bob))
    try:
        assert [(s["name"], s["shared_by"]) for s in b.sessions()] == [("plan", team.alice)]
        a = ocw.Store(team.url(team.alice))
        assert [s["shared_by"] for s in a.sessions()] == [None]  # her own: no mark
        a.close()
        from ocw.notebook.report import sessions_table

        assert sessions_table(b.sessions()).splitlines()[1].endswith(f"  plan  (shared by {team.alice})")
        out, _, _ = _magic(ip, f"%sessions --unshare plan {team.bob}", capsys)
        assert out.strip() == f"Session 'plan' is no longer shared with {team.bob}."
        assert b.sessions() == []
        ip.run_line_magic("config", "Ocw.lang = 'zh'")
        out, _, _ = _magic(ip, f"%sessions --unshare plan {team.bob}", capsys)
        assert out.strip() == f"会话 'plan' 没有共享给 {team.bob}；没有变化。"
    finally:
        b.close()


@pytest.mark.parametrize("line, says", [
    ("%sessions --share plan", "expected 2 arguments"),
    ("%sessions --share plan nobody_here", "there is no database role 'nobody_here'"),
    ("%sessions --share nope {bob}", "no session 'nope'"),
    ("%sessions --share plan {bob} --delete plan", "one of --delete, --share, --unshare at a time"),
    ("%sessions --unshare plan {bob} --yes", "--yes confirms a deletion only"),
    ("%sessions --share plan {alice}", "is yours"),
])
def test_sessions_share_bad_input_row(team, ip, capsys, line, says):
    ip.run_line_magic("config", f"Ocw.db = {team.url(team.alice)!r}")
    ip.run_cell("%%chat --session plan\nstep one")
    capsys.readouterr()
    with team.sql(team.alice) as conn:
        before = conn.execute("SELECT * FROM session_shares").fetchall(), \
            conn.execute("SELECT id, rev FROM sessions").fetchall()
    out, err, e = _magic(ip, line.format(bob=team.bob, alice=team.alice), capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in err, err
    assert PW not in out + err
    with team.sql(team.alice) as conn:
        assert (conn.execute("SELECT * FROM session_shares").fetchall(),
                conn.execute("SELECT id, rev FROM sessions").fetchall()) == before


def test_the_readme_lists_exactly_the_grants_init_gives(team):
    """README "A team database" shows the SQL `ocw db grant` runs: the table privileges a
    granted role holds are exactly those its GRANT lines name, and its search_path is set."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("GRANT USAGE ON SCHEMA ocw TO alice;"):]
    block = block[:block.index("```")]
    listed = set()
    for privs, tables in re.findall(r"^GRANT ([A-Z, ]+) ON (ocw\.[\w., ]+) TO alice;", block, re.M):
        listed |= {(t.strip().split(".")[1], p.strip()) for t in tables.split(",") for p in privs.split(",")}
    with team.admin() as conn:
        held = set(conn.execute("SELECT table_name, privilege_type FROM information_schema.role_table_grants"
                                " WHERE grantee = %s AND table_schema = 'ocw'", [team.alice]).fetchall())
        setting = conn.execute("SELECT setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole"
                               " WHERE r.rolname = %s", [team.alice]).fetchone()[0]
    assert held == listed and ("sessions", "DELETE") in held and ("ocw_meta", "SELECT") in held
    assert ("ocw_meta", "INSERT") not in held
    assert setting == ["search_path=ocw"] and "SET search_path TO ocw;" in block
    assert "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ocw TO alice;" in block


def test_shares_names_the_owner_and_the_grantees_each_role_may_see(team):
    """shares.py: `shares()` reads the owner and the grantees in name order, under the
    policies; `share_session` shares by default (share=False takes it back)."""
    a, b = _stores(team)
    try:
        sa = a.create_session(name="plan")
        assert a.backend.shares(sa.id) == {"owner": team.alice, "grantees": []}
        assert b.backend.shares(sa.id) == {"owner": None, "grantees": []}  # not shared: bob sees nothing
        assert a.backend.share_session(sa.id, team.bob) is True  # the default shares
        assert a.backend.shares(sa.id) == {"owner": team.alice, "grantees": [team.bob]}
        assert b.backend.shares(sa.id) == {"owner": team.alice, "grantees": [team.bob]}
        assert a.backend.share_session(sa.id, team.bob, share=False) is True
        assert a.backend.shares(sa.id) == {"owner": team.alice, "grantees": []}
    finally:
        a.close()
        b.close()


def test_a_role_name_of_63_characters_is_granted_and_64_refused(team, capsys):
    """PostgreSQL names are 1 to 63 characters: 63 is a name, 64 would be cut to another."""
    long63 = "g" * (63 - len(team.alice)) + team.alice  # unique per test: ends with alice's (suffixed) name
    assert len(long63) == 63
    with team.admin() as conn:
        conn.execute(f"CREATE ROLE {long63} LOGIN PASSWORD '{PW}'")
    try:
        assert cli.main(["db", "grant", team.admin_url, long63]) == 0
        assert capsys.readouterr().out.startswith(f"ocw db grant: granted {long63} the use of schema ocw")
        assert cli.main(["db", "grant", team.admin_url, long63 + "z"]) == 2
        assert "ROLE takes a PostgreSQL name of 1 to 63 characters" in capsys.readouterr().err
    finally:
        with team.admin() as conn:
            conn.execute(f"DROP OWNED BY {long63}")
            conn.execute(f"DROP ROLE {long63}")


def test_init_by_a_non_superuser_that_may_create_roles(team, capsys):
    """A superuser runs init as itself (and is made a member of nothing); an admin role
    with CREATEROLE (a managed server's usual admin) is made a member of ocw_owner, so
    that it can create and migrate the tables as their owner."""
    dba = f"dba_{team.alice}"
    with team.admin() as conn:
        members = conn.execute("SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid"
                               " WHERE r.rolname = 'ocw_owner' AND m.member = (SELECT oid FROM pg_roles"
                               " WHERE rolname = current_user)").fetchone()[0]
        assert members == 0  # the superuser that ran the fixture's init
        conn.execute(f"CREATE ROLE {dba} LOGIN CREATEROLE PASSWORD '{PW}'")
        conn.execute(f"GRANT CREATE ON DATABASE {team.db} TO {dba}")
    try:
        assert cli.main(["db", "init", team.url(dba), "--schema", "ops", "--grant", team.carol]) == 0, \
            capsys.readouterr().err
        out = capsys.readouterr().out.splitlines()
        assert out[:2] == ["ocw db init: created schema ops, owned by ocw_owner",
                           "ocw db init: created ocw's tables (schema version 8) with row-level security"]
        with team.admin() as conn:
            assert conn.execute("SELECT pg_has_role(%s, 'ocw_owner', 'MEMBER')", [dba]).fetchone() == (True,)
    finally:
        with team.admin() as conn:
            conn.execute("DROP SCHEMA IF EXISTS ops CASCADE")
            conn.execute(f"DROP OWNED BY {dba}")
            conn.execute(f"DROP ROLE {dba}")


def test_grant_on_a_schema_ocw_has_not_made_is_refused(team, capsys):
    with team.admin() as conn:
        conn.execute("CREATE SCHEMA plain")
    before = _state(team)
    assert cli.main(["db", "grant", team.admin_url, team.carol, "--schema", "plain"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ocw db grant:") and "schema plain of " in err
    assert "is not ocw's at version 8 (it is at 0)" in err and "run ocw db init first" in err
    assert _state(team) == before  # carol granted nothing
