"""The deterministic facts pass: identifiers a summary must not lose.

Summaries paraphrase; paraphrase loses the exact strings a user needs later —
a path, a URL, an id, `a_function`, 250 ms, KeyError. After the summarizer
answers, every such identifier from its input that its text (and the session
memory beside it) omits is appended as a compact list, within a cap.

Rules (issue 22, item 4), and why they hold:
- A value keeps what it names: a quantity is listed as "p95 latency 741 ms",
  not a bare "741 ms" (`_named` takes the words before it in the source).
- Newest first when room runs out: candidates are ranked by their last
  occurrence in the source, latest first, so `run_20` beats `run_1`.
- Never re-added: values the memory marks superseded or retracted
  (`exclude`) are skipped, whatever the source says.
- Never harvested from ocw's own text: the source is cleaned of prune stubs,
  cut notes, system notes, memory blocks and earlier identifier lists
  (`memory_rules.clean`) before anything is extracted. The previous summary's
  own "Key identifiers:" list is the one exception: it is how identifiers the
  memory does not hold are carried from summary to summary.
"""
from __future__ import annotations

import re

from ocw.text.tokens import count_text
from ocw.text.focus import focused_first
from ocw.context.memory_rules import clean

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


_QUANTITY = re.compile(r"^\d")
_NAME_BEFORE = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*(?: [A-Za-z_][\w.-]*){0,2})\s*(?:\bis now\b|\bis\b|\bwas\b|=|:|"
                          r"\bof\b|\bat\b|\bto\b)\s*$")
_NOT_A_NAME = frozenset("and also or but the a an it this that please remember took takes about around only just "
                        "was is to of at".split())


def _named(ident: str, source: str) -> str:
    """A quantity with the name before its last occurrence ("p95 latency 741 ms")."""
    if not _QUANTITY.match(ident):
        return ident
    at = source.rfind(ident)
    line_start = source.rfind("\n", 0, at) + 1
    m = _NAME_BEFORE.search(source[max(line_start, at - 60):at])
    if not m:
        return ident
    # Only a name written just before the value, with nothing ocw-like in it.
    words = m.group(1).split()
    while words and words[0].lower() in _NOT_A_NAME:
        words.pop(0)
    if not words or any(w.lower() in _NOT_A_NAME for w in words):
        return ident
    return f"{' '.join(words)}: {ident}"


def missing_identifiers(source: str, summary: str) -> list[str]:
    """Identifiers of `source` that `summary` omits, in order of first appearance."""
    return [i for i in extract_identifiers(source) if not _present(i, summary)]


def append_facts(summary: str, source: str, cap_tokens: int, encoding: str, focus: str | None = None,
                 exclude=(), present: str = "") -> str:
    """Append identifiers from `source` that `summary` (and `present`, the memory's
    text) omits, within `cap_tokens`, newest first; those of the kinds a `focus`
    names ("keep the file paths") come first; `exclude` (stale values) never."""
    source = clean(source, keep_lists=True)
    stale = {str(x).strip("`") for x in exclude}
    phrases = [v for v in stale if " " in v]  # a closed TODO's words: its identifiers are stale too
    raw = [i for i in missing_identifiers(source, summary + "\n" + present)
           if i.strip("`") not in stale and not any(_present(i, v) for v in phrases)]
    raw.sort(key=lambda i: -source.rfind(i.strip("`")))  # newest first
    first = {}
    for i in raw:
        first[_named(i, source)] = source.find(i.strip("`"))
    missing = focused_first(list(first), focus)
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
    # Chosen newest first; listed as they came (the focus's kinds first).
    chosen = focused_first(sorted(chosen, key=lambda i: first[i]), focus)
    return summary.rstrip() + f"\n\n{FACTS_HEADER} " + "; ".join(chosen)
