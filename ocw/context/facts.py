"""The deterministic facts pass: identifiers a summary must not lose.

Summaries paraphrase; paraphrase loses the exact strings a user needs later —
a path, a URL, an id, `a_function`, 250 ms, KeyError. After the summarizer
answers, every such identifier from its input that its text (and the session
memory beside it) omits is appended as a compact list, within a cap.

Rules (issue 22, item 4), and why they hold:
- A value keeps what it names: a quantity is listed as "p95 latency 741 ms",
  not a bare "741 ms" (`_named` takes the words before it in the source).
- Newest first when room runs out: candidates are ranked by their last
  mention as themselves in the source (a match of the pass; for a backticked
  name, its bare mentions too), latest first, so `run_20` beats `run_1`, and
  a longer name that contains one (src/app.py for app.py) is its own mention.
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

from ocw.text.tokens import count_kept, count_text, tokens_at_least
from ocw.text.focus import focused_first
from ocw.context.memory_rules import clean
from ocw.text.memo import TEXT_BOUND, Memo

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
# One matcher, the patterns' ordered alternation factored: the nine that start with a word
# boundary share one `\b` (at a position inside a word all nine fail on one test instead of
# nine), and the quantities join them ahead of the issue numbers: an issue number starts
# with "#" and every `\b` pattern with a word character, ".", or "-", so at any position at
# most one of the two can match and their order never decides. Same matches, in the same
# order, as "|".join(_PATTERNS) — tests/context/test_facts.py compares the two.
# The matcher is tried at every position of ~330 KB per compaction, so what fails there
# must fail at once: the paths' optional prefix `(?:~|\.{1,2})?` is written out as four
# branches in the order the greedy optional tries them (~, .., ., none), each starting with
# a literal the engine tests before entering it; and after the shared `\b` a lookahead
# for the one character class all nine start within ([\w.-]) turns away the boundary at a
# word's end. Measured on the compaction benchmark's transcript: 42 → 30 ms.
_BOUNDED = (*range(3, 11), 12)
assert all(_PATTERNS[i].startswith(r"\b") for i in _BOUNDED)
_PATH_PART = r"(?:/[\w.@-]+){2,}/?"
assert _PATTERNS[2] == r"(?:~|\.{1,2})?" + _PATH_PART
_RX = re.compile("|".join(f"(?:{p})" for p in _PATTERNS[:2]) + "|" +
                 "|".join(f"{lead}{_PATH_PART}" for lead in ("~", r"\.\.", r"\.", "")) +
                 r"|\b(?=[\w.-])(?:" + "|".join(f"(?:{_PATTERNS[i][2:]})" for i in _BOUNDED) +
                 f")|(?:{_PATTERNS[11]})")

FACTS_HEADER = "Key identifiers:"
assert _RX.groups == 0  # findall gives whole matches

# No match takes in a newline but a quantity whose `\s?` is one ("250\nms"); every other
# pattern's classes exclude it, none starts with it, and `\b` / `(?![\w])` read a newline
# as they read the text's ends. So, where this finds nothing, the matches of a text are
# its lines' matches in order, and a line read once is not matched again.
_UNIT_LINE = re.compile(r"\n" + _PATTERNS[12].split(r"\s?", 1)[1])  # a line that starts with a unit
_DIGIT = re.compile(r"\d")


def _crosses_lines(text: str) -> bool:
    """A digit, a newline, a unit: searched from the newlines (a literal the scan skips to)."""
    return any(m.start() and _DIGIT.match(text, m.start() - 1) for m in _UNIT_LINE.finditer(text))


# Each line's identifiers, for the kernel's life (ocw/text/memo.py): a compaction reads the
# folded turns for the facts pass and again for what was lost, and the read-ahead reads each
# new line once in the pause after its turn (ocw/conversation/read_ahead.py).
LINE_MATCHES = Memo(TEXT_BOUND)


def _identifiers_in(text: str) -> dict[str, tuple[int, int]]:
    """Each identifier of `text` (a match without its trailing ".,;:", of 3 characters or
    more) and where its first and last matches start, in order of first appearance."""
    found: dict[str, tuple[int, int]] = {}
    for m in _RX.finditer(text):
        ident, at = m.group().rstrip(".,;:"), m.start()
        if len(ident) >= 3:
            first = found.get(ident)
            found[ident] = (at, at) if first is None else (first[0], at)
    return found


def _line_identifiers(line: str) -> dict[str, tuple[int, int]]:
    """`_identifiers_in` a line, once per kernel (`LINE_MATCHES`)."""
    return LINE_MATCHES.get_or(line, lambda: _identifiers_in(line), len(line) + 1)


def read_lines(text: str, encoding: str | None = None) -> None:
    """Read each line of `text` ahead (nothing is returned): its identifiers and its words;
    with `encoding`, the count of each identifier (what the facts pass lists)."""
    if _crosses_lines(text):
        return
    for line in text.split("\n"):
        _line_words(line)  # what was lost looks for identifiers among a kept turn's words
        if line in LINE_MATCHES:
            continue
        for ident in _line_identifiers(line):  # each looked for in the summary: its word runs
            bare = ident.strip("`")
            if bare not in _RUNS:
                _RUNS.keep(bare, _runs(bare), len(bare) + 1)
            if encoding:
                count_kept(ident, encoding)


def located_identifiers(text: str) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """`extract_identifiers(text)` and, for each, where its first and last matches start.
    The facts pass ranks by these: read from the one matching pass, where a search of
    the text for each of ~1,000 identifiers was a third of a compaction's own work. Each
    line is matched once per kernel; its identifiers and their places are merged here."""
    if _crosses_lines(text):  # rare: matched whole
        where = _identifiers_in(text)
    else:
        where: dict[str, tuple[int, int]] = {}
        base = 0
        for line in text.split("\n"):
            for ident, (first_at, last_at) in _line_identifiers(line).items():
                first = where.get(ident)
                where[ident] = (base + first_at, base + last_at) if first is None else (first[0], base + last_at)
            base += len(line) + 1
    # A path inside a URL or a backticked name adds nothing; "0 ms" inside "10 ms" does.
    idents = list(where)
    wrappers = [j for j in idents if j.startswith(("http", "`"))]
    # One search of them all joined turns away what lies in none (no identifier holds a NUL).
    joined = "\0".join(wrappers)
    return [i for i in idents if i not in joined or not any(i != j and i in j for j in wrappers)], where


def extract_identifiers(text: str) -> list[str]:
    """Identifiers in order of first appearance, deduplicated."""
    return located_identifiers(text)[0]


def _present(ident: str, text: str) -> bool:
    """`ident` (without backticks) occurs in `text` as a whole token: nothing of a word or
    a dot before it (0.50 ms is not 50 ms), nothing of a word after it (ABC-12x is not ABC-12)."""
    bare = ident.strip("`")
    return re.search(r"(?<![\w.])" + re.escape(bare) + r"(?![\w])", text) is not None


_WORD_RUN = re.compile(r"\w+")
_RUNS = Memo(TEXT_BOUND // 4)  # an identifier's word runs and their offsets
_WORD_CHAR = re.compile(r"\w")
_LEFT_CHAR = re.compile(r"[\w.]")


def present_in(idents, text: str) -> set[str]:
    """The identifiers of `idents` that `text` names (`_present` of each), with one pass
    over `text` instead of a regex built per identifier. Why it is the same test: where
    `bare` occurs as a whole token, each maximal run of word characters in `bare` is a
    maximal run in `text` too, at the same distance from the token's start (the token's
    own edges are bounded, its inner breaks are its own characters). So an identifier with
    a run that is no word of `text` is not there, and the places where one of its runs (its
    longest) stands hold all of its occurrences: only those are checked with the two
    boundary rules — a search of the whole text for each of ~1,000 identifiers that mostly
    are not there was most of the lost pass. The words are read line by line (no word holds
    a line break), each line's once per kernel (`LINE_WORDS`; a kept turn's lines were read
    ahead, and the new summary's by the facts pass before what was lost asks). One with no
    word character at all takes the regex."""
    lines = text.split("\n")
    words_of = [_line_words(line) for line in lines]
    present = set().union(*words_of)
    wanted: list[tuple[str, str, str, int]] = []  # (identifier, bare, the run looked up, its offset)
    out: set[str] = set()
    for ident in idents:
        bare = ident.strip("`")
        runs = _RUNS.get(bare)
        if runs is None:  # (kept: the facts pass and what was lost ask about the same ones)
            runs = _RUNS.keep(bare, _runs(bare), len(bare) + 1)
        names, run, offset = runs
        if not names:
            if _present(ident, text):
                out.add(ident)
        elif present.issuperset(names):
            wanted.append((ident, bare, run, offset))
    needed = {w[2] for w in wanted}
    at: dict[str, list[int]] = {}  # where each needed run stands (only those)
    base = 0
    for line, words in zip(lines, words_of):
        for run in words.keys() & needed:
            at.setdefault(run, []).extend(base + p for p in words[run])
        base += len(line) + 1
    for ident, bare, run, offset in wanted:
        end = len(bare)
        for p in at[run]:
            start = p - offset
            if (start >= 0 and text.startswith(bare, start) and (start == 0 or not _LEFT_CHAR.match(text, start - 1))
                    and not _WORD_CHAR.match(text, start + end)):
                out.add(ident)
                break
    return out


LINE_WORDS = Memo(TEXT_BOUND)  # each line's words and where they stand in it


def _runs(bare: str) -> tuple[frozenset, str, int]:
    """An identifier's word runs, and its longest run with where it starts in it."""
    runs = [(m.group(), m.start()) for m in _WORD_RUN.finditer(bare)]
    run, offset = max(runs, key=lambda r: len(r[0])) if runs else ("", 0)
    return frozenset(r for r, _ in runs), run, offset


def _line_words(line: str) -> dict[str, list[int]]:
    words = LINE_WORDS.get(line)
    if words is None:
        words = {}
        for m in _WORD_RUN.finditer(line):
            words.setdefault(m.group(), []).append(m.start())
        LINE_WORDS.keep(line, words, len(line) + 1)
    return words


_QUANTITY = re.compile(r"^\d")
_NAME_BEFORE = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*(?: [A-Za-z_][\w.-]*){0,2})\s*(?:\bis now\b|\bis\b|\bwas\b|=|:|"
                          r"\bof\b|\bat\b|\bto\b)\s*$")
_CHUNK = re.compile(r"\S+")
_CONNECTOR_ENDS = ("is now", "is", "was", "=", ":", "of", "at", "to")
_NOT_A_NAME = frozenset("and also or but the a an it this that please remember took takes about around only just "
                        "was is to of at".split())


def _named(ident: str, source: str, at: int | None = None) -> str:
    """A quantity with the name before its last occurrence ("p95 latency 741 ms"); `at`:
    that occurrence, when the caller has found it already."""
    if not _QUANTITY.match(ident):
        return ident
    at = source.rfind(ident) if at is None else at
    line_start = source.rfind("\n", 0, at) + 1
    before = source[max(line_start, at - 60):at]
    # The pattern ends with its connector and `\s*$` (no newline in `before`): without one
    # at the end, it cannot match and its search (costly: a name tried at every word) is skipped.
    if not before.rstrip().endswith(_CONNECTOR_ENDS):
        return ident
    # A match is a name of at most three words, a connector of at most two and whitespace, so it
    # starts within the last five whitespace-separated chunks: the search starts there (its
    # lookbehind still reads the character before, and `$` the end).
    starts = [c.start() for c in _CHUNK.finditer(before)]
    m = _NAME_BEFORE.search(before, starts[-5] if len(starts) > 5 else 0)
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
    idents = extract_identifiers(source)
    named = present_in(idents, summary)
    return [i for i in idents if i not in named]


def _mentions(ident: str, source: str, where: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """Where `ident` is first and last mentioned in `source`: its own matches; for a
    backticked name, every mention of the bare name counts (a name is quoted once and
    then written plain), found by a search — such names are few."""
    if ident.startswith("`"):
        bare = ident.strip("`")
        return source.find(bare), source.rfind(bare)
    return where[ident]


def append_facts(summary: str, source: str, cap_tokens: int, encoding: str, focus: str | None = None,
                 exclude=(), present: str = "") -> str:
    """Append identifiers from `source` that `summary` (and `present`, the memory's
    text) omits, within `cap_tokens`, newest first; those of the kinds a `focus`
    names ("keep the file paths") come first; `exclude` (stale values) never."""
    source = clean(source, keep_lists=True)
    stale = {str(x).strip("`") for x in exclude}
    phrases = [v for v in stale if " " in v]  # a closed TODO's words: its identifiers are stale too
    idents, where = located_identifiers(source)
    named = present_in(idents, summary + "\n" + present)
    raw = [i for i in idents if i not in named and i.strip("`") not in stale]
    in_phrases = set().union(*(present_in(raw, v) for v in phrases))
    raw = [i for i in raw if i not in in_phrases]
    where = {i: _mentions(i, source, where) for i in raw}
    raw.sort(key=lambda i: -where[i][1])  # newest first
    chosen: dict[str, str] = {}  # identifier → its listed form
    used = count_text(FACTS_HEADER, encoding) + 2
    # Newest first, the focus's kinds before the rest — the identifier's kind, not its listed
    # form's: "p95 latency: 741 ms" is a number as much as "741 ms" is.
    for ident in focused_first(raw, focus):
        room = cap_tokens - used
        if room < 2:
            break  # each costs its tokens (one at least) and a separator
        # Named only when it may fit: its listed form holds at least its own runs. A long
        # session offers ~1,000 quantities for ~200 places.
        if tokens_at_least(ident, encoding) + 1 > room:
            continue
        form = _named(ident, source, where[ident][1])
        cost = count_kept(form, encoding) + 1  # (most read ahead with their lines)
        if cost > room:
            continue  # skip a long one; a shorter one may still fit
        chosen[ident] = form
        used += cost
    if not chosen:
        return summary
    # Listed as they came, the focus's kinds first.
    listed = focused_first(sorted(chosen, key=lambda i: where[i][0]), focus)
    return summary.rstrip() + f"\n\n{FACTS_HEADER} " + "; ".join(chosen[i] for i in listed)
