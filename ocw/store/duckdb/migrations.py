"""Schema migrations: a list of named functions, applied in order, each once.

`schema_version` holds the number of migrations applied. A file made by an
older ocw opens and is upgraded in place, inside one transaction per step, so
a crash mid-upgrade leaves the file at the previous version, never between.
Columns are only ever added: old rows stay readable, and a value an old file
lacks (a session's `context_compaction_count`, say) reads as its default.

Nothing is written before `ownership.classify` (called by `ownership.migrate`, the one entry) has said the file is ocw's
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


def m005_branch_totals(con: duckdb.DuckDBPyConnection) -> None:
    """Store v2: each node carries its depth and the running token total from the root
    along its branch (`cum_tokens`), so occupancy is a difference of two stored numbers
    and opening a session reads its tail, not its history; a summary records its
    covered range as a boundary (`cover_count`: the depth of the last covered node,
    its parent) instead of a list of every covered id.

    Counts belong to a count epoch (`sessions.count_epoch`, `nodes.epoch`): a node's
    total is valid while its epoch is the session's and it was computed from a parent
    of that epoch. Nodes counted with another encoding than their session's model
    uses get epoch −1 here (the old files' stale counts), as do their descendants;
    the session recounts them on first use, into `node_counts`."""
    from ocw.text.tokens import encoding_for_model  # pure: which encoding a model counts with

    con.execute("ALTER TABLE sessions ADD COLUMN count_epoch INTEGER DEFAULT 0")
    con.execute("UPDATE sessions SET count_epoch = 0")
    for col, typ in (("depth", "INTEGER"), ("cum_tokens", "BIGINT"), ("epoch", "INTEGER"), ("cover_count", "INTEGER")):
        con.execute(f"ALTER TABLE nodes ADD COLUMN {col} {typ}")
    models = dict(con.execute("SELECT id, model FROM sessions").fetchall())
    rows = con.execute(
        "SELECT id, session_id, parent_id, role, name, tokens, encoding, json_array_length(covers_ids)"
        " FROM nodes ORDER BY seq").fetchall()
    info: dict[str, tuple[int, int, int]] = {}  # id -> (depth, cum, epoch)
    out = []
    for nid, sid, parent, role, name, tokens, enc, ncov in rows:
        if role == "llm" and name == "context/summary":
            out.append((nid, None, None, 0 if enc == encoding_for_model(models.get(sid)).name else -1,
                        int(ncov or 0)))
            continue
        pd, pc, pe = info.get(parent, (0, 0, 0)) if parent else (0, 0, 0)
        ok = enc == encoding_for_model(models.get(sid)).name and pe == 0
        info[nid] = (pd + 1, pc + int(tokens or 0), 0 if ok else -1)
        out.append((nid, pd + 1, pc + int(tokens or 0), 0 if ok else -1, None))
    if out:
        con.execute("CREATE TEMP TABLE m005 (id VARCHAR, depth INTEGER, cum BIGINT, epoch INTEGER, cover INTEGER)")
        con.executemany("INSERT INTO m005 VALUES (?, ?, ?, ?, ?)", out)
        con.execute("UPDATE nodes SET depth = m.depth, cum_tokens = m.cum, epoch = m.epoch, cover_count = m.cover"
                    " FROM m005 m WHERE nodes.id = m.id")
        con.execute("DROP TABLE m005")
    con.execute("UPDATE nodes SET covers_ids = NULL WHERE covers_ids IS NOT NULL")
    # Recounts for other epochs (a model with another tokenizer, another tool result
    # cap) go here, never into the node rows, which stay as they were written.
    con.execute("CREATE TABLE node_counts (node_id VARCHAR, epoch INTEGER, session_id VARCHAR, tokens INTEGER,"
                " depth INTEGER, cum_tokens BIGINT, encoding VARCHAR, PRIMARY KEY (node_id, epoch))")


MIGRATIONS: list[Callable[[duckdb.DuckDBPyConnection], None]] = [
    m001_initial,
    m002_revision_and_supersedes,
    m003_node_order_index,
    m004_owner_marker,
    m005_branch_totals,
]

SCHEMA_VERSION = len(MIGRATIONS)

# The ocw release that first wrote each schema version: a file at version N
# needs this ocw (or newer) to be read. Add a line with every migration.
OCW_VERSION_OF_SCHEMA = {1: "0.1.0", 2: "0.1.0", 3: "0.1.0", 4: "0.1.0", 5: "0.2.0"}

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
    from ocw._version import __version__

    for key, value in (("schema_version", str(number)), ("written_by", __version__),
                       ("needs_ocw", OCW_VERSION_OF_SCHEMA[number])):
        con.execute("INSERT OR REPLACE INTO ocw_meta VALUES (?, ?)", [key, value])


def upgrade(con: duckdb.DuckDBPyConnection, target: int = SCHEMA_VERSION) -> int:
    """Apply the migrations the file lacks, up to `target`; returns the version it
    started from. Only for a file `ownership.classify` has claimed: callers go
    through `ownership.migrate`, which claims first."""
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
