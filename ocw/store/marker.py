"""The one rule for ocw's marker rows, shared by the DuckDB file (`ocw_meta`) and
the PostgreSQL schema: whose they are, which schema they state, and a refusal
when a newer ocw wrote them (this one would not know its tables, so it must not
write). Both backends read it here rather than one taking it from the other.
"""
from __future__ import annotations

from ocw._version import __version__
from ocw.text.errors import NewerSchema


def marker_version(meta: dict[str, str], supported: int, where: str, schema: str, elsewhere: str) -> int | None:
    """The schema version ocw's marker rows (`meta`: key -> value) state, or None when
    they are not ocw's or the version is unreadable. Raises NewerSchema when a newer ocw
    wrote them: this one would not know its tables, so it must not write (the DuckDB
    file and the PostgreSQL schema share this rule; `schema` and `elsewhere` name
    theirs in the message)."""
    if meta.get("app") != "ocw":
        return None
    try:
        version = int(meta.get("schema_version", "0"))
    except ValueError:
        return None
    if version > supported:
        needs = meta.get("needs_ocw") or meta.get("written_by") or "a newer version"
        raise NewerSchema(
            f"{where} was written by ocw {meta.get('written_by', '?')} ({schema} {version}); this is ocw "
            f"{__version__} (schema {supported})",
            hint=f"upgrade ocw to {needs} or newer (pip install -U 'ocw>={needs}'), or use {elsewhere}")
    return version if version >= 0 else None
