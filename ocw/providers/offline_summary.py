"""The extractive summary the offline model writes, within a token budget.

Pure: text in, text out, counted with ocw's own tokenizer. The model
(ocw/providers/offline.py) decides what it reads — a summary request's text and tool
results — and says who wrote the answer (`PREFIX`); offline_reading.py finds the
sentences, content terms and identifiers in that text, and this module chooses what a
summary within a token budget keeps.
"""
from __future__ import annotations

import math
from collections import Counter

from ocw.providers.offline_reading import HEADER, LABELS, distinct, read_lines, reading
from ocw.text import focus as focus_rules
from ocw.text.tokens import count_kept, is_kept, line_pieces, tokens_at_least, truncate_to_tokens


def _listed(idents: list[str], covered: str, used: int, budget: int, cost) -> tuple[list[str], int]:
    """The identifiers listed after the summary's sentences, and the tokens used then: in
    order, each the sentences (`covered`) do not hold that still fits (`cost` of it and a
    separator). Once the room left is under 2, none can: none is counted or searched."""
    kept: list[str] = []
    # A text holds `bare` only if it holds each of its 4-character pieces: a set of the
    # covered text's pieces turns most identifiers away without a search of it.
    grams = {covered[i:i + 4] for i in range(len(covered) - 3)}
    for tok in idents:
        if budget - used < 2:
            break  # each costs a token at least and its separator: none fits any more
        bare = tok.strip("`")
        if all(bare[i:i + 4] in grams for i in range(len(bare) - 3)) and bare in covered:
            continue  # (tok in covered implies its bare form is)
        if used + cost(tok) + 1 <= budget:
            kept.append(tok)
            used += cost(tok) + 1
    return kept, used


def read_ahead(text: str, encoding: str) -> None:
    """Read the lines of `text` (a message's transcript line) ahead, and count what a summary
    counts of them — its sentences and identifiers — in `encoding` (the read-ahead,
    ocw/conversation/read_ahead.py: nothing is returned)."""
    for spans, found, *_ in read_lines(text):
        for piece in [s for s, _ in spans] + [tok for _, _, tok in found]:
            count_kept(piece, encoding)


def summarize(texts: list[str], budget: int, encoding: str, focus: str | None) -> str:
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
    text = "\n".join(t for t in texts if t)
    enc = encoding
    body, spans, found, sent_idents, sent_terms = reading(text)
    sents = [s for s, _ in spans]
    idents = focus_rules.focused_first(distinct(found), focus)
    wanted, focus_terms = focus_rules.kinds(focus), focus_rules.terms(focus)

    # Each sentence is read once: its terms, its identifiers and whether it is what the
    # focus asks for are kept per sentence, and each text is counted at most once (`cost`),
    # so scoring and choosing are linear in the transcript.
    n = len(sents)
    sent_ids = [len(ids) for ids in sent_idents]
    focused = [bool(focus_rules.matches(s, focus_terms)) or any(
        focus_rules.identifier_kind(t) in wanted for t in ids) for s, ids in zip(sents, sent_idents)] \
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
    def cost(s: str) -> int:  # kept for the kernel's life under 4 KB; the whole transcript once per compaction
        return count_kept(s, enc)

    at_least: dict[int, int] = {}

    def fits(i: int, room: int) -> bool:
        """cost(sents[i]) + 2 <= room; a sentence not counted yet whose lower bound (found
        once) is over the room is not tokenized (once the summary is nearly full, most are not)."""
        s = sents[i]
        if not is_kept(s, enc):
            low = at_least.get(i)
            if low is None:
                low = at_least[i] = tokens_at_least(s, enc)
            if low + 2 > room:
                return False
        return cost(s) + 2 <= room

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
    kept_ids, used = _listed(idents, "\n".join(sents[i] for i in chosen), used, budget, cost)
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
    while cost(result) > budget:  # last resort (a tiny budget): its first `budget` tokens, fewer if they count more
        result = truncate_to_tokens(full, k, enc) if k > 0 else ""
        k -= 1
    return result
