"""`{name}`, `{In[3]}`, `{Out[3]}`, `{Err}` in a %%chat cell: the notebook, referenced.

The rule a user can predict, because a cell that talks about code is full of
braces (JSON, dicts, f-strings, templates):
- Only four patterns expand, and only outside code: `{identifier}` (a variable
  of the notebook), `{In[n]}` (the source of cell n), `{Out[n]}` (what cell n
  returned), `{Err}` (the last error, with its traceback). Cell history wins
  over a variable of the same name.
- Inside code — a fenced block (``` or ~~~) or an inline `code span` — nothing
  expands: pasted code reaches the model exactly as written.
- Any other brace stays as it is (`{"a": 1}`, `{x: 1}`, `{ name }`); `{{` and
  `}}` outside code send one literal brace each (so `{{df}}` sends `{df}`).
- A reference to nothing is an error, in one line, before the model is called
  (never sent as a literal that looks expanded).

What the model gets: a DataFrame or Series as its first rows with its shape;
a string as itself; anything else as IPython's pretty repr. Each value is cut
to BUDGET_TOKENS and the cut is marked in the text. A value of one line goes
inline; a longer one as a fenced block of its own. The expanded text is what
is sent and what is stored (the model read it; the past must not change when
the variable does); the notebook cell keeps the template.
"""
from __future__ import annotations

import re
import sys
import traceback

from ocw.text.errors import OcwError

BUDGET_TOKENS = 2000  # per reference
HEAD_ROWS = 5  # rows of a DataFrame or Series shown

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_REF = re.compile(r"\{\{|\}\}|\{(In|Out)\[(\d+)\]\}|\{(Err)\}|\{(\w+)\}")


class UnknownReference(OcwError):
    """A {reference} in a %%chat cell that names nothing."""


def _segments(text: str):
    """(is_code, piece) for the text: fenced blocks and inline code spans are code."""
    lines = text.splitlines(keepends=True)
    fence = None
    prose: list[str] = []
    for line in lines:
        m = _FENCE.match(line)
        if fence is None and m:
            if prose:
                yield from _inline("".join(prose))
                prose = []
            fence = m.group(1)
            yield True, line
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):]:
                fence = None
            yield True, line
        else:
            prose.append(line)
    if prose:
        yield from _inline("".join(prose))


def _inline(text: str):
    """Prose split around inline code spans (a run of backticks closed by the same run)."""
    pos = 0
    for m in re.finditer(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)", text):
        if m.start() > pos:
            yield False, text[pos:m.start()]
        yield True, m.group(0)
        pos = m.end()
    if pos < len(text):
        yield False, text[pos:]


def _is_table(value) -> bool:
    try:  # hasattr runs a __getattr__, which may raise anything
        return all(hasattr(value, a) for a in ("head", "shape", "to_string")) and isinstance(
            getattr(value, "shape", None), tuple)
    except Exception:
        return False


def _table(value) -> str:
    shape = value.shape
    kind = type(value).__name__
    text = value.head(HEAD_ROWS).to_string()
    rows = shape[0] if shape else 0
    size = f"{rows:,} rows × {shape[1]:,} columns" if len(shape) > 1 else f"{rows:,} values"
    shown = f"; the first {HEAD_ROWS} shown" if rows > HEAD_ROWS else ""
    return f"{text}\n[{kind}: {size}{shown}]"


def describe(value) -> str:
    """The text a value is sent as (before the budget). Never raises: the value is the
    user's object, and its head(), __getattr__ or __repr__ may raise anything — even
    SystemExit — which must not end the cell with a traceback (nor the kernel). What
    cannot be shown is sent as `<Type object at 0x…>` and said so."""
    if isinstance(value, str):
        return value
    if _is_table(value):
        try:
            return _table(value)
        except (Exception, SystemExit):
            pass  # a table-like object whose head() fails: shown as any other value
    from IPython.lib.pretty import pretty

    try:
        text = pretty(value, max_seq_length=200)
        if isinstance(text, str):
            return text
    except (Exception, SystemExit):  # a broken __repr__ must not break the cell
        pass
    return object.__repr__(value) + " (its repr failed)"


# Past the budget by this many tokens, a prefix's first `budget` tokens are the
# value's own: only the last pre-token piece of a prefix can tokenize differently.
_MARGIN_TOKENS = 64


def cut(text: str, label: str, budget: int, encoding: str) -> tuple[str, str | None]:
    """The text within `budget` tokens, the cut marked; and a note when it was cut.

    Time grows with what is kept, not with the value (issue 28: a 50 MB string took
    10.8 s, tokenized whole twice to keep 2,000 tokens): only a prefix is tokenized,
    once — 2 characters a token first, then as many characters as that prefix's
    own density says the budget needs (+10 %, and at least half as many again) — until a prefix
    holds more than the budget plus a margin or is the whole value; a cut value
    states its size in characters, which needs no tokenizing. A value is marked as
    cut only when a prefix of it was seen over the budget, so a value of exactly
    the budget is sent whole, whatever its length in characters."""
    from ocw.text.tokens import cut_to_tokens  # lazy: %load_ext stays light

    budget = max(0, budget)
    n = 2 * budget + _MARGIN_TOKENS
    while n < len(text):
        kept, seen = cut_to_tokens(text[:n], budget, encoding)
        if seen > budget + _MARGIN_TOKENS:
            note = f"{label} was cut to {budget:,} tokens of its {len(text):,} characters"
            return (f"{kept}\n[… {label} cut here: {len(text) - len(kept):,} of {len(text):,} characters "
                    "not shown]"), note
        n = max(int(n * (budget + _MARGIN_TOKENS) / max(seen, 1) * 1.1) + 1, n + n // 2)
    kept, total = cut_to_tokens(text, budget, encoding)  # the whole value: a few times the budget at most
    if total <= budget:
        return text, None
    note = f"{label} was cut to {budget:,} of {total:,} tokens"
    return f"{kept}\n[… {label} cut here: {total - budget:,} of {total:,} tokens not shown]", note


def _place(text: str, lang: str = "") -> str:
    """Inline for one line; a fenced block of its own for more."""
    if "\n" not in text.strip("\n") and "```" not in text and "~~~" not in text:
        return text.strip("\n")
    # A value holding a fence marker goes in a fence longer than any backtick run of it
    # (inline, its ``` would open a code block that swallows the rest of the message).
    run = max((len(r) for r in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, run + 1)
    return f"\n{fence}{lang}\n{text.strip(chr(10))}\n{fence}\n"


_KERNEL_CELL_FILE = re.compile(r"[/\\]ipykernel_\d+[/\\]\d+\.py$")


def _cell_name(filename: str) -> str:
    """A kernel cell's temporary file (`/tmp/ipykernel_<pid>/<hash>.py`) as IPython names it,
    `Cell In[n]`: the path means nothing to the model, and its pid's length changed the
    message's token count from one kernel to the next."""
    if not _KERNEL_CELL_FILE.search(filename):
        return filename
    try:
        from IPython import get_ipython

        n = get_ipython().compile._filename_map.get(filename)
    except Exception:  # not in a kernel, or IPython without the map: the name alone
        n = None
    return f"Cell In[{n}]" if n is not None else "Cell"


def format_error(exc: BaseException) -> str:
    """The error as Python prints it, without IPython's own frames."""
    tbe = traceback.TracebackException.from_exception(exc)
    frames = [f for f in tbe.stack if "/IPython/" not in f.filename.replace("\\", "/")]
    for f in frames:
        f.filename = _cell_name(f.filename)
    tbe.stack = traceback.StackSummary.from_list(frames)
    return "".join(tbe.format()).rstrip()


class Sources:
    """Where references are looked up: a namespace, the raw inputs, the outputs, the
    last error (any of them may be empty)."""

    def __init__(self, namespace: dict, inputs: list[str], outputs: dict, last_error: BaseException | None,
                 current: int | None = None):
        self.namespace, self.inputs, self.outputs = namespace, inputs, outputs
        self.last_error, self.current = last_error, current

    def lookup(self, kind: str, key) -> tuple[str, str, str]:
        """(label, text, fence language) for a reference; UnknownReference if none."""
        if kind == "In":
            n = int(key)
            if n == self.current:
                raise UnknownReference(f"{{In[{n}]}} is this cell", hint="reference an earlier cell")
            last = min(len(self.inputs), self.current or len(self.inputs)) - 1  # the cells before this one
            if not 0 < n <= last:
                raise UnknownReference(f"{{In[{n}]}}: cell {n} has not run in this kernel",
                                       hint=f"use a cell number from 1 to {last}" if last >= 1 else "run a cell first")
            return f"In[{n}]", self.inputs[n], "python"
        if kind == "Out":
            n = int(key)
            if n not in self.outputs:
                raise UnknownReference(f"{{Out[{n}]}}: cell {n} returned no value (or has not run)",
                                       hint="Out[n] holds what a cell's last expression returned")
            return f"Out[{n}]", describe(self.outputs[n]), ""
        if kind == "Err":
            if self.last_error is None:
                raise UnknownReference("{Err}: no error so far in this kernel", hint="write {{Err}} for the word")
            return "Err", format_error(self.last_error), ""
        if key not in self.namespace:
            raise UnknownReference(f"{{{key}}}: no variable {key!r} in this notebook",
                                   hint=f"define it first, or write {{{{{key}}}}} to send the braces as they are")
        return key, describe(self.namespace[key]), ""


def expand(text: str, sources: Sources, *, encoding: str, budget: int = BUDGET_TOKENS) -> tuple[str, list[str]]:
    """The cell with its references expanded, and a note for each value that was cut."""
    out: list[str] = []
    notes: list[str] = []
    for is_code, piece in _segments(text):
        if is_code:
            out.append(piece)
            continue

        def replace(m: re.Match) -> str:
            whole = m.group(0)
            if whole in ("{{", "}}"):
                return whole[0]
            if m.group(1):
                label, value, lang = sources.lookup(m.group(1), m.group(2))
            elif m.group(3):
                label, value, lang = sources.lookup("Err", None)
            elif m.group(4).isidentifier():
                label, value, lang = sources.lookup("name", m.group(4))
            else:
                return whole  # {3} or {1x}: not a reference, stays as written
            value, note = cut(value, label, budget, encoding)
            if note:
                notes.append(note)
            return _place(value, lang)

        out.append(_REF.sub(replace, piece))
    return "".join(out), notes


class ErrorMemory:
    """A post_run_cell hook: the last error a cell raised, ocw's own one-line
    UsageErrors aside (a mistyped %%chat must not become the {Err} a user means)."""

    def __init__(self):
        self.last: BaseException | None = None

    def __call__(self, result) -> None:
        from IPython.core.error import UsageError

        err = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        if err is not None and not isinstance(err, UsageError):
            self.last = err


def sources_of(shell, memory: ErrorMemory | None) -> Sources:
    """The references a shell offers: its user namespace, raw inputs, outputs, last error."""
    hist = getattr(shell, "history_manager", None)
    inputs = list(getattr(hist, "input_hist_raw", []) or [])
    outputs = dict(getattr(hist, "output_hist", {}) or {})
    last = memory.last if memory is not None else None
    if last is None:  # errors from before %load_ext ocw: what IPython kept
        value = getattr(sys, "last_value", None)
        from IPython.core.error import UsageError

        last = value if value is not None and not isinstance(value, UsageError) else None
    return Sources(shell.user_ns, inputs, outputs, last, current=getattr(shell, "execution_count", None))


def expand_message(runtime, text: str, model: str | None = None) -> tuple[str, list[str]]:
    """A message as the model will read it: {name}, {In[n]}, {Out[n]}, {Err} outside
    code expanded from the runtime's shell (a `%%chat` cell and the chat widget both
    send through this), and one line for each value that was cut. A reference to
    nothing raises OcwError before anything is sent."""
    if "{" not in text and "}" not in text:
        return text, []
    from ocw.text.tokens import encoding_for_model

    cfg, current = runtime.config, runtime.current
    model = model or cfg.model or (current.model if current is not None else cfg.resolved_model())
    text, notes = expand(text, sources_of(runtime.shell, getattr(runtime, "errors", None)),
                         encoding=encoding_for_model(model).name)
    return text, [f"Note: {note} in the message (the model reads the cut value)." for note in notes]

