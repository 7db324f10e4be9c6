"""Who watches a session, and how a turn tells them: schema p005–p008 (issue 28).

Another kernel with a session open learns of a turn by a notification, and re-reads
the session (ocw/store/postgres/listen.py). The migrations here make that cost the
database as little as a notification can: a turn tells only the kernels that watch
its session (p005), checked by a function that keeps its plan (p006), each on a
channel of its own (p007), and each once until it has read what it was told (p008).
They are named functions like every migration (ocw/store/postgres/migrations.py runs
them in order, after p001–p004) and as frozen: a later change is a new migration.
`session_watchers` is granted to no role; it is read and written only through the
SECURITY DEFINER functions below (p005's docstring says why nothing leaks).
"""
from __future__ import annotations

# The channel every listener LISTENs on: changes other than turns (the trigger, p001),
# and turns told to a watch an ocw before p007 recorded (it has no channel of its own).
NOTIFY_CHANNEL = "ocw_sessions"
# The transaction-local setting by which a turn's write promises to tell the session's
# watchers itself (after its commit, p004; in it, through `ocw_tell`, since p008): the
# trigger then stands down for that transaction (ocw/store/postgres/append.py).
NOTIFY_AFTER = "ocw.notify_after_commit"


def p005_session_watchers(cur) -> None:
    """A turn notifies only when another kernel watches its session (issue 28).

    Every NOTIFY wakes every server process LISTENing in the database, whatever the
    channel (PostgreSQL signals them all; each then reads the queue), and every kernel
    then re-reads its open sessions. With 8 writers on 2 cores that cost a large part of
    the CPU a turn takes, and almost always for nothing: a session is mostly open in
    one kernel, the writer's own. Now each kernel's listening connection records the
    sessions it has open in `session_watchers` (session, its server process), and a
    turn's NOTIFY (p004's, after the commit) is sent only if some other process
    watches the session. Other writes — any other statement or client — notify as
    before (the trigger).
    Why nothing is missed: a kernel LISTENs first, records its watch (committed), and
    then re-reads the session once. A writer whose check ran before that record was
    visible committed its data before the check, so that re-read sees it; a writer
    whose check runs after it notifies. (A turn now asks in its HEAD statement, under the
    session's lock, before its commit: the watch's foreign key takes the row FOR KEY
    SHARE, so a watch recorded meanwhile commits after the turn — ocw/store/postgres/append.py.)
    A watch of a process that has ended is never
    trusted to be alive: `ocw_watch` clears those of processes no longer running, and
    one left over only costs a NOTIFY nobody needed.
    Why nothing leaks that p002 closed: no role is granted the table; it is read and
    written only through these SECURITY DEFINER functions, which return nothing about
    another role's sessions but "watched or not" for a session id the caller names
    (and wrote to). The functions run with a fixed search_path (this schema).
    """
    cur.execute("SELECT quote_ident(current_schema())")
    schema = cur.fetchone()[0]
    cur.execute("""
        CREATE TABLE session_watchers (
            session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            pid integer NOT NULL,
            PRIMARY KEY (session_id, pid)
        )""")
    cur.execute(f"""
        CREATE FUNCTION ocw_watch(ids text[]) RETURNS void LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
        DECLARE sid text;
        BEGIN
            DELETE FROM session_watchers w WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.pid);
            FOREACH sid IN ARRAY ids LOOP
                BEGIN
                    INSERT INTO session_watchers (session_id, pid) VALUES (sid, pg_backend_pid())
                        ON CONFLICT DO NOTHING;
                EXCEPTION WHEN foreign_key_violation THEN
                    NULL;  -- deleted meanwhile: nothing to watch
                END;
            END LOOP;
        END $$""")
    cur.execute(f"""
        CREATE FUNCTION ocw_unwatch() RETURNS void LANGUAGE sql
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
            DELETE FROM session_watchers WHERE pid = pg_backend_pid()
        $$""")
    cur.execute(f"""
        CREATE FUNCTION ocw_watched(sid text, own integer) RETURNS boolean LANGUAGE sql STABLE
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
            SELECT EXISTS (SELECT 1 FROM session_watchers WHERE session_id = sid AND pid <> own)
        $$""")


def p006_watched_in_plpgsql(cur) -> None:
    """`ocw_watched`, which every turn's NOTIFY asks, is PL/pgSQL (issue 28).

    p005 wrote it in SQL. A SQL function that cannot be inlined — a SECURITY DEFINER
    one never is — has its body parsed and planned again for each statement that calls
    it, and a turn's NOTIFY is a statement of its own: measured with
    pg_stat_user_functions, 21 µs a call on an idle server and 73 µs inside a turn
    (1 writer, 1,000 turns), the dearest single step of a turn's write after the
    INSERT. PL/pgSQL keeps its plan for the connection's life: 4.6 µs (a turn's
    throughput moved within the noise of `ocw.bench.pg`, a few per cent). The same
    answer from the same table, with the same owner, SECURITY DEFINER and fixed
    search_path (CREATE OR REPLACE keeps the owner and the grants)."""
    cur.execute("SELECT quote_ident(current_schema())")
    schema = cur.fetchone()[0]
    cur.execute(f"""
        CREATE OR REPLACE FUNCTION ocw_watched(sid text, own integer) RETURNS boolean LANGUAGE plpgsql STABLE
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
        BEGIN
            RETURN EXISTS (SELECT 1 FROM session_watchers WHERE session_id = sid AND pid <> own);
        END $$""")


def p007_private_channels(cur) -> None:
    """A turn wakes only the kernels that watch its session, each on a channel of its own (issue 28).

    Before this a watched session's turn sent `NOTIFY ocw_sessions`, which every
    kernel's listener hears: each of them woke and re-read all of its open sessions
    (the notification names none — see p002), so two kernels writing one session made
    every other kernel in the database read too, several times a second. Now each
    listening connection also LISTENs on a channel of its own, a random name it
    records with its watches (`ocw_watch(ids, channel)`), and a turn's post-commit
    statement is `ocw_notify(session, own listener)`: one NOTIFY per channel of the
    session's other watchers. A watch recorded by an older ocw (no channel) is
    notified on `ocw_sessions` as before, and every listener still LISTENs there, so a
    kernel that opened the database before this migration keeps hearing and being
    heard. Changes other than turns still notify `ocw_sessions` (the trigger).
    Why nothing leaks: the table stays readable only through these functions; a
    channel name is random and known only to its listener and to them. Anyone may
    call `ocw_notify` for a session id — as anyone may NOTIFY `ocw_sessions` — which
    costs its watchers a re-read and tells the caller nothing. A channel is a plain
    lower-case name of at most 63 characters (the CHECK), so no watcher can make
    another writer's `pg_notify` fail.
    """
    cur.execute("SELECT quote_ident(current_schema())")
    schema = cur.fetchone()[0]
    cur.execute("ALTER TABLE session_watchers ADD COLUMN channel text CHECK (channel ~ '^[a-z0-9_]{1,63}$')")
    cur.execute(f"""
        CREATE FUNCTION ocw_watch(ids text[], listen_on text) RETURNS void LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
        DECLARE sid text;
        BEGIN
            DELETE FROM session_watchers w WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.pid);
            FOREACH sid IN ARRAY ids LOOP
                BEGIN
                    INSERT INTO session_watchers (session_id, pid, channel) VALUES (sid, pg_backend_pid(), listen_on)
                        ON CONFLICT (session_id, pid) DO UPDATE SET channel = excluded.channel;
                EXCEPTION WHEN foreign_key_violation THEN
                    NULL;  -- deleted meanwhile: nothing to watch
                END;
            END LOOP;
        END $$""")
    cur.execute(f"""
        CREATE FUNCTION ocw_notify(sid text, own integer) RETURNS void LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
        DECLARE ch text;
        BEGIN
            FOR ch IN SELECT DISTINCT coalesce(channel, '{NOTIFY_CHANNEL}') FROM session_watchers
                      WHERE session_id = sid AND pid <> own LOOP
                PERFORM pg_notify(ch, '');
            END LOOP;
        END $$""")


def p008_told_until_heard(cur) -> None:
    """A watching kernel is told of a session's turns once until it has heard (issue 28).

    Before this every turn of a watched session sent a NOTIFY, after its commit, in a
    transaction of its own. A listener answers a burst of them with one re-read (it
    waits `SETTLE` for the rest), so while two kernels wrote one session flat out
    nearly all of them were for nothing (600 turns, 15 re-reads) — and each one woke
    every listening server process in the database (PostgreSQL 15 signals them all)
    and cost the writer a transaction. (In `ocw.bench.pg`, 300 turns a writer: the
    pair's listeners received about 300 notifications each before, 6–8 after.) Now `session_watchers.told` says whether a watcher has
    been told of something it has not read yet:
    - `ocw_tell(session, own listener)`, in the turn's transaction under the session's
      lock, locks each other watcher's row and, for one that has heard (`told` false),
      sets `told` and NOTIFYs its channel — in the transaction, so the notification is
      sent if and only if the turn commits; one told already is left alone. A watch
      recorded by an ocw before this (`told` NULL: it never says it heard) is told of
      every turn, on its channel or `ocw_sessions`, as before.
    - `ocw_heard()`, from a listener before it re-reads: all its watches have heard.
    Why no turn goes unseen: a turn that commits after a watcher's `ocw_heard` found
    `told` false (the row it locks is the latest version) and notified; one that
    committed before is seen by the re-read that follows `ocw_heard`; and one that
    locked the row first holds `ocw_heard`'s UPDATE of it until its commit, which the
    re-read then sees. A turn that found `told` false and set it holds the row the same
    way, or (`ocw_heard` having passed it by) its notification arrives after the
    commit. A told kernel's listener hears again only after its next `ocw_heard`.
    The NOTIFY is back inside the write (p004 had moved it out): only a turn that
    tells someone takes the cluster-wide notify lock at its commit — at a person's
    pace every turn of a shared session, where no commits wait on each other; while
    writers go flat out, about one turn in a burst. `ocw_watched` and the two-argument
    `ocw_notify` stay for the ocw that calls them.
    Both `ocw_watch` functions now clear the watches of ended processes last, not first:
    a turn locks every other watch of its session, a dead one too, so a kernel that
    cleared it first and then waited (its record's foreign key) for that turn's session
    lock would hold the row the turn waits for — a deadlock.
    """
    cur.execute("SELECT quote_ident(current_schema())")
    schema = cur.fetchone()[0]
    cur.execute("ALTER TABLE session_watchers ADD COLUMN told boolean")
    cur.execute(f"""
        CREATE FUNCTION ocw_tell(sid text, own integer) RETURNS boolean LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
        DECLARE w record; told_any boolean := false;
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM session_watchers WHERE session_id = sid AND pid <> own) THEN
                RETURN false;  -- almost every turn: nobody else has the session open (no lock to take)
            END IF;
            FOR w IN SELECT pid, channel, told FROM session_watchers WHERE session_id = sid AND pid <> own
                     ORDER BY pid FOR NO KEY UPDATE LOOP
                IF w.told IS NULL OR NOT w.told THEN
                    IF w.told IS NOT NULL THEN
                        UPDATE session_watchers SET told = true WHERE session_id = sid AND pid = w.pid;
                    END IF;
                    PERFORM pg_notify(coalesce(w.channel, '{NOTIFY_CHANNEL}'), '');
                    told_any := true;
                END IF;
            END LOOP;
            RETURN told_any;
        END $$""")
    dead = "DELETE FROM session_watchers w WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.pid)"
    for args, record in (("ids text[]", "INSERT INTO session_watchers (session_id, pid) VALUES (sid, pg_backend_pid())"
                                        " ON CONFLICT DO NOTHING"),
                         ("ids text[], listen_on text",
                          "INSERT INTO session_watchers (session_id, pid, channel) VALUES (sid, pg_backend_pid(), listen_on)"
                          " ON CONFLICT (session_id, pid) DO UPDATE SET channel = excluded.channel")):
        cur.execute(f"""
            CREATE OR REPLACE FUNCTION ocw_watch({args}) RETURNS void LANGUAGE plpgsql
            SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
            DECLARE sid text;
            BEGIN
                FOREACH sid IN ARRAY ids LOOP
                    BEGIN
                        {record};
                    EXCEPTION WHEN foreign_key_violation THEN
                        NULL;  -- deleted meanwhile: nothing to watch
                    END;
                END LOOP;
                {dead};  -- last: see the docstring
            END $$""")
    cur.execute(f"""
        CREATE FUNCTION ocw_heard() RETURNS void LANGUAGE sql
        SECURITY DEFINER SET search_path = {schema}, pg_temp AS $$
            UPDATE session_watchers SET told = false WHERE pid = pg_backend_pid() AND told IS DISTINCT FROM false
        $$""")
