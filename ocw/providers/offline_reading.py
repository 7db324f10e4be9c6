"""The offline model's reading of text: sentences, content terms, keywords and identifiers.

Pure: text in, readings out. A summary request is read line by line, each line once per
kernel (ocw/text/memo.py) — ahead of the compaction when the read-ahead
(ocw/conversation/read_ahead.py) has seen its message — and the extractive summary
(offline_summary.py) chooses from what was read. The chat digest reads the same
sentences and keywords.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter

from ocw.text.memo import TEXT_BOUND, Memo
from ocw.text.prompts import PRUNED_STUB_OPEN

PREFIX = "(offline model) "  # every answer of the offline model starts with it
HEADER = f"{PREFIX}Summary of the earlier conversation (extractive)."
LABELS = ("Key points:", "Identifiers:")
_OWN_LINES = (HEADER, *LABELS)
_INSTRUCTION = re.compile(r"\W*(please\s+)?(summari[sz]e|write a summary)\b", re.I)

_STOP = frozenset(
    """a an the and or but if then else of to in on at by for with from into onto over under about as is are was
    were be been being do does did done have has had having it its this that these those there here i you he she we
    they me him her us them my your our their mine yours what which who whom whose when where why how all any both
    each few more most other some such no nor not only own same so than too very can could will would shall should
    may might must just also please let lets want need use using used get got make made like one two see now new
    okay ok yes hi hello thanks thank user assistant tool""".split()
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[-./][A-Za-z0-9_]+)*|\d+(?:\.\d+)?")
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'`(\[A-Z0-9])")
_URL = re.compile(r"https?://[^\s<>()\[\]\"'`]+")
_IDENT_PATTERNS = [
    re.compile(r"`([^`\n]{1,80})`"),  # backticked names (kept with their backticks)
    re.compile(r"(?<![\w/.])(?:[\w.-]+/)+[\w.-]+|(?<![\w/.])[\w-]+\.(?:py|ipynb|js|ts|json|txt|md|csv|toml|ya?ml"
               r"|sql|duckdb|html|css|sh|cfg|ini|parquet|log|rs|go|c|h|cpp)\b"),  # file paths
    re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:%|(?:ms|s|sec|secs|seconds|min|mins|minutes|h|hrs|hours|days|weeks"
               r"|KB|MB|GB|TB|KiB|MiB|GiB|kB|B|tokens|px|k|x|°C|USD|EUR)\b)"),  # numbers with units
    re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)\b"),  # ErrorNames
    re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b"),  # ticket ids like ABC-123
]


def sentences(text: str) -> list[str]:
    return [s for s, _ in sentence_spans(text)]


def sentence_spans(text: str) -> list[tuple[str, int]]:
    """Each sentence of `text` (its lines split after ".", "!" or "?", each piece stripped of
    whitespace and list marks, kept from three characters on) and where it starts in `text`."""
    out = []
    at = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")  # the line, without its end
        stripped = body.strip()
        start = at + len(body) - len(body.lstrip())
        cut = 0
        for m in [*_SENT_SPLIT.finditer(stripped), None]:
            piece = stripped[cut:m.start() if m else len(stripped)]
            s = piece.strip(" \t-*#>")
            if len(s) >= 3:
                out.append((s, start + cut + len(piece) - len(piece.lstrip(" \t-*#>"))))
            if m:
                cut = m.end()
        at += len(line)
    return out


def terms(text: str) -> list[str]:
    return [w for w in map(str.lower, _WORD.findall(text)) if len(w) > 2 and w not in _STOP]


# What any identifier above holds: a backtick, a slash (URLs, paths), a digit (numbers with
# units, ticket ids), a dot before a letter (file.ext) or an error name's ending. Text
# without one names none, and most sentences of a conversation are such text: the
# summarizer reads every sentence, so it skips the seven searches for them.
_IDENT_HINT = re.compile(r"[`/\d]|\.[A-Za-z]|Error|Exception|Warning")


_EXT_DOT = re.compile(_IDENT_PATTERNS[1].pattern.rsplit("[\\w-]+", 1)[1])  # r"\.(?:py|…)\b"
_DIGIT = re.compile(r"\d")
# What each pattern cannot match without (searched in the text the pattern reads, the URLs
# blanked): a backtick; a slash or a file extension after a dot; a digit; an error
# name's ending; a ticket id's dash. A pattern whose need is absent finds nothing, so
# skipping it changes no answer, and most sentences lack most of them.
_IDENT_NEEDS = (
    lambda t: "`" in t,
    lambda t: "/" in t or _EXT_DOT.search(t) is not None,
    lambda t: _DIGIT.search(t) is not None,
    lambda t: "Error" in t or "Exception" in t or "Warning" in t,
    lambda t: "-" in t,
)


_QUANTITY = _IDENT_PATTERNS[2]


def _lines(text: str) -> list[tuple[int, str]]:
    r"""(offset, line) of each line of `text`. A match of every pattern but the quantities'
    (whose `\s?` may be a newline) lies within one line, and searching a line as
    `finditer(text, start, end)` reads its edges as the whole text does (a lookbehind
    sees the newline before, `\b` at the end sees what a newline gives), so a pattern's
    matches are its matches in the lines that hold what it needs."""
    out, at = [], 0
    for line in text.split("\n"):
        out.append((at, line))
        at += len(line) + 1
    return out


def identifiers(text: str) -> list[str]:
    """Identifiers worth keeping verbatim, in order of first appearance, no duplicates."""
    return distinct(_found(text))


def _found(text: str) -> list[tuple[int, int, str]]:
    """(start, end, token) of each identifier match in `text`, ordered by start."""
    if not _IDENT_HINT.search(text):
        return []
    found: list[tuple[int, int, str]] = []
    rest = text
    if "http" in text:
        for m in _URL.finditer(text):
            found.append((m.start(), m.end(), m.group(0).rstrip(".,;:!?")))
        rest = _URL.sub(lambda m: " " * len(m.group(0)), text)  # paths inside URLs are not paths
    lines = _lines(rest) if "\n" in rest else None
    for pat, needs in zip(_IDENT_PATTERNS, _IDENT_NEEDS):
        if not needs(rest):
            continue
        if lines is None or pat is _QUANTITY:
            matches = pat.finditer(rest)
        else:  # only the lines that hold what the pattern needs (the same matches: see _lines)
            matches = (m for start, line in lines if needs(line) for m in pat.finditer(rest, start, start + len(line)))
        for m in matches:
            tok = m.group(0).rstrip(".,;:!?") if not m.group(0).startswith("`") else m.group(0)
            if tok.strip("`").strip():
                found.append((m.start(), m.end(), tok))
    return sorted(found, key=lambda f: f[0])


def distinct(found: list[tuple[int, int, str]]) -> list[str]:
    seen: set[str] = set()  # bare forms: a backticked name and its bare form are one
    out = []
    for _, _, tok in found:
        if tok.strip("`") not in seen:
            seen.add(tok.strip("`"))
            out.append(tok)
    return out


def sentence_identifiers(found: list[tuple[int, int, str]], spans: list[tuple[str, int]]) -> list[list[str]]:
    """`identifiers(s)` for each sentence (s, start) of a text, read from `found` (`_found` of
    that text) instead of matching each sentence again. Why the same: a sentence stands between a line's
    start, whitespace or list marks ("-*#>") — none a word character, "/" or "." — so every
    lookbehind and word boundary at its edges reads as at a string's edges, and the search
    inside it runs as in the sentence alone once no match reaches across an edge. A
    sentence that a match reaches across (a path taking the list mark before it, a
    backticked span running over a sentence break) is matched on its own."""
    starts = [f[0] for f in found]
    reach, furthest = [], -1  # reach[k]: the furthest end of found[:k]
    for f in found:
        reach.append(furthest)
        furthest = max(furthest, f[1])
    reach.append(furthest)
    out = []
    for s, a in spans:
        b = a + len(s)
        lo, hi = bisect_left(starts, a), bisect_left(starts, b)
        crossed = reach[lo] > a or any(f[1] > b for f in found[lo:hi])
        out.append(identifiers(s) if crossed else distinct(found[lo:hi]))
    return out


def keywords(text: str, n: int = 5) -> list[str]:
    """Most frequent content words, ties broken by first appearance."""
    words = [m.group(0) for m in _WORD.finditer(text)]
    words = [w for w in words if len(w) > 2 and w.lower() not in _STOP]
    counts = Counter(w.lower() for w in words)
    first: dict[str, tuple[int, str]] = {}
    for i, w in enumerate(words):
        first.setdefault(w.lower(), (i, w))  # shown as first written
    return [first[t][1] for t in sorted(counts, key=lambda t: (-counts[t], first[t][0]))[:n]]


_WRAPPER = re.compile(r"^\s*(</?(previous-summary|new-turns)>|\(none\))\s*$")
_ROLE_MARK = re.compile(r"^\[(user|assistant|tool|system|llm)(:[\w/]+)?\]\s*")
_OWN_STUB = re.compile(re.escape(PRUNED_STUB_OPEN) + r"[^\]]*\]|\[… [\d,]+ of [\d,]+ tokens cut[^\]]*\]")
_OWN_DIGEST = re.compile(r"\(offline model\)|^\s*(\[assistant\]\s*)?It is \d+ tokens long and begins")


def readable(text: str) -> str:
    """`text` as the summarizer reads it: a previous summary as plain sentences (its
    header and labels dropped); without the request's wrapper tags, transcript role
    markers, this model's own digests, ocw's prune stubs and cut notes (their figures
    are not the conversation's). Each pattern runs only on a line holding the literal
    it cannot match without ("<" or "(none)", "(offline model)" or "It is ", a leading
    "[", the stub's opening): most lines hold none, and the answer is the same."""
    return "\n".join(ln for ln in map(_readable_line, text.splitlines()) if ln is not None)


# What a line of a summary request is to the summarizer, kept for the kernel's life
# (ocw/text/memo.py): a raw line's readable form, and a readable line's sentences (with
# offsets in the line), each sentence's content terms and identifiers, and the line's
# identifier matches. A line is read once per kernel — ahead of the compaction when the
# read-ahead (ocw/conversation/read_ahead.py) has seen its message.
_READABLE, _LINES = Memo(TEXT_BOUND), Memo(TEXT_BOUND)  # characters of lines


def _readable_line(ln: str):
    """`readable` of one line (no line break in it): None when it is dropped."""
    if (ln.strip().startswith(_OWN_LINES) or (("<" in ln or "(none)" in ln) and _WRAPPER.match(ln))
            or (("(offline model)" in ln or "It is " in ln) and _OWN_DIGEST.search(ln))):
        return None
    if ln.startswith("["):
        ln = _ROLE_MARK.sub("", ln)
    if PRUNED_STUB_OPEN in ln or "[… " in ln:
        ln = _OWN_STUB.sub(" ", ln)
    return ln


def _line_reading(line: str) -> tuple:
    r"""(sentence spans, identifier matches, each sentence's identifiers, each one's terms) of a
    readable line. Why a line alone reads as it does in the whole text: a sentence never spans
    a line break, and no identifier pattern crosses one but a quantity's `\s?` (a text where
    one does is read whole, `_crosses_lines`); each pattern's edges read a line break as a
    string's edge."""
    spans = sentence_spans(line)
    found = _found(line)
    notes = [_sentence_notes(s) for s, _ in spans]
    return spans, found, sentence_identifiers(found, spans), [t for t, _ in notes], [a for _, a in notes]


def _sentence_notes(sentence: str) -> tuple[frozenset, bool]:
    """A sentence's content terms, and whether it asks for a summary (never summarized)."""
    return frozenset(terms(sentence)), _INSTRUCTION.match(sentence) is not None


def _readable_lines(text: str) -> list[str]:
    lines = (_READABLE.get_or(raw, lambda: _readable_line(raw), len(raw) + 1) for raw in text.splitlines())
    return [line for line in lines if line is not None]


_UNIT_LINE = re.compile(r"\n" + _QUANTITY.pattern.split(r"\s?", 1)[1])  # a line that starts with a unit


def _crossing(text: str) -> bool:
    """A quantity across a line break (a digit, a newline, a unit): searched from the
    newlines, a literal the scan skips to."""
    return any(m.start() and _DIGIT.match(text, m.start() - 1) for m in _UNIT_LINE.finditer(text))


def _read_lines(lines: list[str]) -> None:
    """Keep `_line_reading` of each of `lines` (readable, distinct), read as one text and
    cut at the line breaks: one pass of each pattern instead of one per line. The same
    readings where no quantity crosses a break of the joined text (else: line by line)."""
    joined = "\n".join(lines)
    if _crossing(joined):
        for line in lines:
            _LINES.keep(line, _line_reading(line), len(line) + 1)
        return
    spans, found = sentence_spans(joined), _found(joined)
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    per: list[tuple[list, list, list, list, list]] = [([], [], [], [], []) for _ in lines]
    for (sent, a), ids in zip(spans, sentence_identifiers(found, spans)):
        k = bisect_right(starts, a) - 1
        per[k][0].append((sent, a - starts[k]))
        per[k][2].append(ids)
        sent_terms, asks = _sentence_notes(sent)
        per[k][3].append(sent_terms)
        per[k][4].append(asks)
    for a, b, tok in found:
        k = bisect_right(starts, a) - 1
        per[k][1].append((a - starts[k], b - starts[k], tok))
    for line, reading in zip(lines, per):
        _LINES.keep(line, reading, len(line) + 1)


def read_lines(text: str) -> list[tuple]:
    """Read the lines of `text` (a message's transcript line) not read yet — the read-ahead —
    and return their readings (sentence spans, identifier matches, …)."""
    lines = [line for line in dict.fromkeys(_readable_lines(text)) if line not in _LINES]
    if lines:
        _read_lines(lines)
    return [_LINES.get(line) or _line_reading(line) for line in lines]


def reading(text: str):
    """(body, [(sentence, start)], found, [identifiers], [terms]) of `text` as the summarizer
    reads it, each sentence once (where it first stands), instructions to summarize left out."""
    lines = _readable_lines(text)
    body = "\n".join(lines)
    if _crossing(body):  # rare: read as one text
        readings = [_line_reading(body)]  # (a line reading's rules read a whole text as well)
        offsets = [0]
    else:
        missing = [line for line in dict.fromkeys(lines) if line not in _LINES]
        if missing:
            _read_lines(missing)
        readings, offsets, at = [], [], 0
        for line in lines:
            readings.append(_LINES.get(line) or _line_reading(line))  # (dropped meanwhile: read again)
            offsets.append(at)
            at += len(line) + 1
    first: dict[str, int] = {}
    spans, found, idents, terms = [], [], [], []
    for (l_spans, l_found, l_idents, l_terms, l_asks), at in zip(readings, offsets):
        found += [(a + at, b + at, t) for a, b, t in l_found] if at else l_found
        for (s, start), ids, ts, asks in zip(l_spans, l_idents, l_terms, l_asks):
            if not asks and s not in first:
                first[s] = start + at
                spans.append((s, start + at))
                idents.append(ids)
                terms.append(ts)
    return body, spans, found, idents, terms
