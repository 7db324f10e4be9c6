"""The deterministic facts pass: identifiers a summary must not lose.

Summaries paraphrase; paraphrase loses the exact strings a user needs later —
a path, a URL, an id, `a_function`, 250 ms, KeyError. After the summarizer
answers, every such identifier from its input that its text omits is appended
as a compact list, within a cap. Because the list is part of the summary text,
the next (rolling) compaction sees it as input and carries it on.
"""
from __future__ import annotations

import re

from ocw.text.tokens import count_text
from ocw.text.focus import focused_first

_PATTERNS = [
    r"https?://[^\s<>\"'`)\]]+",  # URLs
    r"`[^`\n]{1,80}`",  # names in backticks
    r"(?:~|\.{1,2})?(?:/[\w.@-]+){2,}/?",  # absolute/relative paths with 2+ parts
    r"\b[\w.-]+/[\w.@/-]*\w",  # relative paths like src/app.py
    r"\b[\w-]+\.(?:py|ipynb|js|ts|tsx|json|md|txt|csv|tsv|parquet|yaml|yml|toml|sql|sh|rs|go|java|c|h|cpp|html|css|log|duckdb|db)\b",
    r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)\b",  # error names
    r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b",  # snake_case names: functions, tables, columns, tests
    r"\b(?:[a-z0-9-]+\.)+(?:com|org|net|io|dev|ai|app|edu|gov|co|uk|de|cn|jp|fr)\b",  # host names
    r"\b[A-Z][A-Z0-9]{1,9}-\d+\b",  # ticket ids: ABC-123
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",  # uuids
    r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",  # hashes
    r"#\d{2,}\b",  # issue numbers
    r"\b\d+(?:[.,]\d+)?\s?(?:ms|µs|ns|s|sec|secs|min|mins|h|hrs|KB|MB|GB|TB|KiB|MiB|GiB|kB|%|px|GHz|MHz|°C|tokens|rows|req/s)(?![\w])",
]
_RX = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))

FACTS_HEADER = "Key identifiers:"


def extract_identifiers(text: str) -> list[str]:
    """Identifiers in order of first appearance, deduplicated."""
    seen: dict[str, None] = {}
    for m in _RX.finditer(text):
        ident = m.group(0).rstrip(".,;:")
        if len(ident) >= 3 and ident not in seen:
            seen[ident] = None
    # A path inside a URL or a backticked name adds nothing; "0 ms" inside "10 ms" does.
    idents = list(seen)
    wrappers = [j for j in idents if j.startswith(("http", "`"))]
    return [i for i in idents if not any(i != j and i in j for j in wrappers)]


def _present(ident: str, text: str) -> bool:
    bare = ident.strip("`")
    return re.search(r"(?<![\w.])" + re.escape(bare) + r"(?![\w])", text) is not None


def missing_identifiers(source: str, summary: str) -> list[str]:
    return [i for i in extract_identifiers(source) if not _present(i, summary)]


def append_facts(summary: str, source: str, cap_tokens: int, encoding: str, focus: str | None = None) -> str:
    """Append identifiers from `source` that `summary` omits, within `cap_tokens`;
    those of the kinds a `focus` names ("keep the file paths") come first."""
    missing = focused_first(missing_identifiers(source, summary), focus)
    if not missing or cap_tokens <= 0:
        return summary
    chosen: list[str] = []
    used = count_text(FACTS_HEADER, encoding) + 2
    for ident in missing:
        cost = count_text(ident, encoding) + 1
        if used + cost > cap_tokens:
            continue  # skip a long one; a shorter one may still fit
        chosen.append(ident)
        used += cost
    if not chosen:
        return summary
    return summary.rstrip() + f"\n\n{FACTS_HEADER} " + "; ".join(chosen)
