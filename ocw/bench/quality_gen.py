"""Long notebook sessions with planted facts, for the quality benchmark (issue 22).

Each session is a list of steps — a user message, or a long tool output stored
as a tool call and its result — with facts of every kind of the session memory
planted among filler: paths, URLs, commits, DataFrame columns and shapes,
errors, settings, quantities with units, preferences, decisions and TODOs.
Some facts are later changed (the new value is current, the old one stale),
retracted ("that file is corrupt") or closed ("done with …").

Wording varies: every kind has several phrasings, split into three sets that
never share a template, so a rule tuned to A's sentences is caught by B's and
C's. Set B was held out until a rule was once written against its "make the X
N" (so it is no longer a clean hold-out); set C was written before the
generalized rules and never read while writing them: it is the held-out set. Every value is unique to
its fact (random suffixes), so finding it in the context means the fact was
kept, not that some filler happened to say it.

Pure and deterministic for a seed; no ocw imports.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

KINDS = ("path", "url", "commit", "column", "shape", "error", "setting", "quantity", "preference",
         "decision", "todo")


@dataclass
class Fact:
    kind: str
    checks: list[str]  # strings that must all occur in the context for the fact to count as kept
    stale: list[str] = field(default_factory=list)  # values that must not be shown as current
    killer: str = ""  # a string of the statement that made `stale` stale (its presence excuses them)
    current: bool = True  # False: retracted or closed — nothing of it is expected


@dataclass
class Step:
    kind: str  # "user" | "tool"
    text: str


@dataclass
class GenSession:
    steps: list[Step]
    facts: list[Fact]
    seed: int
    phrasings: str


_DOMAINS = {
    "ml": ("model", "train", "epoch", "loss", "checkpoint", "tokenizer", "eval", "gradient", "optimizer", "dataset"),
    "web": ("endpoint", "request", "cache", "latency", "handler", "deploy", "replica", "session", "queue", "header"),
    "data": ("table", "partition", "join", "ingest", "schema", "warehouse", "batch", "parquet", "report", "metric"),
    "bio": ("sample", "assay", "plate", "sequence", "read", "primer", "culture", "genome", "cohort", "reagent"),
}
_FILLER_VERBS = ("looks", "seems", "feels", "stays", "keeps", "reads", "turns", "comes back")
_FILLER_ADJ = ("fine", "slow-ish", "noisy", "plausible", "odd", "stable", "cleaner", "messy", "familiar", "similar")


def _sid(rng: random.Random, n: int = 4) -> str:
    return "".join(rng.choice("abcdefghjkmnpqrstuvwxyz") for _ in range(n))


def _filler(rng: random.Random, domain: str, words: int) -> str:
    vocab = _DOMAINS[domain]
    out = []
    while sum(len(s.split()) for s in out) < words:
        out.append(f"The {rng.choice(vocab)} {rng.choice(_FILLER_VERBS)} {rng.choice(_FILLER_ADJ)} compared with "
                   f"the {rng.choice(vocab)} we looked at, so I keep reading through the {rng.choice(vocab)} notes.")
    return " ".join(out)


def _tool_output(rng: random.Random, domain: str, lines: int, fact_line: str = "") -> str:
    vocab = _DOMAINS[domain]
    rows = [f"{rng.choice(vocab)}_{k:03d} {rng.randint(1, 99)} {rng.choice(_FILLER_ADJ)} {_sid(rng, 6)}"
            for k in range(lines)]
    if fact_line:
        rows.insert(rng.randint(lines // 4, max(lines // 4, lines - 1)), fact_line)
    return "\n".join(rows)


# Phrasings: (set A, set B, set C). `{...}` names come from the fact.
_P = {
    "path": (["Let's work from {v} for now.", "The raw dump lives at {v}.", "I saved the notebook output to {v}."],
             ["Could you open {v} and keep it handy?", "Everything we need is under {v} I think."],
             ["The cleaned copy is {v}, read that one.", "Can you load {v} next?"]),
    "url": (["The docs are at {v}.", "I found the spec here: {v}"],
            ["Bookmark {v} please, we will need it.", "Upstream tracks this at {v} if you want to look."],
            ["More background in {v} (see section 3).", "Reference: {v}"]),
    "commit": (["The last good build was commit {v}.", "I pushed the fix as {v}."],
               ["Bisect says {v} is where it went right.", "Pin the dependency to revision {v}."],
               ["CI went green again at {v}.", "Can you diff against {v}?"]),
    "setting": (["Set the {k} to {v}.", "Let's use {v} for {k}.", "{k} should be {v}."],
                ["I'd like {k} = {v} from here.", "Make the {k} {v}, please."],
                ["For {k}, go with {v}.", "Can we have {k} at {v}?", "I will need a {k} of {v} for this."]),
    "change": (["Change the {k} to {v}.", "Actually, bump {k} to {v}."],
               ["Switch {k} to {v} instead.", "On second thought {k} should be {v}."],
               ["Let's raise {k} to {v} after all.", "New value for {k}: {v}.", "We are changing {k}, it needs to be {v}."]),
    "quantity": (["The {k} is now {v}.", "We measured {k} at {v}."],
                 ["Our {k} came out at {v} on the last run.", "Looks like {k} = {v} today."],
                 ["{k} peaked around {v} yesterday.", "Profiling shows a {k} of {v}."]),
    "preference": (["From now on, always {v}.", "I prefer that you {v}."],
                   ["Please keep to this going forward: {v}.", "Going forward {v}, I find that easier."],
                   ["One thing for the rest of this project: {v}.", "Please {v} every time."]),
    "decision": (["We'll go with {a} over {b}.", "Let's use {a} instead of {b}."],
                 ["Decision: stick with {a} rather than {b}.", "I picked {a} over {b} after all."],
                 ["Between {a} and {b}, we take {a}.", "{a}, not {b}, that is settled."]),
    "todo": (["TODO: {v}.", "Remember to {v} before we finish."],
             ["We still need to {v}.", "Don't forget to {v}."],
             ["Still pending: {v}.", "At some point we have to {v}."]),
    "close": (["Done with {t}.", "I finished {t}."],
              ["We did {t} already.", "{T} is done."],
              ["{T} is off the list now.", "Finally got to {t}, all done."]),
    "retract": (["Forget {v}, it is corrupt.", "{v} is broken, don't use it."],
                ["Ignore {v} please.", "Turns out {v} is outdated."],
                ["{v} turned out to be bad data, skip it.", "Never mind {v}."]),
    "no_column": (["There is no column {v} after all."], ["Drop {v}, it does not exist."],
                  ["{v} is not a real column, my mistake."]),
}
_PREFS = ("answer in {lang}", "add type hints to every function named {x}_fn", "show tables as markdown with the "
          "prefix tbl_{x}", "keep answers under {n} lines", "name temp files with the prefix {x}_tmp")
_LANGS = ("Chinese", "German", "French", "Spanish")
_TODOS = ("check the outliers in {x}_sales", "rerun the {x}_eval suite", "ask Dana about the {x}_quota",
          "write the {x}_migration note", "plot the {x}_residuals")
_UNITS = ("ms", "MB", "GB", "s", "%", "req/s", "rows")
_ERRORS = ("KeyError: '{x}_id'", "ValueError: cannot reshape {x}_grid", "TimeoutError: {x}_worker stalled",
           "FileNotFoundError: {x}_cache.json")


def _pref_check(p: str) -> str:
    """The part of a preference that is unique to it (a language, a name, "12 lines")."""
    m = re.search(r"\d+ lines|\w+_\w+|" + "|".join(_LANGS), p)
    return m.group(0) if m else p


def generate(seed: int, turns: int, phrasings: str = "A", domain: str | None = None) -> GenSession:
    """A session of `turns` user steps (plus tool steps), facts planted in the first
    two thirds, changes/retractions/closings before the last tenth."""
    rng = random.Random(seed)
    dom = domain or rng.choice(sorted(_DOMAINS))
    ps = "ABC".index(phrasings)

    def say(kind, **kw):
        t = rng.choice(_P[kind][ps])
        return t.format(**kw)

    facts: list[Fact] = []
    plants: list[tuple[int, Step]] = []  # (turn, step)
    early, late = max(2, turns * 2 // 3), max(3, turns * 9 // 10)

    def at(lo, hi) -> int:
        return rng.randint(lo, max(lo, hi))

    vocab = _DOMAINS[dom]
    prefs = rng.sample(_PREFS, 2)  # two different preferences: both stay current
    for n in range(2):
        x = _sid(rng)
        v = f"data/{rng.choice(vocab)}_{x}/part_{rng.randint(10, 99)}.parquet"
        t = at(1, early)
        plants.append((t, Step("user", say("path", v=v))))
        if n == 1:  # retracted later
            kill = say("retract", v=v)
            plants.append((at(t + 1, late), Step("user", kill)))
            facts.append(Fact("path", [], stale=[v], killer=kill, current=False))
        else:
            facts.append(Fact("path", [v]))
        u = f"https://{rng.choice(('docs', 'wiki', 'git'))}.example.org/{rng.choice(vocab)}/{x}-{rng.randint(1, 999)}"
        plants.append((at(1, early), Step("user", say("url", v=u))))
        facts.append(Fact("url", [u]))
        c = "".join(rng.choice("0123456789abcdef") for _ in range(11)) + "a1"
        plants.append((at(1, early), Step("user", say("commit", v=c[:12]))))
        facts.append(Fact("commit", [c[:12]]))
        # Working set from tool output: columns, shape, an error.
        name = f"df_{x}"
        cols = [f"{rng.choice(vocab)}_{_sid(rng, 3)}" for _ in range(3)]
        plants.append((at(1, early), Step("tool", _tool_output(
            rng, dom, 60, f"{name}.columns: {', '.join(cols)}"))))
        facts.append(Fact("column", cols[:]))
        shape = f"({rng.randint(1000, 99999)}, {rng.randint(3, 60)})"
        plants.append((at(1, early), Step("tool", _tool_output(rng, dom, 60, f"{name}.shape = {shape}"))))
        facts.append(Fact("shape", [shape]))
        err = rng.choice(_ERRORS).format(x=x)
        plants.append((at(1, early), Step("tool", _tool_output(rng, dom, 50, f"Traceback (most recent call last):\n"
                                                                         f"  ...\n{err}"))))
        facts.append(Fact("error", [err.split(":")[0], err.split(": ", 1)[1]]))
        if n == 1:  # a column the user says does not exist
            bad = f"{rng.choice(vocab)}_{_sid(rng, 3)}"
            t = at(1, early)
            plants.append((t, Step("user", f"Please also keep the column {bad} in mind.")))
            kill = say("no_column", v=bad)
            plants.append((at(t + 1, late), Step("user", kill)))
            facts.append(Fact("column", [], stale=[bad], killer=kill, current=False))
        # Settings: one stays, one changes.
        k = f"{rng.choice(vocab)} {rng.choice(('size', 'rate', 'limit', 'threshold', 'timeout'))} {x}"
        # Four digits, no comma: a three-digit value also occurs as a token count in the offline
        # model's digests ("It is 128 tokens long"), which is not the setting stated again.
        v1, v2 = str(rng.randint(1000, 9999)), str(rng.randint(1000, 9999))
        v2 = v2 if v2 != v1 else str(int(v1) % 9000 + 1000 + 1)
        t = at(1, early)
        plants.append((t, Step("user", say("setting", k=k, v=v1))))
        if n == 1:
            kill = say("change", k=k, v=v2)
            plants.append((at(t + 1, late), Step("user", kill)))
            facts.append(Fact("setting", [v2], stale=[v1], killer=kill))
        else:
            facts.append(Fact("setting", [v1]))
        q = f"{rng.choice(('p95', 'peak', 'median', 'total'))} {rng.choice(vocab)} {rng.choice(('latency', 'memory', 'throughput', 'volume'))}"
        unit = rng.choice(_UNITS)
        qv = f"{rng.randint(11, 999)}.{rng.randint(1, 9)} {unit}"
        plants.append((at(1, early), Step("user", say("quantity", k=q, v=qv))))
        facts.append(Fact("quantity", [qv.split()[0]]))
        # Preference, decision, TODO (one closed later).
        p = prefs[n].format(lang=rng.choice(_LANGS), x=x, n=rng.randint(5, 40))
        plants.append((at(1, early), Step("user", say("preference", v=p))))
        facts.append(Fact("preference", [_pref_check(p)]))
        a, b = f"{rng.choice(('polars', 'duckdb', 'redis', 'celery', 'pyarrow'))}_{x}", f"legacy_{x}"
        plants.append((at(1, early), Step("user", say("decision", a=a, b=b))))
        facts.append(Fact("decision", [a]))
        what = rng.choice(_TODOS).format(x=x)
        obj = next(w for w in what.split() if "_" in w)
        t = at(1, early)
        plants.append((t, Step("user", say("todo", v=what))))
        if n == 1:
            kill = say("close", t=what, T=what[0].upper() + what[1:])
            plants.append((at(t + 1, late), Step("user", kill)))
            facts.append(Fact("todo", [], stale=[obj], killer=kill, current=False))
        else:
            facts.append(Fact("todo", [obj]))
    # Interleave: each user turn carries filler; tool steps among them.
    by_turn: dict[int, list[Step]] = {}
    for t, s in plants:
        by_turn.setdefault(t, []).append(s)
    steps: list[Step] = []
    for t in range(1, turns + 1):
        said = [s.text for s in by_turn.get(t, []) if s.kind == "user"]
        for s in by_turn.get(t, []):
            if s.kind == "tool":
                steps.append(s)
        if t % 9 == 0:
            steps.append(Step("tool", _tool_output(rng, dom, rng.randint(80, 200))))
        filler = _filler(rng, dom, rng.randint(30, 120)).split(". ")
        half = len(filler) // 2
        steps.append(Step("user", " ".join([". ".join(filler[:half]) + "."] + said + [". ".join(filler[half:])])))
    return GenSession(steps, facts, seed, phrasings)
