"""Where ocw keeps its sessions by default (no database import: the configuration
reads it at `%load_ext`)."""
from __future__ import annotations

import os


def default_db_path() -> str:
    """OCW_DB if set, else the per-user data folder: $XDG_DATA_HOME/ocw/ocw.duckdb
    or ~/.local/share/ocw/ocw.duckdb."""
    env = os.environ.get("OCW_DB")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "ocw", "ocw.duckdb")
