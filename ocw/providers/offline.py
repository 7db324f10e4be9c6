"""The built-in offline model: no key, no network, deterministic.

Why it exists (DESIGN.md §7): everything — the ring, `%compact`, reactive
compaction, tools — must run on a laptop with no key and no network, and the
tests need a model whose answers are the same on every run. So this model
never pretends: every answer starts with "(offline model)". It
- answers a chat message with a digest of it (length, first sentence, keywords);
- answers a summary request (system prompt starting with SUMMARY_MARKER) with
  a real extractive summary within ``max_tokens``, keeping identifiers;
- calls a tool when the user names one, and reports a tool's result;
- raises ContextOverflowError when the prompt exceeds its context window, as
  a real model would, so reactive compaction can be exercised offline.

Usage is counted with ocw's own tokenizer, so "measured" figures are exact.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter

from ocw.text.errors import ContextOverflowError
from ocw.text.tokens import (count_message, count_text, encoding_for_model, line_pieces, render_block,
                              tokens_at_least, truncate_to_tokens)
from ocw.text import focus as focus_rules
from ocw.providers.base import Reply, StreamCallback, Usage
from ocw.text.prompts import (FOCUS_CLOSE, FOCUS_OPEN, PRUNED_STUB_OPEN, SUMMARY_MARKER, SUMMARY_PREFIX,
                              SYSTEM_NOTE_PREFIX)

PREFIX = "(offline model) "
DEFAULT_CONTEXT_WINDOW = 8192
DEFAULT_SUMMARY_TOKENS = 1024
HEADER = f"{PREFIX}Summary of the earlier conversation (extractive)."
LABELS = ("Key points:", "Identifiers:")
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


# -- text helpers -----------------------------------------------------------
def _blocks(m: dict) -> list[dict]:
    c = m.get("content", [])
    return [{"type": "text", "text": c}] if isinstance(c, str) else list(c)


def _text_of(blocks: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text" and b.get("text"))


def _sentences(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        for s in _SENT_SPLIT.split(line.strip()):
            s = s.strip(" \t-*#>")
            if len(s) >= 3:
                out.append(s)
    return out


def _terms(text: str) -> list[str]:
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
    if not _IDENT_HINT.search(text):
        return []
    found: list[tuple[int, str]] = []
    rest = text
    if "http" in text:
        for m in _URL.finditer(text):
            found.append((m.start(), m.group(0).rstrip(".,;:!?")))
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
                found.append((m.start(), tok))
    seen: set[str] = set()
    out = []
    for _, tok in sorted(found, key=lambda p: p[0]):
        if tok not in seen and tok.strip("`") not in seen:
            seen.add(tok)
            seen.add(tok.strip("`"))
            out.append(tok)
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


def _is_context_block(block: dict) -> bool:
    """A block ocw put before the user's words: the rolling summary or a system note.
    Consecutive user-role messages travel merged into one (the summary renders as a
    user message), so after a compaction that folded everything the last message
    starts with the summary; the question is what follows it."""
    text = block.get("text", "") if block.get("type") == "text" else ""
    return text.startswith((SUMMARY_PREFIX, SYSTEM_NOTE_PREFIX))


def _latest_user_blocks(blocks: list[dict]) -> list[dict]:
    """The blocks the user wrote in the latest message (all of them if nothing else is left)."""
    own = [b for b in blocks if not _is_context_block(b)]
    return own or blocks


def _chunks(text: str, words: int = 3) -> list[str]:
    parts = re.findall(r"\S+\s*|\s+", text)
    return ["".join(parts[i : i + words]) for i in range(0, len(parts), words)] or [text]


# -- the model ----------------------------------------------------------------
class OfflineProvider:
    """A deterministic stand-in model that says plainly it is offline."""

    name = "offline"
    offline = True

    def __init__(self, model: str = "ocw-offline", *, context_window: int | None = None):
        self.model = model
        self.context_window = context_window or DEFAULT_CONTEXT_WINDOW
        self.encoding = encoding_for_model(model).name

    def __repr__(self) -> str:
        return f"OfflineProvider(model={self.model!r}, context_window={self.context_window})"

    def close(self) -> None:
        pass

    def probe_window(self, timeout: float = 2.0) -> tuple[int, str] | None:
        """No server to ask: the offline model's window is the configured one."""
        return None

    def prompt_tokens(self, messages: list[dict], system: str | None = None, tools: list[dict] | None = None) -> int:
        """What a request costs: the system prompt, the tool definitions (as real
        providers bill them) and every message, all by ocw.text.tokens rules — so that
        its usage equals ocw's own estimate and the calibration stays 1.0."""
        n = count_message("system", [{"type": "text", "text": system}], self.encoding) if system else 0
        if tools:
            n += count_text(json.dumps(tools, sort_keys=True, ensure_ascii=False), self.encoding)
        for m in messages:
            n += count_message(m.get("role", "user"), _blocks(m), self.encoding)
        return n

    # -- Provider API -------------------------------------------------------
    def stream(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        on_event: StreamCallback | None = None,
    ) -> Reply:
        reply = self._respond(messages, system, tools, max_tokens)
        if on_event is not None:
            for block in reply.content:
                if block["type"] == "text":
                    for piece in _chunks(block["text"]):
                        on_event("text", piece)
                elif block["type"] == "tool_use":
                    on_event("tool_use", block)
        return reply

    def complete(
        self,
        messages: list[dict],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        tools: list[dict] | None = None,
    ) -> Reply:
        return self._respond(messages, system, tools, max_tokens)

    # -- answers ------------------------------------------------------------
    def _respond(self, messages, system, tools, max_tokens) -> Reply:
        used = self.prompt_tokens(messages, system, tools)
        if used > self.context_window:
            body = f"prompt is too long: {used} tokens > {self.context_window} maximum"
            raise ContextOverflowError(f"offline: {body}", status=400, body=body,
                                       limit=self.context_window, prompt_tokens=used)
        stop = "end_turn"
        if (system or "").startswith(SUMMARY_MARKER):
            content = [{"type": "text", "text": self.summarize(messages, max_tokens or DEFAULT_SUMMARY_TOKENS,
                                                               focus=_focus_of(system))}]
        else:
            last = next((m for m in reversed(messages) if m.get("role") in ("user", "tool")), None)
            blocks = _blocks(last) if last else []
            results = [b for b in blocks if b.get("type") == "tool_result"]
            asked = _text_of(_latest_user_blocks(blocks))
            call = self._tool_call(asked, tools, messages) if tools and not results else None
            if results:
                content = [{"type": "text", "text": self._tool_result_reply(results)}]
            elif call is not None:
                content = [{"type": "text", "text": f"{PREFIX}Calling `{call['name']}`."}, call]
                stop = "tool_use"
            else:
                content = [{"type": "text", "text": self._digest(asked)}]
            if max_tokens and content[0]["type"] == "text":
                text = content[0]["text"]
                cut = truncate_to_tokens(text, max_tokens, self.encoding)
                if cut != text:
                    content, stop = [{"type": "text", "text": cut}], "max_tokens"
        out = sum(count_text(render_block(b), self.encoding) for b in content)
        # Like a real chat template, the prompt ends with the assistant's header
        # (the "generation prompt"), so input + output is the context after the reply.
        used += count_message("assistant", [], self.encoding)
        return Reply(content=content, usage=Usage(used, out, 0), stop_reason=stop, model=self.model)

    def _digest(self, text: str) -> str:
        text = text.strip()
        if not text:
            return f"{PREFIX}I received no text to answer. No real model is connected; set a provider to chat."
        first = _sentences(text)[0] if _sentences(text) else text
        first = truncate_to_tokens(first, 40, self.encoding)
        kws = keywords(text)
        parts = [
            f"{PREFIX}No real model is connected, so here is a digest of your message.",
            f"It is {count_text(text, self.encoding)} tokens long and begins \u201c{first}\u201d",
        ]
        if kws:
            parts.append("\u2014 keywords: " + ", ".join(kws) + ".")
        return " ".join(parts)

    @staticmethod
    def _tool_result_reply(results: list[dict]) -> str:
        texts = []
        for b in results:
            c = b.get("content", "")
            if isinstance(c, list):
                c = _text_of(c)
            texts.append(("error: " if b.get("is_error") else "") + str(c))
        joined = " | ".join(texts).strip()
        short = joined[:200] + ("…" if len(joined) > 200 else "")
        return f"{PREFIX}The tool returned: {short}"

    def _tool_call(self, text: str, tools: list[dict], messages: list[dict]) -> dict | None:
        """A tool_use block if the user names a tool: earliest mention wins."""
        best = None
        for t in tools:
            name = t.get("name", "")
            m = re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) if name else None
            if m and (best is None or m.start() < best[0].start()):
                best = (m, name)
        if best is None:
            return None
        m, name = best
        after = text[m.end() :]
        args: dict = {}
        # `name(k=v, ...)` or `name with k=v, k2="any text; even (this)."`: a quoted
        # value may hold anything, a bare one ends at , ; ) a space or a sentence end.
        opener = re.match(r"`?\s*\(|`?\s+with\s+", after)
        pos = opener.end() if opener else None
        while pos is not None:
            pair = _ARG.match(after, pos)
            if pair is None:
                break
            args[pair.group(1)] = _value(pair.group(2))
            pos = _ARG_SEP.match(after, pair.end()).end()
        n = 1 + sum(1 for msg in messages for b in _blocks(msg) if b.get("type") == "tool_use")
        return {"type": "tool_use", "id": f"toolu_offline_{n}", "name": name, "input": args}

    # -- summaries ------------------------------------------------------------
    def summarize(self, messages: list[dict], budget: int, focus: str | None = None) -> str:
        """An extractive summary of the transcript, never over ``budget`` tokens.

        Sentences are scored by their content terms, each weighted df·log(1+N/df)
        over the N sentences: a term that recurs (a topic) outweighs a one-off
        remark; a sentence sharing no term with the rest and naming no
        identifier is small talk and never kept. Identifiers, the opening and
        recency add a bonus. The best sentences are kept in their
        original order; identifiers they do not already contain are listed
        verbatim after them. A summary never grows past half the transcript
        (with a small floor): compaction must shrink the context, not pad it.

        A `focus` (what the user asked to keep, ocw/text/focus.py) ranks first
        the sentences that share its terms or hold identifiers of the kinds it
        names, and keeps those identifiers before any other.
        """
        texts = []
        for m in messages:
            for b in _blocks(m):
                if b.get("type") == "text":
                    texts.append(b.get("text", ""))
                elif b.get("type") == "tool_result":
                    texts.append(render_block(b))
        text = "\n".join(t for t in texts if t)
        enc = self.encoding
        # A previous summary is re-read as plain sentences (its labels are dropped);
        # the request's wrapper tags, transcript role markers and this model's own
        # boilerplate digests carry nothing worth keeping, nor do ocw's prune stubs and
        # cut notes (their token counts are not the conversation's numbers).
        body = "\n".join(
            _OWN_STUB.sub(" ", _ROLE_MARK.sub("", ln)) for ln in text.splitlines()
            if not ln.strip().startswith((HEADER, *LABELS)) and not _WRAPPER.match(ln)
            and not _OWN_DIGEST.search(ln)
        )
        sents = [s for s in dict.fromkeys(_sentences(body)) if not _INSTRUCTION.match(s)]
        idents = focus_rules.focused_first(identifiers(body), focus)
        wanted, focus_terms = focus_rules.kinds(focus), focus_rules.terms(focus)

        # Each sentence is read once: its terms, its identifiers and whether it is what the
        # focus asks for are kept per sentence, and each text is counted at most once (`cost`),
        # so scoring and choosing are linear in the transcript.
        n = len(sents)
        sent_terms = [set(_terms(s)) for s in sents]
        sent_ids = [len(identifiers(s)) for s in sents]
        focused = [bool(focus_rules.matches(s, focus_terms)) or any(
            focus_rules.identifier_kind(t) in wanted for t in identifiers(s)) for s in sents] \
            if focus_terms or wanted else [False] * n
        df = Counter(t for terms in sent_terms for t in terms)
        weights = {t: k * math.log(1 + n / k) for t, k in df.items()}  # each term's once, not per sentence
        score: dict[int, float] = {}
        for i, terms in enumerate(sent_terms):
            ids = sent_ids[i]
            # A sentence that shares no term with the rest and names nothing is small talk.
            if not ids and not any(df[t] > 1 for t in terms) and n > 1 and not focused[i]:
                continue
            weight = sum(weights[t] for t in terms)
            score[i] = weight / math.sqrt(1 + len(terms)) + 1.5 * ids
            score[i] += (1.0 if i == 0 else 0.0) + 0.5 * i / max(1, n)
        # What the user asked to keep ranks before everything else.
        order = sorted(score, key=lambda i: (not focused[i], -score[i], i))
        counted: dict[str, int] = {}

        def cost(s: str) -> int:
            c = counted.get(s)
            if c is None:
                c = counted[s] = count_text(s, enc)
            return c

        def fits(i: int, room: int) -> bool:
            """cost(sents[i]) + 2 <= room; a sentence whose lower bound is over the room
            is not tokenized (once the summary is nearly full, most are not)."""
            return tokens_at_least(sents[i], enc) + 2 <= room and cost(sents[i]) + 2 <= room

        target = min(budget, max(64, cost(text) // 2))
        used = cost(HEADER) + 8  # labels and separators
        # Keep room for identifiers: what a summary loses most easily and the
        # model needs most exactly (paths, ids, error names).
        reserve_cap, reserve = target // (2 if wanted else 3), 0
        for t in idents:  # their sum, counted only until it reaches the cap
            reserve += cost(t) + 1
            if reserve >= reserve_cap:
                break
        reserve = min(reserve, reserve_cap)
        chosen: set[int] = set()
        for i in order:
            if fits(i, target - used - reserve):
                chosen.add(i)
                used += cost(sents[i]) + 2
        covered = "\n".join(sents[i] for i in chosen)
        kept_ids: list[str] = []
        for tok in idents:
            if tok.strip("`") in covered:  # (tok in covered implies its bare form is)
                continue
            if used + cost(tok) + 1 <= budget:
                kept_ids.append(tok)
                used += cost(tok) + 1
        for i in order:  # room left under the target: more sentences
            if i not in chosen and fits(i, target - used):
                chosen.add(i)
                used += cost(sents[i]) + 2

        def render() -> str:
            out = [HEADER]
            if chosen:
                out.append(LABELS[0] + "\n" + "\n".join(f"- {sents[i]}" for i in sorted(chosen)))
            if kept_ids:
                out.append(LABELS[1] + " " + ", ".join(kept_ids))
            return "\n".join(out)

        def lines_cost(text: str) -> int:  # exactly cost(text); each line tokenized once (tokens.line_pieces)
            return sum(cost(piece) for piece in line_pieces(text, enc))

        result = render()
        # Joins can tokenize differently from the parts: trim until it fits.
        while lines_cost(result) > budget and (chosen or kept_ids):
            if chosen:
                chosen.remove(min(chosen, key=lambda i: (score[i], -i)))
            else:
                kept_ids.pop()
            result = render()
        full, k = result, budget
        while cost(result) > budget:  # last resort (a tiny budget)
            k -= 1
            result = truncate_to_tokens(full, k, enc) if k > 0 else ""
        return result


def _focus_of(system: str | None) -> str | None:
    """The user's focus in a summary request's system prompt (between its tags)."""
    text = system or ""
    start = text.find(FOCUS_OPEN)
    end = text.find(FOCUS_CLOSE, start + 1)
    return text[start + len(FOCUS_OPEN):end] if start >= 0 and end > start else None


_WRAPPER = re.compile(r"^\s*(</?(previous-summary|new-turns)>|\(none\))\s*$")
_ROLE_MARK = re.compile(r"^\[(user|assistant|tool|system|llm)(:[\w/]+)?\]\s*")
_OWN_STUB = re.compile(re.escape(PRUNED_STUB_OPEN) + r"[^\]]*\]|\[… [\d,]+ of [\d,]+ tokens cut[^\]]*\]")
_OWN_DIGEST = re.compile(r"\(offline model\)|^\s*(\[assistant\]\s*)?It is \d+ tokens long and begins")

_ARG_SEP = re.compile(r"\s*(?:,|;|\band\b)?\s*")
_ARG = re.compile(r"""\s*(\w+)\s*[=:]\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^,;\s)]+?)(?=[,;\s)]|\.(?:\s|$)|$)""")


def _value(v: str):
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        if v[0] == '"':
            try:
                return json.loads(v)  # unescapes \" and \n
            except ValueError:
                pass
        return v[1:-1]
    try:
        return json.loads(v)
    except ValueError:
        return v
