"""Which files ocw may write: the guard the store runs before it writes anything.

Invariant: ocw writes to a database file only if the file is ocw's — new
(absent, zero bytes, or a DuckDB database holding nothing), marked
(`ocw_meta` says `app = 'ocw'`, at a schema version this ocw knows), or an
earlier ocw's (exactly the tables and columns some earlier schema version had,
from before the marker existed). Anything else is refused with one line.

Why it holds: every check here only reads. A path is judged with `os.stat`
and the file's first bytes; a database through `classify(con)`, which runs
SELECTs only. The store hands `classify` a READ-ONLY connection for an existing
file (DuckDB replays a leftover `.wal` into the file when it opens it
read-write, and checkpoints on close; read-only it does neither), and runs it
again inside the migration's transaction as a second lock on the door. So a
refused file's bytes, and its `.wal`'s, are what they were.

The store (today's DuckDB `Store`, or a later one behind the same interface)
calls `check_path` on the raw value, `classify` on an existing file, and
`make_folder` / `replace_empty_file` just before DuckDB creates one.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from functools import lru_cache

from ocw.store.duckdb.settings import DUCKDB_CONFIG
from ocw.store.marker import marker_version
from ocw.text.errors import BadDatabasePath, ForeignDatabase
from ocw.text.secrets import has_credentials, mask_credentials

MEMORY = ":memory:"
MARKER_TABLE = "ocw_meta"
DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB file (after an 8-byte checksum)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^(md|motherduck|postgres|postgresql):", re.IGNORECASE)


def _bad(path, why: str) -> BadDatabasePath:
    """The one refusal line; a `user:password@` in the value is masked first."""
    return BadDatabasePath(f"cannot use {mask_credentials(path)!r} as the ocw database: {why}")


def check_path(value) -> str:
    """The database path a raw value names, or BadDatabasePath (one line) saying why
    it cannot be one. Creates nothing. `":memory:"` passes only when asked for
    in so many words; `~` is expanded (DuckDB would make a folder named `~`)."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise _bad(value, "give a file path as text (str or pathlib.Path)")
    raw = os.fspath(value)
    if not isinstance(raw, str):
        raise _bad(value, "give a file path as text (str or pathlib.Path)")
    if not raw.strip():
        raise _bad(raw, "the path is empty (an in-memory database would lose everything at exit;"
                        " ask for ':memory:' explicitly if that is what you want)")
    if raw == MEMORY:
        return raw
    if "\x00" in raw:
        raise _bad(raw, "the path contains a NUL character")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(raw, "the path contains characters that are not valid Unicode") from None
    if _URL.match(raw) or has_credentials(raw):
        # A PostgreSQL URL never gets here (ocw.conversation.sessions.open_backend routes it first):
        # this is one with a slash missing, no scheme, or another scheme. Taken for a file,
        # DuckDB would read `me:` as an extension's name, quote the whole value (password
        # included) and make the folders of the path.
        from ocw.store.postgres.url import redact

        raise _bad(redact(raw), "it is a URL ocw cannot use; give a DuckDB file path, or a PostgreSQL database"
                                " as postgresql://user@host/database")
    path = os.path.expanduser(raw)
    if path.endswith(("/", os.sep)):
        raise _bad(raw, "it names a folder; add a file name such as ocw.duckdb")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:  # ENOTDIR: a parent is a regular file; ELOOP, EACCES, ...
        st = None
        if e.errno != errno.ENOTDIR:
            raise _bad(raw, e.strerror or str(e)) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _bad(raw, "it is a directory; add a file name such as ocw.duckdb")
        if not stat.S_ISREG(st.st_mode):
            raise _bad(raw, "it is not a regular file (a device, a pipe or a socket)")
        if st.st_size:
            _check_duckdb_header(path, raw)
        return path
    parent = _nearest_existing(os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(parent):
        raise _bad(raw, f"{parent} is a file, not a folder")
    return path


def _nearest_existing(folder: str) -> str:
    while not os.path.lexists(folder):
        up = os.path.dirname(folder)
        if up == folder:
            break
        folder = up
    return folder


def _check_duckdb_header(path: str, raw: str) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as e:
        raise _bad(raw, f"cannot read it ({e.strerror or e})") from None
    if head[8:12] != DUCKDB_MAGIC:
        raise _bad(raw, "the file exists and is not a DuckDB database; ocw leaves it alone")


def is_existing_database(path: str) -> bool:
    """A file with bytes in it: it must be classified (read-only) before any write."""
    return path != MEMORY and os.path.isfile(path) and os.path.getsize(path) > 0


def make_folder(path: str) -> None:
    """Just before DuckDB creates the file: make the folder it goes in."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise _bad(path, f"cannot create the folder {folder} ({e.strerror or e})") from None


def replace_empty_file(path: str) -> None:
    """A zero-byte file (`touch`, `mkstemp`) is taken as a new database: DuckDB cannot
    open one, so it goes and DuckDB creates the file in its place. The caller holds
    the file's lock, so no other kernel is creating it meanwhile."""
    try:
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError as e:
        raise _bad(path, f"cannot replace the empty file ({e.strerror or e})") from None


# -- the database -------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    kind: str  # "new" | "ocw" (marked) | "legacy" (an earlier ocw's exact schema)
    version: int  # the schema version the file is at


def _objects(con) -> tuple[set, set, set]:
    db = con.execute("SELECT current_database()").fetchone()[0]
    tables = {(s, t) for s, t in con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ? AND NOT temporary", [db]
    ).fetchall()}
    views = {(s, v) for s, v in con.execute(
        "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal"
        " AND NOT temporary", [db]).fetchall()}
    sequences = {(s, q) for s, q in con.execute(
        "SELECT schema_name, sequence_name FROM duckdb_sequences() WHERE database_name = ? AND NOT temporary",
        [db]).fetchall()}
    return tables, views, sequences


def _columns(con, table: str) -> list[tuple[str, str]]:
    return [tuple(r) for r in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_catalog = current_database() AND table_schema = 'main' AND table_name = ?"
        " ORDER BY ordinal_position", [table]).fetchall()]


@lru_cache(maxsize=None)
def legacy_schema(version: int) -> tuple:
    """What an earlier ocw's file at `version` holds (tables with their columns, and
    sequences), found by replaying those migrations into an in-memory database."""
    import duckdb

    from ocw.store.duckdb.migrations import MIGRATIONS

    con = duckdb.connect(MEMORY)
    try:
        con.execute("CREATE TABLE schema_version (version INTEGER)")
        for step in MIGRATIONS[:version]:
            step(con)
        tables, _, sequences = _objects(con)
        return (tuple(sorted((t, tuple(_columns(con, t))) for _, t in tables)), frozenset(q for _, q in sequences))
    finally:
        con.close()


def classify(con, path: str = "") -> Claim:
    """Is the database behind `con` ocw's to write? SELECTs only. Raises
    ForeignDatabase or NewerSchema (one line) when it is not."""
    from ocw.store.duckdb.migrations import LEGACY_VERSIONS, SCHEMA_VERSION

    tables, views, sequences = _objects(con)
    if not (tables or views or sequences):
        return Claim("new", 0)
    names = {t for s, t in tables if s == "main"}
    where = path or "the database"
    if MARKER_TABLE in names and _columns(con, MARKER_TABLE) == [("key", "VARCHAR"), ("value", "VARCHAR")]:
        meta = dict(con.execute(f"SELECT key, value FROM {MARKER_TABLE}").fetchall())
        version = marker_version(meta, SCHEMA_VERSION, where, "schema", "another file")
        if version is not None:
            return Claim("ocw", version)
    version = _legacy_version(con, tables, views, sequences, LEGACY_VERSIONS)
    if version is not None:
        return Claim("legacy", version)
    shown = ", ".join(sorted(t if s == "main" else f"{s}.{t}" for s, t in tables | views)[:4]) or "sequences"
    raise ForeignDatabase(f"{where} is another application's DuckDB database (it holds {shown}); "
                          "ocw did not write it and leaves it untouched")


def classify_file(path: str) -> Claim | None:
    """classify() on a file by itself, for `%config Ocw.db` (read-only, no lock wait):
    None when it cannot be looked at now (another process holds it); the store
    checks again when it opens the file."""
    import duckdb

    try:
        try:
            con = duckdb.connect(path, read_only=True, config=DUCKDB_CONFIG)
        except duckdb.ConnectionException:  # open read-write elsewhere in this process: share it
            con = duckdb.connect(path, config=DUCKDB_CONFIG)
    except duckdb.Error as e:
        if "lock" in str(e).lower() or "different configuration" in str(e):
            return None
        raise _bad(path, str(e).splitlines()[0]) from None
    try:
        return classify(con, path)
    finally:
        con.close()


def _legacy_version(con, tables, views, sequences, versions) -> int | None:
    """The schema version of a file an earlier ocw wrote (no marker yet), if the file
    has exactly that version's tables, columns and sequences; else None."""
    if views or any(s != "main" for s, _ in tables | sequences):
        return None
    if _columns(con, "schema_version") != [("version", "INTEGER")]:
        return None
    found = [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]
    version = len(found)
    if found != list(range(1, version + 1)) or version not in versions:
        return None
    want_tables, want_sequences = legacy_schema(version)
    have = tuple(sorted((t, tuple(_columns(con, t))) for _, t in tables))
    if have != want_tables or {q for _, q in sequences} != set(want_sequences):
        return None
    return version


def migrate(con, target: int | None = None, *, path: str = "") -> int:
    """Claim the database behind `con`, then bring it up to `target` (the newest
    schema by default); returns the version it started from. Refuses
    (ForeignDatabase, NewerSchema) before writing anything to a file that is not
    ocw's: the claim comes first, in this one entry, so no caller can skip it."""
    from ocw.store.duckdb.migrations import SCHEMA_VERSION, upgrade

    classify(con, path)
    return upgrade(con, SCHEMA_VERSION if target is None else target)
