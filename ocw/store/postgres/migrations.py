"""The PostgreSQL schema's migrations: named functions, applied in order, each once
(`schema.migrate` runs them, in one transaction under an advisory lock), and the
constraints that hold the store's invariants whatever a client does.

Invariants, enforced by the database itself (a buggy or older client cannot
break them, and tests/store/test_pg_store.py tries):
- Node rows are append-only: a trigger refuses every UPDATE of `nodes`
  (recounts go to `node_counts`). Rows leave only with their session.
- A node's parent is a node of the same session (a foreign key on its id and
  the depth trigger, p003), and a message's depth is its parent's plus one (a trigger).
- HEAD is a message of the same session — never a summary, never another
  session's node (a foreign key and two triggers); the store moves it only in
  `append_nodes` and `update_session` (rewind, branch switch).
- `occupancy_generation` and the compaction count in `metadata` never go
  down (a trigger): a compaction, once committed, stays counted.
- Every change of a session row sends `NOTIFY ocw_sessions` at commit (a
  trigger), with no payload, so other kernels' listeners sync their open sessions
  through the row policies (ocw/store/postgres/listen.py) — or, for a write that
  promised it (p004), right after its commit, in the same round trip, and only
  when another kernel watches that session (p005).
- Row-level security (p002): a role sees and changes only its own sessions, and
  those shared with it, with their nodes and recounts (see `p002_row_security`).

Schemas are only ever added to: a migration never rewrites an earlier one, so a
database any earlier ocw wrote upgrades in place. Nothing here imports psycopg:
each migration runs SQL on the cursor it is given.
"""
from __future__ import annotations

from typing import Callable

NOTIFY_CHANNEL = "ocw_sessions"


def p001_initial(cur) -> None:
    """Sessions, the append-only node DAG with depth and running totals, recounts,
    and the triggers that hold the invariants (see the module doc)."""
    cur.execute("""
        CREATE TABLE sessions (
            id text PRIMARY KEY,
            name text NOT NULL UNIQUE,
            provider text,
            model text,
            context_window integer,
            system_prompt text,
            head_id text,
            occupancy_generation integer NOT NULL DEFAULT 0 CHECK (occupancy_generation >= 0),
            metadata json NOT NULL DEFAULT '{}',
            rev bigint NOT NULL DEFAULT 0,
            count_epoch integer NOT NULL DEFAULT 0,
            created_at timestamp NOT NULL DEFAULT localtimestamp,
            updated_at timestamp NOT NULL DEFAULT localtimestamp
        )""")
    cur.execute("""
        CREATE TABLE nodes (
            seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            id text PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            parent_id text,
            role text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool', 'llm')),
            name text,
            content text NOT NULL,
            tokens integer NOT NULL,
            encoding text,
            depth integer,
            cum_tokens bigint,
            epoch integer,
            cover_count integer,
            supersedes text,
            created_at timestamp NOT NULL DEFAULT localtimestamp,
            UNIQUE (session_id, id),
            FOREIGN KEY (session_id, parent_id) REFERENCES nodes (session_id, id),
            CHECK (CASE WHEN role = 'llm' AND name = 'context/summary'
                        THEN parent_id IS NOT NULL AND cover_count > 0 AND depth IS NULL
                        ELSE depth >= 1 AND cum_tokens IS NOT NULL END)
        )""")
    cur.execute("CREATE INDEX nodes_session_seq ON nodes (session_id, seq)")
    cur.execute("CREATE INDEX nodes_parent ON nodes (parent_id)")
    cur.execute("""
        CREATE TABLE node_counts (
            node_id text NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
            epoch integer NOT NULL,
            session_id text NOT NULL,
            tokens integer,
            depth integer,
            cum_tokens bigint,
            encoding text,
            PRIMARY KEY (node_id, epoch)
        )""")
    cur.execute("CREATE INDEX node_counts_session ON node_counts (session_id)")
    cur.execute("""
        ALTER TABLE sessions ADD CONSTRAINT sessions_head_fk
            FOREIGN KEY (id, head_id) REFERENCES nodes (session_id, id) DEFERRABLE INITIALLY DEFERRED""")
    cur.execute("""
        CREATE FUNCTION ocw_nodes_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'ocw: node rows are append-only (node %)', OLD.id
                USING ERRCODE = 'integrity_constraint_violation',
                      HINT = 'recounts go to node_counts; HEAD moves on the session row';
        END $$""")
    cur.execute("CREATE TRIGGER nodes_append_only BEFORE UPDATE ON nodes"
                " FOR EACH ROW EXECUTE FUNCTION ocw_nodes_append_only()")
    cur.execute("""
        CREATE FUNCTION ocw_nodes_depth() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE parent_depth integer;
        BEGIN
            IF NEW.role = 'llm' AND NEW.name = 'context/summary' THEN
                RETURN NEW;
            END IF;
            IF NEW.parent_id IS NULL THEN
                parent_depth := 0;
            ELSE
                SELECT depth INTO parent_depth FROM nodes WHERE id = NEW.parent_id;
            END IF;
            IF parent_depth IS NULL OR NEW.depth <> parent_depth + 1 THEN
                RAISE EXCEPTION 'ocw: node % has depth %, its parent % is at depth %',
                    NEW.id, NEW.depth, NEW.parent_id, parent_depth
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END $$""")
    cur.execute("CREATE TRIGGER nodes_depth BEFORE INSERT ON nodes FOR EACH ROW EXECUTE FUNCTION ocw_nodes_depth()")
    cur.execute("""
        CREATE FUNCTION ocw_sessions_guard() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE head_role text; head_name text;
        BEGIN
            IF NEW.head_id IS NOT NULL AND NEW.head_id IS DISTINCT FROM OLD.head_id THEN
                SELECT role, name INTO head_role, head_name FROM nodes WHERE id = NEW.head_id;
                IF head_role = 'llm' AND head_name = 'context/summary' THEN
                    RAISE EXCEPTION 'ocw: HEAD of session % cannot be the summary %', NEW.id, NEW.head_id
                        USING ERRCODE = 'integrity_constraint_violation';
                END IF;
            END IF;
            IF NEW.occupancy_generation < OLD.occupancy_generation THEN
                RAISE EXCEPTION 'ocw: the occupancy generation of session % cannot go down (% -> %)',
                    NEW.id, OLD.occupancy_generation, NEW.occupancy_generation
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            IF coalesce((NEW.metadata ->> 'context_compaction_count')::bigint, 0)
                    < coalesce((OLD.metadata ->> 'context_compaction_count')::bigint, 0) THEN
                RAISE EXCEPTION 'ocw: the compaction count of session % cannot go down', NEW.id
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END $$""")
    cur.execute("CREATE TRIGGER sessions_guard BEFORE UPDATE ON sessions"
                " FOR EACH ROW EXECUTE FUNCTION ocw_sessions_guard()")
    cur.execute(f"""
        CREATE FUNCTION ocw_sessions_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                PERFORM pg_notify('{NOTIFY_CHANNEL}', OLD.id || ' -1');
            ELSE
                PERFORM pg_notify('{NOTIFY_CHANNEL}', NEW.id || ' ' || NEW.rev);
            END IF;
            RETURN NULL;
        END $$""")
    cur.execute("CREATE TRIGGER sessions_notify AFTER INSERT OR UPDATE OR DELETE ON sessions"
                " FOR EACH ROW EXECUTE FUNCTION ocw_sessions_notify()")


# The condition every session-data policy rests on: the session is the role's own, or
# shared with it. nodes and node_counts ask it through `sessions`, whose own policy
# applies inside the subquery, so one definition rules every table.
_SEES_SESSION = ("owner = current_user OR EXISTS (SELECT 1 FROM session_shares sh"
                 " WHERE sh.session_id = sessions.id AND sh.grantee = current_user)")


def p002_row_security(cur) -> None:
    """Row-level security: each database role sees and changes only its own sessions
    and those shared with it (`session_shares`, one row per session and role).

    - `sessions.owner` is the role that created the row (its default, current_user);
      rows already there belong to the role running this migration (the one that
      owned every table before). Names are unique per owner: a second role's
      "default" is its own and reveals nothing of the first's.
    - A share row names its session *and* that session's owner; a foreign key on
      (session_id, session_owner) and the check `session_owner = current_user` mean only
      the owner shares or unshares. Its policy never reads `sessions`, so the two
      policies cannot recurse into each other.
    - Only the owner deletes a session (a role it is shared with reads and appends).
    - FORCE: the tables' owner is held to the policies too (a single-user database
      whose tables the user owns behaves as every other role's). Foreign-key checks
      and cascades run without row security, as PostgreSQL always does them.
    - NOTIFY carries no payload (the trigger is replaced): the channel is the whole
      database's, LISTEN needs only CONNECT, so a session id or rev in it would tell
      any role who writes what. A listener re-reads its open sessions through the policies.
    """
    cur.execute("ALTER TABLE sessions ADD COLUMN owner name NOT NULL DEFAULT current_user")
    cur.execute("ALTER TABLE sessions DROP CONSTRAINT sessions_name_key")
    cur.execute("ALTER TABLE sessions ADD CONSTRAINT sessions_owner_name_key UNIQUE (owner, name)")
    cur.execute("ALTER TABLE sessions ADD CONSTRAINT sessions_id_owner_key UNIQUE (id, owner)")
    cur.execute("""
        CREATE TABLE session_shares (
            session_id text NOT NULL,
            session_owner name NOT NULL DEFAULT current_user,
            grantee name NOT NULL,
            shared_at timestamp NOT NULL DEFAULT localtimestamp,
            PRIMARY KEY (session_id, grantee),
            FOREIGN KEY (session_id, session_owner) REFERENCES sessions (id, owner)
                ON DELETE CASCADE ON UPDATE CASCADE
        )""")
    cur.execute("CREATE INDEX session_shares_grantee ON session_shares (grantee)")
    for table in ("sessions", "nodes", "node_counts", "session_shares"):
        cur.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        cur.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    cur.execute(f"CREATE POLICY sessions_seen ON sessions FOR SELECT USING ({_SEES_SESSION})")
    cur.execute("CREATE POLICY sessions_created ON sessions FOR INSERT WITH CHECK (owner = current_user)")
    cur.execute(f"CREATE POLICY sessions_changed ON sessions FOR UPDATE USING ({_SEES_SESSION})"
                " WITH CHECK (owner = current_user OR EXISTS (SELECT 1 FROM session_shares sh"
                " WHERE sh.session_id = sessions.id AND sh.grantee = current_user AND sh.session_owner = sessions.owner))")
    cur.execute("CREATE POLICY sessions_deleted ON sessions FOR DELETE USING (owner = current_user)")
    for table in ("nodes", "node_counts"):
        cur.execute(f"CREATE POLICY {table}_of_seen_sessions ON {table} FOR ALL"
                    f" USING (session_id IN (SELECT id FROM sessions))"
                    f" WITH CHECK (session_id IN (SELECT id FROM sessions))")
    cur.execute("CREATE POLICY shares_seen ON session_shares FOR SELECT"
                " USING (session_owner = current_user OR grantee = current_user)")
    cur.execute("CREATE POLICY shares_made ON session_shares FOR INSERT WITH CHECK (session_owner = current_user)")
    cur.execute("CREATE POLICY shares_taken_back ON session_shares FOR DELETE USING (session_owner = current_user)")
    cur.execute(f"""
        CREATE OR REPLACE FUNCTION ocw_sessions_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{NOTIFY_CHANNEL}', '');
            RETURN NULL;
        END $$""")


def p003_checks_by_id(cur) -> None:
    """Every check a turn's write makes on `nodes` is a lookup by primary key (issue 28).

    p001's parent and HEAD keys referenced `nodes (session_id, id)`. PostgreSQL checks
    such a key with one cached plan per connection for `WHERE session_id = $1 AND id = $2`;
    planned while `nodes` was small or not yet analysed (a new database, the first
    minute of a run), it read the session's rows through (session_id, seq) and
    filtered on id, so each check cost the session's length for the connection's life
    (0.2 ms at 1,000 nodes, three checks a turn). Now each is by `id` alone, which
    only the primary key serves, and the same-session half of each key is checked
    where the row is read anyway:
    - `parent_id` references `nodes (id)`. The depth trigger, which reads the parent
      by id already, refuses a parent that is not a node of the same session — one it
      finds in another session, or cannot see (row security) — with the foreign key's
      SQLSTATE 23503; summaries too (their parent was held by the same key).
    - `head_id` references `nodes (id)`, deferred as before (a copied session's row is
      written before its nodes: ocw/store/transfer.py). A deferred constraint trigger
      checks at commit that HEAD is a node of that session; a row that no longer
      holds that HEAD (moved again, or the session deleted, in the same transaction)
      is not judged by its old value — as PostgreSQL's own key check skips it.
    - UNIQUE (session_id, id), which only those two keys read, is dropped: one index
      fewer to write per node. `id` stays the primary key, so the pair stays unique.
    Append-only rows, depth = parent + 1 and HEAD never a summary are unchanged.
    """
    cur.execute("ALTER TABLE sessions DROP CONSTRAINT sessions_head_fk")
    cur.execute("ALTER TABLE nodes DROP CONSTRAINT nodes_session_id_parent_id_fkey")
    cur.execute("ALTER TABLE nodes DROP CONSTRAINT nodes_session_id_id_key")
    cur.execute("ALTER TABLE nodes ADD CONSTRAINT nodes_parent_fk FOREIGN KEY (parent_id) REFERENCES nodes (id)")
    cur.execute("ALTER TABLE sessions ADD CONSTRAINT sessions_head_fk FOREIGN KEY (head_id) REFERENCES nodes (id)"
                " DEFERRABLE INITIALLY DEFERRED")
    cur.execute("""
        CREATE OR REPLACE FUNCTION ocw_nodes_depth() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE parent_depth integer; parent_session text;
        BEGIN
            IF NEW.parent_id IS NULL THEN
                parent_depth := 0;
            ELSE
                SELECT depth, session_id INTO parent_depth, parent_session FROM nodes WHERE id = NEW.parent_id;
                IF parent_session IS DISTINCT FROM NEW.session_id THEN
                    RAISE EXCEPTION 'ocw: the parent % of node % is not a node of session %',
                        NEW.parent_id, NEW.id, NEW.session_id
                        USING ERRCODE = 'foreign_key_violation';
                END IF;
            END IF;
            IF NEW.role = 'llm' AND NEW.name = 'context/summary' THEN
                RETURN NEW;
            END IF;
            IF parent_depth IS NULL OR NEW.depth <> parent_depth + 1 THEN
                RAISE EXCEPTION 'ocw: node % has depth %, its parent % is at depth %',
                    NEW.id, NEW.depth, NEW.parent_id, parent_depth
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END $$""")
    cur.execute("""
        CREATE FUNCTION ocw_sessions_head() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE head_session text;
        BEGIN
            SELECT session_id INTO head_session FROM nodes WHERE id = NEW.head_id;
            IF head_session IS DISTINCT FROM NEW.id THEN  -- a simple expression: no plan per call
                IF EXISTS (SELECT 1 FROM sessions WHERE id = NEW.id AND head_id = NEW.head_id) THEN
                    RAISE EXCEPTION 'ocw: HEAD % of session % is not a node of that session', NEW.head_id, NEW.id
                        USING ERRCODE = 'foreign_key_violation';
                END IF;
            END IF;
            RETURN NULL;
        END $$""")
    cur.execute("CREATE CONSTRAINT TRIGGER sessions_head_of_session AFTER INSERT OR UPDATE OF head_id ON sessions"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.head_id IS NOT NULL)"
                " EXECUTE FUNCTION ocw_sessions_head()")


# The transaction-local setting by which a write promises to notify right after its
# commit (ocw/store/postgres/append.py); the trigger then leaves it to the writer.
NOTIFY_AFTER = "ocw.notify_after_commit"


def p004_notify_after_commit(cur) -> None:
    """A turn's write may send its NOTIFY after its commit instead of inside it (issue 28).

    A transaction that notifies takes one lock for the whole cluster at commit and
    holds it until its commit record is flushed: every durable write that notified
    waited for the previous one's flush — writers to different sessions, which share
    no row, could not share a flush (group commit). With 8 writers of the raw floor
    transaction, a NOTIFY inside it cost about a quarter of their throughput.
    The trigger stays on every change of every session row, for every client; it
    stands down only in a transaction that has set `ocw.notify_after_commit` to 'on'
    (transaction-local, so it cannot outlive that transaction) — a promise that the
    same client sends the notification itself, in the same round trip, right after
    its COMMIT. That notification is a transaction of its own that writes nothing
    else, so its commit waits for no flush while it holds the lock. It is sent only
    if the write committed (a failed statement skips the rest of the pipeline), and
    listeners see it after the data, as before.
    """
    cur.execute(f"""
        CREATE OR REPLACE FUNCTION ocw_sessions_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF current_setting('{NOTIFY_AFTER}', true) IS DISTINCT FROM 'on' THEN
                PERFORM pg_notify('{NOTIFY_CHANNEL}', '');
            END IF;
            RETURN NULL;
        END $$""")


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


MIGRATIONS: list[Callable] = [
    p001_initial,
    p002_row_security,
    p003_checks_by_id,
    p004_notify_after_commit,
    p005_session_watchers,
    p006_watched_in_plpgsql,
    p007_private_channels,
]

SCHEMA_VERSION = len(MIGRATIONS)
# The ocw release that first wrote each schema version of the PostgreSQL store.
OCW_VERSION_OF_SCHEMA = {1: "0.2.0", 2: "0.2.0", 3: "0.2.0", 4: "0.2.0", 5: "0.2.0", 6: "0.2.0", 7: "0.2.0"}
