"""The deterministic memory pass: what the folded turns say, as memory events.

It reads sentences, not fixed phrasings: a setting is any "name … value" a
user sets, changes, bumps or states ("set batch size to 64", "lr: 3e-4", "the
p95 latency is now 741 ms", "use 8 workers"; the grammar, a question answered
in the next turn included, is ocw/context/memory_settings.py); an instruction is
a standing cue ("from now on", "always", "every time", "for the rest of this
project"); a decision chooses one thing over another ("A over B", "between A and
B, A", "A, not B"); a TODO is what is still to do or to answer;
a retraction or a closing names what it ends. Only the user's words make
instructions, decisions, settings, TODOs and retractions; tool output and the
user's words feed the working set. ocw's own text (summary and memory blocks,
prune stubs, system notes, the offline model's digests, identifier lists) is
never read: `own_text` filters it out, so nothing ocw wrote is harvested back.

Pure; the events go to `memory.merge`.
"""
from __future__ import annotations

import re

from ocw.context.memory import Event, Item, norm_key
from ocw.context.memory_settings import BAD_KEYS, TOKEN, answer_value, asked_key, settings
from ocw.text.fold import cased, fold
from ocw.text.memo import TEXT_BOUND, Memo
from ocw.text.prompts import SUMMARY_PREFIX, SYSTEM_NOTE_PREFIX

_OWN_PREFIXES = ("(offline model)", "[old tool output pruned:", SYSTEM_NOTE_PREFIX.strip(), SUMMARY_PREFIX.strip(),
                 "Key identifiers:", "Identifiers:", "[Session memory:", "[… ")
_OWN_LINE = re.compile(r"\[… [\d,]+ of [\d,]+ tokens cut from this tool result[^\]]*\]|\[old tool output pruned:[^\]]*\]")


_LISTS = ("Key identifiers:", "Identifiers:")


def own_text(line: str, keep_lists: bool = False) -> bool:
    """A line ocw wrote itself (never a source of facts). `keep_lists`: the previous
    summary's identifier lists are kept (the facts pass carries them on)."""
    s = line.strip()
    return s.startswith(_OWN_PREFIXES) and not (keep_lists and s.startswith(_LISTS))


def clean(text: str, keep_lists: bool = False) -> str:
    """`text` without ocw's own lines and stubs. Most texts hold none, found by a search for
    each prefix and one for a line break but "\\n", in C: such a text is its own clean form
    (its lines split and joined again — without a line break but "\\n", only a last "\\n"
    is lost)."""
    if not any(p in text for p in _OWN_PREFIXES) and not _OTHER_BREAK.search(text):  # (each stub starts with one)
        return text[:-1] if text.endswith("\n") else text
    return "\n".join(_OWN_LINE.sub(" ", ln) for ln in text.splitlines() if not own_text(ln, keep_lists))


# The line breaks other than "\n" that `splitlines` cuts at.
_OTHER_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


_TOKEN = TOKEN
_BAD_KEYS = BAD_KEYS

_INSTRUCTION = re.compile(r"\b(?:from now on|going forward|in future|in the future|always|never|i prefer|i'd prefer|"
                          r"every time|each time|whenever|by default|as a rule|at all times|from here on|"
                          r"for the rest of (?:this|the|our)|until i say otherwise|in every (?:answer|reply|response)|"
                          r"i would prefer|please (?:always|keep|don't|do not|never|use|write|answer|reply|respond)|"
                          r"don't ever|do not ever|make sure (?:you|to) always|i want you to|"
                          r"(?:answer|reply|respond|write) (?:only )?in (?:english|chinese|french|german|spanish|japanese))\b",
                          re.I)
_LANG = re.compile(r"\b(?:in|into)\s+(English|Chinese|French|German|Spanish|Japanese|Korean|Italian)\b", re.I)
_DECISION = re.compile(rf"\b(?:we(?:'ll| will| are going to|'re going to)|let's|lets|i(?:'ll| will)|decided to|"
                       rf"decision:|we decided to|i decided to|we chose to|go with|we'll go with)?\s*"
                       rf"(?:go with|use|choose|chose|pick|picked|adopt|stick with|switch to|going with|keep)\s+"
                       rf"(?P<a>{_TOKEN}(?:\s[\w.-]+)?)\s+(?:over|instead of|rather than|and not)\s+(?P<b>{_TOKEN})", re.I)
# "between polars and pandas, we take polars"; "polars, not pandas"; "prefer polars to pandas"; "polars beats pandas"
_CHOICE = re.compile(rf"\bbetween\s+(?P<x>{_TOKEN})\s+and\s+(?P<y>{_TOKEN})\s*,?\s*(?:(?:we|i|let's|lets)(?:'ll| will)?\s+)?"
                     rf"(?:take|pick|choose|go with|use|prefer|keep|want)\s+(?P<a>{_TOKEN})"
                     rf"|^(?:(?:we|i|let's|lets)(?:'ll| will)?\s+)?(?:(?:use|take|pick|choose|keep)\s+)?(?P<a2>{_TOKEN})\s*[,—-]+\s*"
                     rf"not\s+(?P<b2>{_TOKEN})|\bprefer\s+(?P<a3>{_TOKEN})\s+(?:to|over)\s+(?P<b3>{_TOKEN})"
                     rf"|(?P<a4>{_TOKEN})\s+(?:beats|wins over|replaces)\s+(?P<b4>{_TOKEN})", re.I)
_TODO = re.compile(r"(?:\btodo\b:?|\b(?:we|i) still (?:need|have) to\b|\bstill to do:?|\bremember to\b|"
                   r"\bstill (?:pending|open|outstanding):?|\bpending:|\baction item:?|\bfollow[- ]up:|"
                   r"\b(?:at some point|eventually|later on|before we (?:finish|wrap up|ship)),? (?:we|i) (?:have|need|must|"
                   r"should|ought) to\b|\b(?:we|i) (?:have|need) yet to\b|\b(?:we|i) (?:have to|must)\b|"
                   r"\bdon't forget to\b|\bdo not forget to\b|\bopen question:?|\bnext step:?|\blater,? (?:we should|let's)\b|"
                   r"\bwe should (?:also )?(?=\w+ .* later)|\bwe need to\b|\bneeds? to be (?:done|checked|fixed)\b:?)"
                   r"\s*(?P<what>[^!?\n]{3,160})", re.I)
_QUESTION = re.compile(r"\b(?:open question|still unclear|we don't know yet|tbd)\b:?\s*(?P<what>[^\n]{3,160})", re.I)
_CLOSE_WORDS = (r"done with|finished|completed|closed|resolved|no need to|no longer need to|"
                r"crossed off|ticked off|checked off|we did|i did|took care of|got to|got around to|wrapped up|"
                r"sorted out")
_CLOSE_STATES = (r"done|finished|fixed|resolved|closed|answered"
                 r"|complete|completed|sorted|handled|taken care of|off the list|off my list")
_CLOSE = re.compile(rf"\b(?:{_CLOSE_WORDS})\s+(?P<what>[^.!?\n,;]{{2,120}})"
                    rf"|(?P<what2>[^.!?\n,;]{{2,80}}?)\s+(?:is|are) (?:now )?(?:{_CLOSE_STATES})\b",
                    re.I)
_RETRACT_VERBS = r"forget(?: about)?|ignore|disregard|scratch|drop|never mind|skip"
_RETRACT_IS = r"is|was|are|looks|seems|turned out to be|turns out to be|isn't|is not|wasn't"
_RETRACT_BAD = (r"corrupt|corrupted|wrong|broken|bogus|invalid|outdated|obsolete|gone|deleted|"
                r"stale|bad|fake|unusable|useless|a typo|a mistake|(?:not )?(?:valid|right|correct|real|a real)")
_RETRACT_NOT = r"does not|doesn't|did not|didn't"
_RETRACT = re.compile(rf"(?<!n't )(?<!not )(?<!never )\b(?:{_RETRACT_VERBS})\s+"
                      rf"(?!to\b|the\b|a\b|that\b|this\b)(?P<a>{_TOKEN})"
                      rf"|(?P<b>{_TOKEN})\s+(?:{_RETRACT_IS}) "
                      rf"(?:actually )?(?:{_RETRACT_BAD})\b"
                      rf"|\bthere (?:is|'s) no (?:such )?(?:column|file|table|field|key|branch|commit)?\s*(?P<c>{_TOKEN})"
                      rf"|(?P<d>{_TOKEN})\s+(?:{_RETRACT_NOT}) exist", re.I)
# What each of the two must find in a sentence before it can match at all — its fixed
# words, with the whitespace its pattern requires beside them — searched first, because
# the patterns themselves try a name or a clause at every position of the sentence (the
# costliest part of the memory pass). No hint, no match: the events are the same.
_CLOSE_HINT = re.compile(rf"(?:{_CLOSE_WORDS})\s|\s(?:is|are) (?:now )?(?:{_CLOSE_STATES})\b", re.I)
_RETRACT_HINT = re.compile(rf"(?:{_RETRACT_VERBS})\s|\s(?:{_RETRACT_IS}) (?:actually )?(?:{_RETRACT_BAD})\b"
                           rf"|there (?:is|'s) no |\s(?:{_RETRACT_NOT}) exist", re.I)

_WORKING = [
    ("url", re.compile(r"https?://[^\s<>\"'`)\]]+")),
    ("commit", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
    ("error", re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception)\b(?::\s*[^\n]{1,80})?")),
    ("shape", re.compile(r"\b(?P<name>[A-Za-z_]\w*)(?:\.shape|\s+(?:has|with|is of|now has)\s+(?:a\s+)?shape)\s*(?:is\s*|of\s*|=\s*|:\s*)?"
                         r"(?P<val>\(\s*\d[\d,]*\s*,\s*\d[\d,]*\s*\))")),
    ("columns", re.compile(r"\b(?P<name>[A-Za-z_]\w*)(?:\.columns|\s+(?:has|with|now has)\s+(?:the\s+)?columns?)\s*(?:are|is|:|=)?\s*"
                           r"(?P<val>`?[A-Za-z_]\w*`?(?:\s*,\s*(?:and\s+)?`?[A-Za-z_]\w*`?){1,12})")),
    ("file", re.compile(r"(?<![\w/.:])(?:~|\.{1,2})?(?:[\w.@-]+/)+[\w.@-]*\w|(?<![\w/.])[\w-]+\.(?:py|ipynb|js|ts|json|"
                        r"csv|tsv|parquet|yaml|yml|toml|sql|sh|md|txt|log|duckdb|db|html)\b")),
]
# The same patterns, searched in a sentence's `fold` as gates: a miss there is a miss in the
# sentence (ocw/text/fold.py says why), found 3–5× faster than under IGNORECASE.
_RETRACT_HINT_F, _CLOSE_HINT_F, _INSTRUCTION_F, _DECISION_F, _TODO_F, _QUESTION_F = map(
    cased, (_RETRACT_HINT, _CLOSE_HINT, _INSTRUCTION, _DECISION, _TODO, _QUESTION))
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_DIGIT = re.compile(r"\d")
_FILE_EXT = re.compile(dict(_WORKING)["file"].pattern.rsplit("[\\w-]+", 1)[1])  # r"\.(?:py|…)\b"
# What each working-set pattern cannot match without: "http"; a digit; an error name's
# ending; "shape"; "column"; a slash or a file extension after a dot. A text without it
# has no match of that kind, so its search is skipped and the items are the same.
_WORKING_NEEDS = {
    "url": lambda t: "http" in t,
    "commit": lambda t: _DIGIT.search(t) is not None,
    "error": lambda t: "Error" in t or "Exception" in t,
    "shape": lambda t: "shape" in t,
    "columns": lambda t: "column" in t,
    "file": lambda t: "/" in t or _FILE_EXT.search(t) is not None,
}


def sentences(text: str) -> list[str]:
    return [s.strip(" \t-*>") for s in _SENT.split(text) if len(s.strip()) >= 3]


def _val(v: str) -> str:
    return v.strip().rstrip(".,;:")


def _decision(s: str, folded: str) -> tuple[str, str] | None:
    """(chosen, rejected) if the sentence chooses one thing over another (`folded`: its `fold`)."""
    d = _DECISION.search(s) if _DECISION_F.search(folded) else None
    if d:
        return _val(d.group("a")), _val(d.group("b"))
    c = _CHOICE.search(s)
    if not c:
        return None
    if c.group("a"):
        a, x, y = (_val(c.group(g)) for g in ("a", "x", "y"))
        return (a, y if a == x else x) if a in (x, y) else None
    for ga, gb in (("a2", "b2"), ("a3", "b3"), ("a4", "b4")):
        if c.group(ga):
            a, b = _val(c.group(ga)), _val(c.group(gb))
            return (a, b) if a.lower() not in BAD_KEYS and b.lower() not in BAD_KEYS else None
    return None


def working_items(text: str, turn: int) -> list[Item]:
    out: list[Item] = []
    seen: set[str] = set()
    taken: list[tuple[int, int]] = []
    for kind, rx in _WORKING:
        if not _WORKING_NEEDS[kind](text):
            continue
        for m in rx.finditer(text):
            if any(a <= m.start() < b for a, b in taken):
                continue  # a path inside a URL, a hash inside a commit line already taken
            if kind in ("shape", "columns"):
                value, key = _val(m.group("val")), f"{kind}:{m.group('name')}"
                detail = f"{m.group('name')} {kind}"
            else:
                value = _val(m.group(0))
                key, detail = f"{kind}:{value}", kind
            if value in seen:  # (every kind matches 3 characters or more: url 8, commit 7, file and columns 3)
                continue
            seen.add(value)
            taken.append((m.start(), m.end()))
            out.append(Item("working", norm_key(key), value, turn, detail=detail))
    return out


def events(turns: list[tuple[int, str, str]]) -> list[Event]:
    """Memory events of (turn, role, text) messages, in order."""
    return _events([(turn, role, clean(raw)) for turn, role, raw in turns])


def _events(turns: list[tuple[int, str, str]]) -> list[Event]:
    """`events` of messages already `clean`ed (`update` reads the clean texts twice); each
    message read once per kernel (`_MESSAGES`), its events stamped with its turn here."""
    out: list[Event] = []
    asked = ""  # the setting the previous message asked about ("what batch size should we use?")
    for turn, role, text in turns:
        found, then = _read(role, text, asked)
        out += [Event(action, turn, None if item is None else Item(*item[:3], turn, *item[3:]), target)
                for action, target, item in found]
        asked = asked if then is None else then
    return out


# What one message says, for the kernel's life (ocw/text/memo.py): keyed by its role, its
# clean text and (for the user's) the setting the message before it asked about — all
# that `_message_events` reads — so a message read ahead (ocw/conversation/read_ahead.py)
# is not read again when its turn is folded. Kept as tuples, never as the Items that
# `merge` and `fit` go on to change.
_MESSAGES = Memo(TEXT_BOUND)


def read_message(role: str, text: str, asked: str) -> str:
    """Read one clean message ahead (the read-ahead); returns what the next message is asked."""
    then = _read(role, text, asked)[1]
    return asked if then is None else then


def _read(role: str, text: str, asked: str) -> tuple[tuple, str | None]:
    key = (role, text, asked if role == "user" else "")
    read = _MESSAGES.get(key)
    return read if read is not None else _MESSAGES.keep(key, _message_events(role, text, asked), len(text) + 1)


def _message_events(role: str, text: str, question: str) -> tuple[tuple, str | None]:
    """(events, what it asks) of one clean message: each event as (action, target, item
    fields but the turn), and the setting the message asks about (None: the one asked
    before stands — a tool's output or an empty message is no answer)."""
    evs = _sentence_events(role, text, question)
    return tuple((e.action, e.target, None if e.item is None else (e.item.kind, e.item.key, e.item.value,
                                                                   e.item.status, e.item.detail)) for e in evs), \
        (None if not text.strip() or role == "tool" else asked_key(text) if role in ("user", "assistant") else "")


def _sentence_events(role: str, text: str, question: str) -> list[Event]:
    """The events of one clean message, `question` what the message before it asked."""
    turn = 0  # each event is stamped with the message's own turn by `_events`
    out: list[Event] = []
    if not text.strip():
        return out
    if role == "tool":
        return [Event("add", turn, i) for i in working_items(text, turn)]
    if role != "user":
        return out  # the model's own words restate; only the user's set what is current
    for n, s in enumerate(sentences(text)):
        if n == 0 and question and answer_value(s):  # across two turns: a bare answer to that question
            out.append(Event("add", turn, Item("setting", question, answer_value(s), turn)))
            continue
        retracted, f = False, fold(s)  # the gates read the folded sentence (ocw/text/fold.py)
        for m in (_RETRACT.finditer(s) if _RETRACT_HINT_F.search(f) else ()):
            target = next(g for g in m.groups() if g).strip("`'\"")
            if target.lower() in _BAD_KEYS:
                continue  # "drop X, it does not exist": "it" retracts nothing
            out.append(Event("retract", turn, target=target))
            retracted = True
        closes = _CLOSE_HINT_F.search(f) is not None
        for m in (_CLOSE.finditer(s) if closes else ()):
            out.append(Event("close", turn, target=(m.group("what") or m.group("what2")).strip()))
        if retracted:
            continue
        if _INSTRUCTION_F.search(f):
            lang = _LANG.search(s)
            key = "language" if lang else norm_key(re.sub(r"\b(always|never|don't|do not|not|please|from now on|"
                                                          r"going forward|i prefer|i'd prefer)\b", " ", s.lower()))[:60]
            out.append(Event("add", turn, Item("instruction", key, s[:240], turn)))
            continue
        choice = _decision(s, f)
        if choice:
            a, b = choice
            out.append(Event("add", turn, Item("decision", norm_key(a), a, turn, detail=b)))
            continue
        t = (_TODO_F.search(f) and _TODO.search(s)) or (_QUESTION_F.search(f) and _QUESTION.search(s))
        if t and not (closes and _CLOSE.search(s)):
            what = _val(t.group("what"))
            out.append(Event("add", turn, Item("todo", norm_key(" ".join(what.split()[:6])), what, turn)))
        out += [Event("add", turn, i) for i in settings(s, turn)]
        out += [Event("add", turn, i) for i in working_items(s, turn)]
    return out


def update(old, turns: list[tuple[int, str, str]], *, budget: int, encoding: str, extra=()):
    """The memory after folding `turns` into `old`: the deterministic events (and
    `extra` events, e.g. a summarizer's structured answer) merged latest-wins,
    grounded in the turns and the old memory, and fitted to `budget` tokens."""
    from ocw.context.memory import Memory, fit, ground, merge

    cleaned = [(turn, role, clean(raw)) for turn, role, raw in turns]
    evs = _events(cleaned)
    source = "\n".join(t for _, _, t in cleaned) + "\n" + "\n".join(
        f"{i.value}\n{i.detail}" for i in old.items)
    # One grounding of all the items at once: `ground` lowers the whole source per call.
    found = {id(i) for i in ground([e.item for e in extra if e.item is not None], source)}
    extra = [e for e in extra if e.item is None or id(e.item) in found]
    new = merge(old, sorted(evs + list(extra), key=lambda e: e.turn))
    kept = {id(i) for i in old.items} | {id(i) for i in ground(new.items, source)}
    new = Memory([i for i in new.items if id(i) in kept], new.evicted)
    return fit(new, budget, encoding)
