"""The PostgreSQL schema's ownership: ocw's marker, which database is ocw's to
write, and the one entry that brings a database up to the current schema (the
migrations themselves, and the invariants they hold, are ocw/store/postgres/migrations.py).

`ocw_meta` marks the database as ocw's (`app = 'ocw'`) and records the schema
version, the ocw that wrote it and the oldest ocw that reads it. `classify`
refuses, before anything is written, a database (its current schema) that
holds anything else, or a newer ocw's schema; the migration runs inside one
transaction under an advisory lock, so two kernels opening a new database at
once cannot both create it. Nothing here imports psycopg: it runs SQL on the
connection it is given.
"""
from __future__ import annotations

from ocw.text.errors import ForeignDatabase
from ocw.store.marker import marker_version
from ocw.store.postgres.migrations import MIGRATIONS, OCW_VERSION_OF_SCHEMA, SCHEMA_VERSION

MARKER = "ocw_meta"
MIGRATION_LOCK = 0x6F6377  # pg_advisory_xact_lock key while migrating ("ocw")


def _objects(cur) -> list[str]:
    """Tables, views, sequences and functions in the connection's current schema."""
    cur.execute("""
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'S', 'p', 'f')
        UNION ALL
        SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema()
        ORDER BY 1""")
    return [r[0] for r in cur.fetchall()]


def classify(cur, where: str) -> int:
    """The schema version of the database behind `cur` (0: new, nothing in it).
    SELECTs only. ForeignDatabase or NewerSchema (one line) when it is not ocw's
    to write."""

    cur.execute("SELECT current_schema()")
    schema = cur.fetchone()[0]
    if schema is None:
        raise ForeignDatabase(f"{where} has no schema to write to (search_path names none that exists)",
                              hint="create the schema, or fix search_path in the URL's options")
    names = _objects(cur)
    if not names:
        return 0
    if MARKER in names:
        cur.execute(f"SELECT key, value FROM {MARKER}")
        version = marker_version(dict(cur.fetchall()), SCHEMA_VERSION, where, "PostgreSQL schema",
                                 "another database")
        if version is not None:
            return version
    shown = ", ".join(names[:4])
    raise ForeignDatabase(f"{where} (schema {schema}) is another application's database (it holds {shown}); "
                          "ocw did not write it and leaves it untouched",
                          hint="point OCW_DB at an empty database, or give ocw its own schema "
                               "(?options=-csearch_path%3Docw)")


def migrate(conn, where: str) -> int:
    """Bring the database up to SCHEMA_VERSION in one transaction; returns the
    version it started from. Refuses a foreign or newer database before writing."""
    from ocw._version import __version__

    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
        start = classify(cur, where)
        if start == 0:
            cur.execute(f"CREATE TABLE {MARKER} (key text PRIMARY KEY, value text NOT NULL)")
            cur.execute(f"INSERT INTO {MARKER} VALUES ('app', 'ocw')")
            cur.execute("CREATE TABLE schema_version (version integer PRIMARY KEY,"
                        " applied_at timestamptz NOT NULL DEFAULT now())")
        for number in range(start + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[number - 1](cur)
            cur.execute("INSERT INTO schema_version (version) VALUES (%s)", [number])
        if start < SCHEMA_VERSION:
            for key, value in (("schema_version", str(SCHEMA_VERSION)), ("written_by", __version__),
                               ("needs_ocw", OCW_VERSION_OF_SCHEMA[SCHEMA_VERSION])):
                cur.execute(f"INSERT INTO {MARKER} VALUES (%s, %s)"
                            " ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value])
    return start
