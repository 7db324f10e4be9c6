"""ocw/text/fold.py: a fold searched case-sensitively finds what IGNORECASE finds — checked
over every code point, atom by atom, for the patterns the memory pass folds."""
from __future__ import annotations

import re
import sys

import pytest

from ocw.context import memory_rules, memory_settings
from ocw.text.fold import _ESCAPE_OR_NAME, cased, fold

ALL = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
FOLDED = fold(ALL)
FOLDED_PATTERNS = [memory_rules._RETRACT_HINT_F, memory_rules._CLOSE_HINT_F, memory_rules._INSTRUCTION_F,
                   memory_rules._DECISION_F, memory_rules._TODO_F, memory_rules._QUESTION_F,
                   memory_settings._VALUE_HINT_F]
_CLASS = re.compile(r"\[\^?\]?(?:\\.|[^\]])*\]")


def _atoms() -> list[str]:
    """Every atom the folded patterns test one character with: each letter a–z, each other
    character they hold, each class, and the escapes that read a character's kind."""
    chars, classes = set(), set()
    for rx in FOLDED_PATTERNS:
        classes.update(_CLASS.findall(rx.pattern))
        chars.update(_ESCAPE_OR_NAME.sub("", _CLASS.sub("", rx.pattern)))
    literal = {re.escape(c) for c in chars if c not in "()|?*+{}^$"}
    return sorted(literal | classes | {chr(c) for c in range(97, 123)} | {r"\w", r"\W", r"\s", r"\S", r"\d", r"\D", r"\b", r"\B", "."})


def test_one_character_for_one_so_positions_agree():
    assert len(FOLDED) == len(ALL)
    assert fold("İSTANBUL ſo ıt") == "istanbul so it"
    assert fold("") == "" and fold("Done, NOW") == "done, now"


@pytest.mark.parametrize("atom", _atoms())
def test_each_atom_matches_in_the_fold_exactly_where_ignorecase_matches(atom):
    plain = [m.start() for m in re.finditer(atom, ALL, re.IGNORECASE)]
    assert plain == [m.start() for m in re.finditer(atom, FOLDED)], atom


def test_the_atoms_include_the_ones_that_decide():
    atoms = _atoms()
    assert len(atoms) > 40 and {"s", "i", "k", r"\b", r"\s", r"\w", "'"} <= set(atoms)
    assert any(a.startswith("[") for a in atoms) and not any("A" <= a <= "Z" for a in atoms)


@pytest.mark.parametrize("rx", FOLDED_PATTERNS, ids=lambda rx: rx.pattern[:30])
def test_the_folded_patterns_answer_as_the_originals_on_sentences(rx):
    import random

    original = re.compile(rx.pattern, rx.flags | re.IGNORECASE)
    rng = random.Random(9)
    words = ("we will use Polars over pandas; DONE with the ETL. İt is done. from now on answer in English. "
             "TODO: check ſtate. the batch SIZE is now 64 and lr = 3e-4, ıt ǅ K ĸ ﬁnished twenty "
             "forget about Run_3 scratch that file.csv is wrong Open Question: ALWAYS never "
             "still unclear tbd Between A and B, we take A").split(" ")
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(400)]
    found = 0
    for s in sentences:
        a, b = original.search(s), rx.search(fold(s))
        assert (a and a.span()) == (b and b.span()), s
        found += a is not None
    assert 0 < found < len(sentences)


def test_cased_refuses_a_pattern_with_letters_ignorecase_would_have_to_fold():
    with pytest.raises(ValueError):
        cased(re.compile(r"\bMB\b", re.I))
    with pytest.raises(ValueError):
        cased(re.compile(r"[A-Z]x", re.I))
    with pytest.raises(ValueError):
        cased(re.compile(r"µs", re.I))
    long = r"\b(?:done|finished|closed|resolved|sorted out|wrapped up|taken care of)\s+" + "MB"
    with pytest.raises(ValueError) as e:
        cased(re.compile(long, re.I))
    assert str(e.value).endswith(": " + repr(long[:60]))  # the message quotes the pattern's first 60 characters
    with pytest.raises(ValueError):
        cased(re.compile(r"(?i)done"))  # an inline flag would keep it case-insensitive
    with pytest.raises(ValueError):
        cased(re.compile(r"(?P<a>x)(?P=a)", re.I))  # a name read as letters: refused, never wrong
    out = cased(re.compile(r"(?P<what>\bdone\b)\s\w", re.I))
    assert out.flags & re.IGNORECASE == 0 and out.pattern == r"(?P<what>\bdone\b)\s\w"
    assert cased(re.compile(r"(?P<Name>x)")).pattern == r"(?P<Name>x)"  # a group's name is no letter of its own
