"""The team database's roles: what `ocw db init` and `ocw db grant` run (ocw/notebook/cli.py).

Who owns what, and why:
- ocw's tables belong to a role of their own, `ocw_owner` (NOLOGIN): no user owns
  them, so no user bypasses or rewrites the row policies (migrations.p002_row_security),
  and a user role gets exactly the grants below — no more.
- `init` runs as a role that may create roles and schemas (a superuser, or one with
  CREATEROLE that owns the database). It creates `ocw_owner` and the schema (owned by
  it), migrates the schema *as* `ocw_owner`, and grants each `--grant` role. A schema
  an earlier ocw made for one user (its tables owned by that user) is first upgraded
  as that user — so the sessions already there stay theirs — then handed to `ocw_owner`.
- `grant` gives a login role what ocw needs and nothing else: USAGE on the schema;
  SELECT, INSERT, UPDATE, DELETE on the session tables (the policies then limit each
  row); SELECT on the marker tables; the identity sequence; and the schema first in
  its search_path in this database, so its URL needs no options.
- Both are idempotent: every statement is "if absent" or a grant, which repeats as a no-op.
  Everything runs in one transaction: a refusal part-way leaves nothing changed.
Nothing here imports psycopg: it runs SQL on the connection it is given.
"""
from __future__ import annotations

from ocw.text.errors import InvalidArgument, StoreError
from ocw.store.postgres import schema as pg_schema

OWNER_ROLE = "ocw_owner"
DEFAULT_SCHEMA = "ocw"
SESSION_TABLES = ("sessions", "nodes", "node_counts", "session_shares")
MARKER_TABLES = (pg_schema.MARKER, "schema_version")


def ident(cur, name: str) -> str:
    """`name` quoted as an SQL identifier by the server itself."""
    cur.execute("SELECT quote_ident(%s)", [name])
    return cur.fetchone()[0]


def _role_exists(cur, role: str) -> bool:
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    return cur.fetchone() is not None


def _check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or len(value) > 63 or any(c in value for c in "\0\n\r"):
        raise InvalidArgument(f"{what} takes a PostgreSQL name of 1 to 63 characters, not {value!r}")


def init(conn, where: str, *, schema: str = DEFAULT_SCHEMA, grant: list[str] | tuple = ()) -> list[str]:
    """Create (or bring up to date) the team schema owned by `ocw_owner`, and grant
    each role in `grant`. Returns the lines to say. See the module doc."""
    _check_name(schema, "--schema")
    for role in grant:
        _check_name(role, "--grant")
    said = []
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [pg_schema.MIGRATION_LOCK])
        owner = ident(cur, OWNER_ROLE)
        if not _role_exists(cur, OWNER_ROLE):
            cur.execute(f"CREATE ROLE {owner} NOLOGIN")
            said.append(f"created role {OWNER_ROLE} (NOLOGIN): it owns ocw's tables")
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cur.fetchone()[0]:  # SET ROLE needs membership; a superuser has it already
            cur.execute(f"GRANT {owner} TO current_user")
        sch = ident(cur, schema)
        cur.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s", [schema])
        r = cur.fetchone()
        if r is None:
            cur.execute(f"CREATE SCHEMA {sch} AUTHORIZATION {owner}")
            said.append(f"created schema {schema}, owned by {OWNER_ROLE}")
        else:
            cur.execute(f"GRANT USAGE, CREATE ON SCHEMA {sch} TO {owner}")
        cur.execute(f"SET LOCAL search_path TO {sch}")
        start = pg_schema.classify(cur, where)
        if 0 < start < pg_schema.SCHEMA_VERSION:  # an earlier ocw's schema: upgraded as its owner
            cur.execute("SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = %s",
                        [schema, pg_schema.MARKER])
            cur.execute(f"SET LOCAL ROLE {ident(cur, cur.fetchone()[0])}")
            pg_schema.migrate(conn, where)
            cur.execute("RESET ROLE")
            said.append(f"upgraded schema {schema} from version {start} to {pg_schema.SCHEMA_VERSION}; "
                        "its sessions stay their owner's")
        moved = _hand_over(cur, schema, owner)
        if moved:
            said.append(f"handed {moved} of ocw's objects in schema {schema} to {OWNER_ROLE}")
        cur.execute(f"SET LOCAL ROLE {owner}")
        if pg_schema.migrate(conn, where) == 0:
            said.append(f"created ocw's tables (schema version {pg_schema.SCHEMA_VERSION}) with row-level security")
        cur.execute("RESET ROLE")
        for role in grant:
            said.extend(_grant(cur, role, schema))
    return said or [f"schema {schema} is up to date (version {pg_schema.SCHEMA_VERSION}); nothing changed"]


def _hand_over(cur, schema: str, owner: str) -> int:
    """Tables and functions of ocw's in `schema` that another role owns → `ocw_owner`."""
    cur.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relkind = 'r' AND pg_get_userbyid(c.relowner) <> %s",
                [schema, OWNER_ROLE])
    tables = [t for (t,) in cur.fetchall()]
    cur.execute("SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = %s AND p.proname LIKE 'ocw\\_%%' AND pg_get_userbyid(p.proowner) <> %s",
                [schema, OWNER_ROLE])
    functions = [f for (f,) in cur.fetchall()]
    sch = ident(cur, schema)
    for t in tables:
        cur.execute(f"ALTER TABLE {sch}.{ident(cur, t)} OWNER TO {owner}")
    for f in functions:
        cur.execute(f"ALTER FUNCTION {f} OWNER TO {owner}")
    return len(tables) + len(functions)


def _grant(cur, role: str, schema: str) -> list[str]:
    if not _role_exists(cur, role):
        raise InvalidArgument(f"there is no role {role!r} on this server",
                              hint=f"create it first (CREATE ROLE {role} LOGIN PASSWORD '…'), then grant it")
    if role == OWNER_ROLE:
        raise InvalidArgument(f"{OWNER_ROLE} owns ocw's tables and never logs in; grant a user's role")
    who, sch = ident(cur, role), ident(cur, schema)
    cur.execute(f"GRANT USAGE ON SCHEMA {sch} TO {who}")
    cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(f'{sch}.{t}' for t in SESSION_TABLES)} TO {who}")
    cur.execute(f"GRANT SELECT ON {', '.join(f'{sch}.{t}' for t in MARKER_TABLES)} TO {who}")
    cur.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {sch} TO {who}")
    cur.execute("SELECT current_database()")
    db = ident(cur, cur.fetchone()[0])
    cur.execute(f"ALTER ROLE {who} IN DATABASE {db} SET search_path TO {sch}")
    return [f"granted {role} the use of schema {schema} (its own sessions, and those shared with it); "
            f"its search_path in this database is {schema}"]


def grant(conn, where: str, roles: list[str], *, schema: str = DEFAULT_SCHEMA) -> list[str]:
    """`ocw db grant`: grant each role (the schema must be ocw's, at this version)."""
    _check_name(schema, "--schema")
    for role in roles:
        _check_name(role, "ROLE")
    said = []
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
        if cur.fetchone() is None:
            raise StoreError(f"{where} has no schema {schema!r}", hint="run ocw db init first")
        cur.execute(f"SET LOCAL search_path TO {ident(cur, schema)}")
        version = pg_schema.classify(cur, where)
        if version != pg_schema.SCHEMA_VERSION:
            raise StoreError(f"schema {schema} of {where} is not ocw's at version {pg_schema.SCHEMA_VERSION} "
                             f"(it is at {version})", hint="run ocw db init first")
        for role in roles:
            said.extend(_grant(cur, role, schema))
    return said
