"""Case-insensitive search without `re.IGNORECASE`'s cost: fold the text once, search it
with the pattern compiled case-sensitively.

The memory pass tries a dozen case-insensitive patterns — alternations of lowercase
English words — on every sentence a user wrote. Python's `re` matches such an
alternation under IGNORECASE 3–5× slower than the same pattern, case-sensitive,
on lowercased text (measured on the benchmarks' sentences: 57 µs against 10 µs for
the closing-words hint), and a sentence is read by several of them.

Why `fold(text)` searched case-sensitively finds exactly what IGNORECASE finds in
`text`, for a pattern whose letters are lowercase ASCII (`cased` refuses others):
- `fold` maps each character to exactly one character: `str.lower` does so for every
  code point but U+0130 (İ), which is mapped to "i" as `re` folds it;
- a character matches a lowercase ASCII letter under IGNORECASE exactly when its
  fold is that letter: `str.lower` agrees with `re` for every code point but İ, ı
  (U+0131) and ſ (U+017F), which `re` folds to i, i and s, and so does `fold`;
- every other character of such a pattern (digits, punctuation, spaces) matches
  only itself either way, and a fold keeps whether a character is `\\w` or `\\s`,
  so `\\b`, `\\w`, `\\s` and their negations read the folded text as the original.
tests/text/test_fold.py checks each of these over all of Unicode.
Positions agree too (one character for one), so a match found on the folded text
is at the same place in the original.
"""
from __future__ import annotations

import re

_RE_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})
_SPECIAL = re.compile("[\u0130\u0131\u017f]")


def fold(text: str) -> str:
    """`text` as IGNORECASE reads it against lowercase ASCII letters, one character for one."""
    if _SPECIAL.search(text):
        text = text.translate(_RE_FOLDS)
    return text.lower()


# A letter that stands for itself in a pattern: not part of an escape (\b, \w, \s, \d …)
# or a group's name.
_ESCAPE_OR_NAME = re.compile(r"\\.|\(\?P<\w+>")


def cased(rx: re.Pattern) -> re.Pattern:
    """`rx` without IGNORECASE, for searching `fold`ed text. Refuses a pattern that holds an
    uppercase or non-ASCII letter of its own (it would need IGNORECASE to match folded text),
    or that turns IGNORECASE on inline (`(?i)`: it would stay on)."""
    own = _ESCAPE_OR_NAME.sub("", rx.pattern)
    out = re.compile(rx.pattern, rx.flags & ~re.IGNORECASE)
    if out.flags & re.IGNORECASE or any(c.isalpha() and not ("a" <= c <= "z") for c in own):
        raise ValueError(f"cased: the pattern needs IGNORECASE (letters other than lowercase ASCII, or an "
                         f"inline flag): {rx.pattern[:60]!r}")
    return out
