"""The configuration every DuckDB connection of this process opens with.

One dict for all of them, because DuckDB refuses a second connection to a file
with a different configuration; the file hand-over (db.py) and the ownership
check (ownership.py) both read it here, so neither imports the other for it.
"""
from __future__ import annotations

# No code path may download anything at run time (DuckDB would fetch extensions).
DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
