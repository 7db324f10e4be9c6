"""What a user asks a summary to keep (`%compact -- keep the file paths`): pure rules.

A focus is free text. Two things in it can steer an extractive pass and a
facts pass without any model: its content terms (a sentence that shares them
ranks first) and the kinds of identifier it names ("paths", "URLs", "errors",
"ids", "numbers", "names": identifiers of those kinds are kept first). A real
model reads the focus itself (ocw/context/engine.py puts it in the summarizer's
system prompt); these rules are what the offline summarizer and the facts pass
do with it, the same for any focus — nothing here knows a particular request.

Invariant: with no focus (None or blank) every function here is the identity
(no terms, no kinds, order unchanged), so an unsteered compaction is exactly
what it was before focus existed.
"""
from __future__ import annotations

import re

MAX_FOCUS_CHARS = 2000  # a focus is an instruction, not a second transcript

# Words that say how to keep, not what: they steer nothing by themselves.
_VERBS = frozenset("""keep keeps kept preserve retain remember mention include list lists summary summarize summarise
    focus care important importantly especially mainly only all every each any the a an of on in to for and or
    with about please must should everything things stuff detail details exact exactly verbatim""".split())

# A word of the focus → the identifier kind it names.
KIND_WORDS = {
    "path": "path", "paths": "path", "file": "path", "files": "path", "filename": "path", "filenames": "path",
    "folder": "path", "folders": "path", "directory": "path", "directories": "path",
    "url": "url", "urls": "url", "link": "url", "links": "url", "endpoint": "url", "endpoints": "url",
    "error": "error", "errors": "error", "exception": "error", "exceptions": "error", "traceback": "error",
    "id": "id", "ids": "id", "ticket": "id", "tickets": "id", "hash": "id", "hashes": "id", "commit": "id",
    "number": "number", "numbers": "number", "figure": "number", "figures": "number", "metric": "number",
    "metrics": "number", "timing": "number", "timings": "number", "size": "number", "sizes": "number",
    "name": "name", "names": "name", "function": "name", "functions": "name", "variable": "name",
    "variables": "name", "table": "name", "tables": "name", "column": "name", "columns": "name",
}

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[-./][A-Za-z0-9_]+)*|\d+(?:\.\d+)?")
_KIND_RX = (
    ("url", re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)),
    ("error", re.compile(r"^`?[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)`?$")),
    ("id", re.compile(r"^(?:#\d+|[A-Z][A-Z0-9]{1,9}-\d+|[0-9a-f]{7,40}|[0-9a-f]{8}-[0-9a-f-]{27})$")),
    ("number", re.compile(r"^\d")),
    ("path", re.compile(r"/|^[\w-]+\.[A-Za-z0-9]{1,8}$")),
    ("name", re.compile(r"^`|_")),
)


def clean(focus: str | None) -> str:
    """The focus as it is used: one line of trimmed text ('' for none)."""
    return " ".join((focus or "").split())


def _stem(word: str) -> str:
    """An English plural to its singular, so "files" meets "file", "boxes" meets
    "box" and "flies" meets "fly" ("ties" is "tie"). Words of 3 letters or fewer, and endings that are not plurals ("class",
    "status", "analysis"), are left as they are; both sides of a match go through
    this, so a rare wrong stem still meets itself."""
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(focus: str | None) -> set[str]:
    """The focus's content terms, stemmed (plural 'paths' matches 'path')."""
    words = (m.group(0) for m in _WORD.finditer(clean(focus)))
    return {_stem(w) for w in words if len(w) > 2 and w.lower() not in _VERBS}


def kinds(focus: str | None) -> set[str]:
    """The identifier kinds the focus names ('file paths' → {'path'})."""
    return {KIND_WORDS[w.lower()] for w in _WORD.findall(clean(focus)) if w.lower() in KIND_WORDS}


def identifier_kind(ident: str) -> str | None:
    """The kind of one identifier (url, error, id, number, path, name), or None."""
    for kind, rx in _KIND_RX:
        if rx.search(ident):
            return kind
    return None


def matches(text: str, focus_terms: set[str]) -> int:
    """How many of the focus's terms `text` contains (stemmed)."""
    if not focus_terms:
        return 0
    return len(focus_terms & {_stem(w) for w in _WORD.findall(text)})


def focused_first(identifiers: list[str], focus: str | None) -> list[str]:
    """Identifiers of the kinds the focus names first, each group in its own order
    (a stable sort: with no focus, the order is unchanged)."""
    wanted = kinds(focus)
    if not wanted:
        return list(identifiers)
    return sorted(identifiers, key=lambda i: identifier_kind(i) not in wanted)
