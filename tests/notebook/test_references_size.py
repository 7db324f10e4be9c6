"""A referenced value is cut in time that grows with what is kept (issue 28), and
the cut is marked exactly when the value is over its budget (both sides pinned)."""
from __future__ import annotations

import pytest

from ocw.notebook import references
from ocw.notebook.references import cut
from ocw.text import tokens
from ocw.text.tokens import count_text

ENC = "cl100k_base"


@pytest.fixture
def tokenized(monkeypatch):
    """Every length of text the tokenizer is asked to count or cut."""
    seen: list[int] = []
    real = tokens.cut_to_tokens

    def cut_counted(text, n, encoding="cl100k_base"):
        seen.append(len(text))
        return real(text, n, encoding)

    monkeypatch.setattr(tokens, "cut_to_tokens", cut_counted)
    return seen


def test_a_huge_value_is_tokenized_only_as_far_as_its_budget(tokenized):
    value = "row, 12.5, alpha beta gamma\n" * 400_000  # 11.2 million characters
    text, note = cut(value, "big", 2000, ENC)
    # one encoding of a 4,064-character prefix (2 characters a token), then one of the
    # length its density says the budget needs: ~12k characters of 11.2 million
    assert len(tokenized) == 2 and tokenized[0] == 4064 and tokenized[1] < 20_000
    assert text.startswith("row, 12.5, alpha") and value.startswith(text.split("\n[…")[0])
    assert count_text(text.split("\n[…")[0], ENC) <= 2000
    assert note == "big was cut to 2,000 tokens of its 11,200,000 characters"
    kept = len(text.split("\n[…")[0])
    assert text.endswith(f"[… big cut here: {11_200_000 - kept:,} of 11,200,000 characters not shown]")


def test_exactly_the_budget_is_sent_whole_and_one_more_is_cut():
    word = " w"  # one token each in cl100k
    at = word * 2000
    assert count_text(at, ENC) == 2000
    assert cut(at, "v", 2000, ENC) == (at, None)
    over = word * 2001
    text, note = cut(over, "v", 2000, ENC)
    assert note == "v was cut to 2,000 of 2,001 tokens"
    assert text == word * 2000 + "\n[… v cut here: 1 of 2,001 tokens not shown]"


def test_a_value_of_long_tokens_is_counted_whole_at_the_boundary(tokenized):
    # 12 characters a token: the first prefix (8 a token) holds fewer than the budget,
    # so the prefix grows to the whole value, which is counted — and sent whole at
    # exactly the budget, cut one token below it.
    value = " information" * 1000
    assert count_text(value, ENC) == 1000 and len(value) == 12_000
    assert cut(value, "v", 1000, ENC) == (value, None)
    assert 12_000 in tokenized  # counted whole, not judged by a prefix
    text, note = cut(value, "v", 999, ENC)
    assert note == "v was cut to 999 of 1,000 tokens"
    assert text == " information" * 999 + "\n[… v cut here: 1 of 1,000 tokens not shown]"


def test_the_module_uses_the_bounded_cut():
    assert references.cut is cut
