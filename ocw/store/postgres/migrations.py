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
  through the row policies (ocw/store/postgres/listen.py) — except a turn's write,
  which promised to tell the kernels watching its session itself (p004): since p008
  each of them once until it has read what it was told (ocw/store/postgres/watch_schema.py,
  p005–p008).
- Row-level security (p002): a role sees and changes only its own sessions, and
  those shared with it, with their nodes and recounts (see `p002_row_security`).

Schemas are only ever added to: a migration never rewrites an earlier one, so a
database any earlier ocw wrote upgrades in place. Nothing here imports psycopg:
each migration runs SQL on the cursor it is given.
"""
from __future__ import annotations

from typing import Callable

from ocw.store.postgres.watch_schema import (NOTIFY_AFTER, NOTIFY_CHANNEL, p005_session_watchers,
                                             p006_watched_in_plpgsql, p007_private_channels,
                                             p008_told_until_heard)


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


MIGRATIONS: list[Callable] = [
    p001_initial,
    p002_row_security,
    p003_checks_by_id,
    p004_notify_after_commit,
    p005_session_watchers,
    p006_watched_in_plpgsql,
    p007_private_channels,
    p008_told_until_heard,
]

SCHEMA_VERSION = len(MIGRATIONS)
# The ocw release that first wrote each schema version of the PostgreSQL store.
OCW_VERSION_OF_SCHEMA = {1: "0.2.0", 2: "0.2.0", 3: "0.2.0", 4: "0.2.0", 5: "0.2.0", 6: "0.2.0", 7: "0.2.0",
                         8: "0.2.0"}
