"""Settings in a user's words: which named value a sentence sets, and to what.

A setting is a name and its current value. People state one in many shapes,
and the pass reads the shapes, not a list of sentences:
- a verb that sets: "set / change / bump / make / keep / cap the batch size
  (from 32) to 64", "make the batch size 64", "keep the timeout at 30 s";
- a copula: "batch_size should be / needs to be / is now / = / : 64",
  "the batch size becomes 64";
- a noun phrase: "a batch size of 64", "use 64 for the batch size",
  "take 64 as the batch size", "for the batch size, 64";
- a measurement: "the p95 latency peaked at / came out at / sits around 741 ms";
- a question or a suggestion: "can we make the batch size 64?", "what if the
  batch size were 64?", "how about 64 for the batch size?";
- a pronoun: "the batch size is too small, make it 64";
- across two turns: a question that names a setting ("what batch size should
  we use?", asked by either side) answered by a bare value ("64, please",
  "let's say sixty-four").
A value is a number (digits or words, with a unit) or a `code` span; a verb
form also takes a plain token ("switch the optimizer to adamw"). Keys are
normalized (`memory.norm_key`), so "Batch size", "batch_size" and "the
batch-size" are one setting.

Pure; `settings` returns memory Items, `asked_key` / `answer_value` pair a
question with its answer.
"""
from __future__ import annotations

import re

from ocw.context.memory import Item, norm_key
from ocw.text.fold import cased, fold

_UNITS_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
                "|seventeen|eighteen|nineteen")
_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_NUM_WORDS = (rf"(?:(?:{_TENS})(?:[- ](?:{_UNITS_WORDS}))?|{_UNITS_WORDS}|zero|a dozen|a hundred|a thousand)"
              rf"(?:\s(?:hundred|thousand)(?:\s(?:and\s)?(?:(?:{_TENS})(?:[- ](?:{_UNITS_WORDS}))?|{_UNITS_WORDS}))?)?")
_UNIT = (r"(?:ms|µs|ns|s|sec|secs|seconds|min|mins|minutes|h|hrs|hours|days|weeks|KB|MB|GB|TB|KiB|MiB|GiB|kB|%|px"
         r"|GHz|MHz|°C|tokens|rows|req/s|epochs|workers|threads|steps|k|x|USD|EUR|percent)")
NUMBER = rf"(?:[-+]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?|{_NUM_WORDS})(?:\s?{_UNIT}(?!\w))?"  # (?!\w), not \b: "30%" ends in a non-word unit
TOKEN = r"(?:`[^`\n]{1,80}`|\"[^\"\n]{1,80}\"|'[^'\n]{1,60}'|[\w./:@+-]*[\w/%])"
KEY = r"(?:`[^`\n]{1,60}`|[A-Za-z_][\w.-]*(?:[ -][A-Za-z_][\w.-]*){0,3})"
_VAL = rf"(?:{NUMBER}|`[^`\n]{{1,80}}`)(?!\w)(?!\.\d)"  # a number or a code span, never a bare word
_END = r"(?![\w.]*\d)"

# Verbs that set a value, with "to" before it ("bump batch size to 128").
_VERB_TO = (r"(?:set|change|changed|switch|switched|bump|bumped|raise|raised|lower|lowered|increase|increased"
            r"|decrease|decreased|update|updated|reduce|reduced|move|moved|make|made|put|drop|dropped|turn|turned"
            r"|adjust|adjusted|cap|capped|limit|limited|fix|fixed|pin|pinned|tune|tuned|reset)")
# Verbs that set a value directly ("make the batch size 64", "keep the timeout at 30 s").
_VERB_DIRECT = r"(?:set|make|keep|put|have|leave|cap|limit|fix|pin|run|hold|want|need|let)"
_COPULA = (r"(?:is now|is set to|was set to|should be|should now be|needs to be|need to be|must be|has to be|have to be"
           r"|will be|would be|ought to be|can be|becomes|became|goes to|went to|stays at|is|are|was|were|equals"
           r"|came out at|comes to|measured|=|:|->|→)")
_DET = r"(?:(?:the|our|my|your|a|an)\s+)?"
# A setting verb starts its clause ("please make …", "let's raise …", ", bump …"): a verb-like word
# inside a name ("sample limit dqkb", "cap rate") is not one.
_CLAUSE = (r"(?:^|(?<=[,;:(—-])\s*|\b(?:please|and|then|so|now|just|also|actually|to|we|i|you|let's|lets|we'll|i'll"
           r"|can|could|would|will|should|must|let\s+us|why\s+not)\s+)")

RULES = [
    # set / change / bump the batch size (from 32) to 64; switch the optimizer to `adamw`
    re.compile(rf"{_CLAUSE}{_VERB_TO}\s+{_DET}(?P<key>{KEY})\s+(?:from\s+{TOKEN}\s+)?(?:to|=|->|→)\s+(?P<val>{_VAL}|{TOKEN})", re.I),
    # make the batch size 64; keep the timeout at 30 s; cap retries at five
    re.compile(rf"{_CLAUSE}{_VERB_DIRECT}\s+{_DET}(?P<key>{KEY})\s+(?:at\s+|to be\s+|be\s+|as\s+)?(?P<val>{_VAL})", re.I),
    # we measured the p95 latency at 741 ms; a batch size of 64; latency peaked around 40 ms
    re.compile(rf"\b(?:measured|recorded|observed|clocked|saw|got|logged|shows?|showed|reports?|reported)\s+{_DET}"
               rf"(?P<key>{KEY})\s+(?:at|of|as|=|around|about)\s+(?P<val>{_VAL})", re.I),
    re.compile(rf"\b(?:a|an|the)\s+(?P<key>{KEY})\s+of\s+(?P<val>{_VAL})", re.I),
    re.compile(rf"(?:^|\b(?:the|our|my)\s+)(?P<key>{KEY})\s+\w+(?:ed|s)\s+(?:at|around|about|near|to|of)\s+"
               rf"(?P<val>{NUMBER})(?!\w)(?!\.\d)", re.I),
    # the p95 latency is now 741 ms; batch_size should be 64; threshold = 0.45; lr: 3e-4
    # (anchored at any word: the key is the last words before the copula; a lead-in such as "on
    # second thought" is cut by _LEAD, and `memory.same_key` matches what is left over)
    re.compile(rf"\b(?P<key>{KEY})\s*\b{_COPULA}\s*"
               rf"(?P<val>{_VAL})", re.I),
    re.compile(rf"(?:^|[,;(]\s*|\b(?:the|our|my|if|whether|that)\s+)(?P<key>{KEY})\s*(?:=|:|->|→)\s*(?P<val>{_VAL})",
               re.I),
    # looks like p95 latency = 741 ms (a key anywhere before "=")
    re.compile(rf"(?P<key>{KEY})\s*=\s*(?P<val>{_VAL})", re.I),
    # use 8 workers; use `fp16` for precision; take 0.3 as the dropout; how about 64 for the batch size
    re.compile(rf"\b(?:use|with|keep|take|try|pick|choose|about|make it|set it to|put it at)\s+(?P<val>{_VAL})\s+(?:(?:for|as)\s+{_DET})?"
               rf"(?P<key>{KEY})", re.I),
    # for the batch size, 64; for the batch size, go with / use / let's say 64
    re.compile(rf"\bfor\s+{_DET}(?P<key>{KEY})\s*[,:—-]\s*(?:(?:let's|lets|we'll|i'll)\s+)?(?:(?:go with|use|take|say|"
               rf"pick|try|make it|set it to|do)\s+)?(?P<val>{_VAL})", re.I),
]
# "the batch size is too small, make it 64" / "changing the batch size, it needs to be 64": the
# pronoun names the setting of the clause before it.
PRONOUN = re.compile(rf"(?:\b(?:the|our|my)\s+|\b(?:changing|change|about|regarding|on|update|updating|for)\s+"
                     rf"{_DET})(?P<key>{KEY})\b[^.;!?]{{0,40}}?[,;:—-]\s*(?:(?:so|and|then|please)\s+)?(?:(?:make|set|"
                     rf"put|change|bump|keep|switch)\s+(?:it|that)\s+(?:to\s+|at\s+)?|(?:it|that)(?:'s| is| should be"
                     rf"| needs to be| must be| has to be| will be| is now)\s+)(?P<val>{_VAL})", re.I)
_LEAD = re.compile(r"^(?:(?:looks|look|seems|like|so|now|today|then|and|also|i|we|think|guess|maybe|actually|ok|okay"
                   r"|well|that|note|here|just|hmm|on|second|thought|please|new|value|what|if|can|could|you|let's"
                   r"|lets|let|how|about|set|make|keep|put|have|cap|want|need|use|change|bump|raise|switch)\s+)+", re.I)
_TRAIL = re.compile(r"\s+(?:is|are|was|were|should|would|could|can|will|must|needs?|has|have|had|too|now|then|"
                    r"here|there)(?:\s.*)?$|\s+(?:be|at|to|of|as|around|about|for)$", re.I)
BAD_KEYS = frozenset("it this that which what there here he she they we i you answer answers reply it's one "
                     "me us them times time".split())
_BAD_VALS = frozenset(("the", "a", "an", "it", "be", "use", "and", "one"))
# The rule that reads the key after the value ("use 8 workers") would read a value's own unit
# as the key by backtracking ("make it 45 s" is no setting `s` = 45): a unit of time, size or
# money is never that key. Counted things (workers, steps, tokens) stay keys; and a key
# before its value ("x = 5", "h is 64") is a name whatever it spells.
_UNIT_KEYS = frozenset("ms µs ns s sec secs seconds min mins minutes h hrs hours days weeks kb mb gb tb kib mib gib "
                       "% px ghz mhz °c k x usd eur percent".split())


def _clean_key(raw: str) -> str:
    return norm_key(_TRAIL.sub("", _LEAD.sub("", raw.strip())))


def _item(key: str, val: str, turn: int) -> Item | None:
    val = val.strip().rstrip(".,;:")
    words = key.split("_")
    if not key or key in BAD_KEYS or words[0] in BAD_KEYS or not val or len(key) > 48:
        return None
    if val.lower() in _BAD_VALS or key.isdigit():
        return None
    return Item("setting", key, val, turn)


# Every rule but the first (whose value is any token) ends in a number or a `code` span:
# a digit, a backtick or a number word. A sentence with none of them is read by the first
# rule alone; the others could find nothing in it.
_VALUE_HINT = re.compile(rf"[\d`]|{_TENS}|{_UNITS_WORDS}|zero|dozen|hundred|thousand", re.I)
# Two rules cost most, each trying a key of up to four words at every word: the copula's
# (its copula and value must follow one another, the same `\b` before) and the "=" one.
_VALUE_HINT_F = cased(_VALUE_HINT)  # searched in the sentence's fold: 5× faster (ocw/text/fold.py)
_COPULA_HINT = re.compile(rf"\b{_COPULA}\s*(?P<val>{_VAL})", re.I)
_NEEDS = {RULES[5]: _COPULA_HINT.search, RULES[7]: lambda s: "=" in s}
_KEY_AFTER = RULES[8]  # "use 8 workers", "take 0.3 as the dropout": the key follows the value


def settings(s: str, turn: int) -> list[Item]:
    """The settings a sentence states: one per value, named by the pronoun's setting if
    one names it, else by the longest key any rule reads for it (a shorter one is a
    name cut short); one value per key (the first)."""
    by_value: dict[str, Item] = {}
    locked: set[str] = set()
    for rx in (PRONOUN, *RULES) if _VALUE_HINT_F.search(fold(s)) else RULES[:1]:
        if rx in _NEEDS and not _NEEDS[rx](s):
            continue
        for m in rx.finditer(s):
            it = _item(_clean_key(m.group("key")), m.group("val"), turn)
            if it is not None and rx is _KEY_AFTER and it.key.lower() in _UNIT_KEYS:
                it = None
            if it is None or it.value in locked:
                continue
            if it.value not in by_value or len(it.key) > len(by_value[it.value].key):
                by_value[it.value] = it
            if rx is PRONOUN:
                locked.add(it.value)
    out: dict[str, Item] = {}
    for it in by_value.values():
        out.setdefault(it.key, it)
    return list(out.values())


_ASK = re.compile(rf"\b(?:what|which)\s+(?:(?:should|would|will|do|does|is|are)\s+{_DET}(?P<k1>{KEY})\s+(?:be|we|you|i)\b"
                  rf"|(?P<k2>{KEY})\s+(?:should|would|will|do|does|shall|can)\s+(?:we|you|i)\b"
                  rf"|(?:value|number)\s+(?:for|of)\s+{_DET}(?P<k3>{KEY})\s*\?)"
                  rf"|\bhow\s+(?:many|much|large|big|long|high|low)\s+(?P<k4>{KEY})\s+(?:should|would|will|do|does)\b",
                  re.I)
_ANSWER = re.compile(rf"^\s*(?:(?:let's|lets|i'd|i would|we'll)\s+)?(?:(?:say|go with|use|take|try|make it|set it to|"
                     rf"maybe|pick|how about|do)\s+)?(?P<val>{_VAL})\s*(?:,?\s*(?:please|then|is fine|works|sounds "
                     rf"(?:good|right)|for now|i think|i guess))?\s*[.!]?\s*$", re.I)


def asked_key(text: str) -> str:
    """The setting the last question in `text` asks about ('' for none)."""
    found = ""
    for m in _ASK.finditer(text):
        raw = next(g for g in m.group("k1", "k2", "k3", "k4") if g)
        key = _clean_key(raw)
        if key and key not in BAD_KEYS and key.split("_")[0] not in BAD_KEYS:
            found = key
    return found


def answer_value(sentence: str) -> str:
    """The value a bare answer gives ("64, please", "let's say sixty-four"), or ''."""
    m = _ANSWER.match(sentence)
    return m.group("val").strip().rstrip(".,;:") if m else ""
