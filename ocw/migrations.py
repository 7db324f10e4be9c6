"""Schema migrations: a list of named functions, applied in order, each once.

`schema_version` holds the number of migrations applied. A file made by an
older ocw opens and is upgraded in place, inside one transaction per step, so
a crash mid-upgrade leaves the file at the previous version, never between.
Columns are only ever added: old rows stay readable, and a value an old file
lacks (a session's `context_compaction_count`, say) reads as its default.
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


MIGRATIONS: list[Callable[[duckdb.DuckDBPyConnection], None]] = [
    m001_initial,
    m002_revision_and_supersedes,
    m003_node_order_index,
]

SCHEMA_VERSION = len(MIGRATIONS)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(con: duckdb.DuckDBPyConnection, target: int = SCHEMA_VERSION) -> int:
    """Bring the file up to `target`; returns the version it started from."""
    start = current_version(con)
    for number in range(start + 1, target + 1):
        con.begin()
        try:
            MIGRATIONS[number - 1](con)
            con.execute("INSERT INTO schema_version VALUES (?)", [number])
            con.commit()
        except Exception:
            con.rollback()
            raise
    return start
