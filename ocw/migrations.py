"""Schema migrations: a list of named functions, applied in order, each once.

`schema_version` holds the number of migrations applied. A file made by an
older ocw opens and is upgraded in place, inside one transaction per step, so
a crash mid-upgrade leaves the file at the previous version, never between.
Columns are only ever added: old rows stay readable, and a value an old file
lacks (a session's `context_compaction_count`, say) reads as its default.

Nothing is written before `ownership.classify` has said the file is ocw's
(new, marked, or an earlier ocw's exact schema): a foreign file, or one a newer
ocw wrote, is refused with every byte as it was. From schema 4 on, `ocw_meta`
marks the file as ocw's and records the schema version, the ocw that wrote
it and the oldest ocw that can read it, so an older ocw can say which version
a newer file needs.
"""
from __future__ import annotations

from typing import Callable

import duckdb


def m001_initial(con: duckdb.DuckDBPyConnection) -> None:
    """Sessions and the append-only node DAG."""
    con.execute("CREATE SEQUENCE IF NOT EXISTS node_seq START 1")
    con.execute(
        """
        CREATE TABLE sessions (
            id VARCHAR PRIMARY KEY,
            name VARCHAR,
            provider VARCHAR,
            model VARCHAR,
            context_window INTEGER,
            system_prompt VARCHAR,
            head_id VARCHAR,
            occupancy_generation INTEGER DEFAULT 0,
            metadata JSON,
            created_at TIMESTAMP DEFAULT current_timestamp,
            updated_at TIMESTAMP DEFAULT current_timestamp
        )
        """
    )
    con.execute(
        """
        CREATE TABLE nodes (
            seq BIGINT DEFAULT nextval('node_seq'),
            id VARCHAR PRIMARY KEY,
            session_id VARCHAR NOT NULL,
            parent_id VARCHAR,
            role VARCHAR NOT NULL,
            name VARCHAR,
            content JSON,
            tokens INTEGER,
            covers_ids JSON,
            created_at TIMESTAMP DEFAULT current_timestamp
        )
        """
    )


def m002_revision_and_supersedes(con: duckdb.DuckDBPyConnection) -> None:
    """`rev` lets a second process notice a change with one cheap read; a summary
    names the summary it supersedes; each node records the encoding its cached
    count used, so a model change can recount instead of trusting a stale number."""
    con.execute("ALTER TABLE sessions ADD COLUMN rev BIGINT DEFAULT 0")
    con.execute("ALTER TABLE nodes ADD COLUMN supersedes VARCHAR")
    con.execute("ALTER TABLE nodes ADD COLUMN encoding VARCHAR")


def m003_node_order_index(con: duckdb.DuckDBPyConnection) -> None:
    """Incremental reload reads `nodes WHERE session_id = ? AND seq > ?`."""
    con.execute("CREATE INDEX IF NOT EXISTS nodes_session_seq ON nodes (session_id, seq)")


def m004_owner_marker(con: duckdb.DuckDBPyConnection) -> None:
    """`ocw_meta` marks the file as ocw's (`app = 'ocw'`); `migrate` keeps its
    schema version and writer up to date."""
    con.execute("CREATE TABLE ocw_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO ocw_meta VALUES ('app', 'ocw')")


MIGRATIONS: list[Callable[[duckdb.DuckDBPyConnection], None]] = [
    m001_initial,
    m002_revision_and_supersedes,
    m003_node_order_index,
    m004_owner_marker,
]

SCHEMA_VERSION = len(MIGRATIONS)

# The ocw release that first wrote each schema version: a file at version N
# needs this ocw (or newer) to be read. Add a line with every migration.
OCW_VERSION_OF_SCHEMA = {1: "0.1.0", 2: "0.1.0", 3: "0.1.0", 4: "0.1.0"}

# Schema versions that predate the marker: recognised by their exact tables.
# 0 is the empty `schema_version` an interrupted first open could leave.
LEGACY_VERSIONS = (0, 1, 2, 3)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """Migrations applied so far (0 for a new file). Reads only."""
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()"
        " AND schema_name = 'main' AND table_name = 'schema_version'").fetchone()[0]
    if not exists:
        return 0
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def _mark(con: duckdb.DuckDBPyConnection, number: int) -> None:
    from . import __version__

    for key, value in (("schema_version", str(number)), ("written_by", __version__),
                       ("needs_ocw", OCW_VERSION_OF_SCHEMA[number])):
        con.execute("INSERT OR REPLACE INTO ocw_meta VALUES (?, ?)", [key, value])


def migrate(con: duckdb.DuckDBPyConnection, target: int = SCHEMA_VERSION, *, path: str = "") -> int:
    """Bring the file up to `target`; returns the version it started from.
    Refuses (ForeignDatabase, NewerSchema) before writing anything to a file
    that is not ocw's."""
    from .ownership import classify

    classify(con, path)
    start = current_version(con)
    for number in range(start + 1, target + 1):
        con.begin()
        try:
            con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
            MIGRATIONS[number - 1](con)
            con.execute("INSERT INTO schema_version VALUES (?)", [number])
            if number >= 4:
                _mark(con, number)
            con.commit()
        except Exception:
            con.rollback()
            raise
    return start
