"""The identifier pass: exact strings a summary must not lose."""
from __future__ import annotations

import pytest

from ocw.context.summary_text import FACTS_MAX, facts_budget
from ocw.context.facts import FACTS_HEADER, append_facts, extract_identifiers, missing_identifiers
from ocw.text.tokens import count_text

ENC = "cl100k_base"


@pytest.mark.parametrize("text, ident", [
    ("see https://docs.example.org/guide/setup.html today", "https://docs.example.org/guide/setup.html"),
    ("GET https://api.example.com/v2/orders?limit=50.", "https://api.example.com/v2/orders?limit=50"),
    ("read /srv/data/raw/events.parquet first", "/srv/data/raw/events.parquet"),
    ("edit src/ocw/context/engine.py now", "src/ocw/context/engine.py"),
    ("the notebook analysis.ipynb", "analysis.ipynb"),
    ("call `load_events` again", "`load_events`"),
    ("it raised KeyError twice", "KeyError"),
    ("a ConnectionResetError here", "ConnectionResetError"),
    ("ticket ABC-123 is open", "ABC-123"),
    ("ticket JS-42 is open", "JS-42"),  # two letters: the shortest project key
    ("ticket ABCDEFGHIJ-7 is open", "ABCDEFGHIJ-7"),  # ten: the longest
    ("see issue #4521", "#4521"),
    ("commit deadbeef42 fixed it", "deadbeef42"),
    ("p95 is 250 ms", "250 ms"),
    ("it used 3.5 GB", "3.5 GB"),
    ("we loaded 1500 rows", "1500 rows"),
    ("the id 123e4567-e89b-12d3-a456-426614174000 matched", "123e4567-e89b-12d3-a456-426614174000"),
])
def test_extracts_each_kind(text, ident):
    assert ident in extract_identifiers(text)


@pytest.mark.parametrize("text", ["plan J-42 now", "plan ABCDEFGHIJK-7 now"])
def test_a_one_letter_or_eleven_letter_key_is_not_a_ticket(text):
    assert extract_identifiers(text) == []


def test_order_of_first_appearance_without_duplicates():
    text = "KeyError in src/a.py; then ABC-1 and KeyError again in src/a.py, then `x_y`."
    assert extract_identifiers(text) == ["KeyError", "src/a.py", "ABC-1", "`x_y`"]


def test_paths_inside_urls_and_backticks_are_not_repeated():
    idents = extract_identifiers("open https://example.com/a/b/c.py and `src/app.py`")
    assert idents == ["https://example.com/a/b/c.py", "`src/app.py`"]


def test_plain_prose_has_no_identifiers():
    assert extract_identifiers("We talked about the weather and the plan for next week.") == []


def test_missing_identifiers_are_those_the_summary_omits():
    source = "Fix KeyError in src/app.py (ABC-123), took 250 ms."
    summary = "Fixed the KeyError in src/app.py."
    assert missing_identifiers(source, summary) == ["ABC-123", "250 ms"]
    # a longer identifier does not count as the shorter one
    assert missing_identifiers("see ABC-12", "see ABC-123") == ["ABC-12"]
    # backticked names count as present without their backticks
    assert missing_identifiers("call `load_events`", "We call load_events daily.") == []


def test_append_facts_adds_only_what_is_missing_within_the_cap():
    source = "Files src/a.py and src/b.py, ticket OPS-1, and KeyError."
    out = append_facts("Summary mentions src/a.py.", source, 200, ENC)
    assert out.startswith("Summary mentions src/a.py.")
    tail = out.split(FACTS_HEADER, 1)[1]
    assert [x.strip() for x in tail.split(";")] == ["src/b.py", "OPS-1", "KeyError"]
    assert count_text(out, ENC) - count_text("Summary mentions src/a.py.", ENC) <= 200


def test_append_facts_unchanged_when_nothing_is_missing_or_no_room():
    s = "Mentions KeyError."
    assert append_facts(s, "KeyError", 100, ENC) == s
    assert append_facts(s, "ABC-1 and src/x.py", 0, ENC) == s
    assert append_facts(s, "ABC-1", 3, ENC) == s  # the header alone does not fit


def test_append_facts_skips_a_long_identifier_for_shorter_ones():
    long_url = "https://example.com/" + "/".join(f"segment{i}" for i in range(40))
    out = append_facts("S.", f"{long_url} then ABC-7 and KeyError", 30, ENC)
    assert long_url not in out
    assert "ABC-7" in out and "KeyError" in out


def test_appended_facts_are_found_again_by_the_next_pass():
    # The list is part of the summary text, so a rolling re-compaction carries it on.
    source = "Paths /srv/x/y.csv and `fn_a`, error ValueError, 12 MiB."
    first = append_facts("One line.", source, 200, ENC)
    assert missing_identifiers(source, first) == []
    second = append_facts("Another line.", first + "\n[user] new turn", 200, ENC)
    assert missing_identifiers(source, second) == []


# -- the engine's budget for the list ------------------------------------------------------------
def test_facts_budget_keeps_summary_plus_list_under_what_it_replaces():
    assert facts_budget(100, 20, 128_000) == 70  # 90 % of 100 − 20
    assert facts_budget(100, 95, 128_000) == 0
    assert facts_budget(100, 200, 128_000) == 0


def test_facts_budget_is_capped_by_the_window_and_the_maximum():
    assert facts_budget(1_000_000, 100, 8_192) == 8_192 // 16
    assert facts_budget(1_000_000, 100, 10_000_000) == FACTS_MAX


def test_snake_case_names_and_host_names_are_identifiers():
    text = "The flaky test test_merge_orders fails on orders_v2; the 503s come from api.example.com."
    ids = extract_identifiers(text)
    assert "test_merge_orders" in ids and "orders_v2" in ids and "api.example.com" in ids
    # Plain words, a single underscore-free name, and dotted numbers or method calls are not.
    assert extract_identifiers("merge orders version 3.2 df.groupby plain") == []
    # A host inside a URL adds nothing beyond the URL.
    assert extract_identifiers("see https://api.example.com/v1/x") == ["https://api.example.com/v1/x"]

# -- boundaries (issue 13): each of these fails if the matching bug is planted ---------------------
@pytest.mark.parametrize("text, expected", [
    ("issue #12 is open", ["#12"]),  # 3 characters: kept
    ("issue #123 is open", ["#123"]),
    ("issue #1 is open", []),  # one digit is not an issue number
    ("it took 5 s", ["5 s"]),  # 3 characters: kept
    ("it took 15s", ["15s"]),  # 3 characters: kept
    ("it took 5s", []),  # 2 characters: too short to be worth keeping
    ("it grew 1%", []),  # 2 characters
    ("it grew 10%", ["10%"]),
    ("see a.c first", ["a.c"]),  # 3 characters: kept
    ("see ab.c first", ["ab.c"]),
])
def test_three_characters_is_the_shortest_identifier_kept(text, expected):
    assert extract_identifiers(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("commit a1b2c3d fixed it", ["a1b2c3d"]),  # a 7-character short hash (git's default)
    ("commit a1b2c3 fixed it", []),  # 6 characters: not a hash
    ("commit " + "a1" * 20 + " fixed it", ["a1" * 20]),  # a full 40-character hash
    ("commit " + "a1" * 20 + "b fixed it", []),  # 41: not a hash
    ("commit 1234567 fixed it", []),  # digits only: a number, not a hash
    ("commit deadbee fixed it", []),  # letters only: a word, not a hash
])
def test_hashes_from_7_to_40_hex_characters(text, expected):
    assert extract_identifiers(text) == expected


def test_a_quantity_inside_a_larger_one_is_not_present():
    assert extract_identifiers("first 50 ms, then 150 ms") == ["50 ms", "150 ms"]
    assert missing_identifiers("it took 50 ms", "it took 150 ms") == ["50 ms"]
    assert missing_identifiers("it took 50 ms", "it took 0.50 ms") == ["50 ms"]  # after a dot: another number
    assert missing_identifiers("it took 50 ms", "it took 50 ms.") == []
    assert missing_identifiers("it took 50 ms", "(50 ms) at most") == []
    assert missing_identifiers("see ABC-12", "see ABC-12x") == ["ABC-12"]


def test_a_path_also_inside_a_url_or_backticks_is_listed_once():
    url = "https://example.com/src/app.py"
    assert extract_identifiers(f"open {url} then edit src/app.py") == [url]
    assert extract_identifiers(f"edit src/app.py, opened as {url}") == [url]
    assert extract_identifiers("run `src/app.py` or src/app.py") == ["`src/app.py`"]
    assert extract_identifiers("HTTP/1.1 at http://h.org/a/b") == ["HTTP/1.1", "http://h.org/a/b"]


def test_trailing_punctuation_is_not_part_of_an_identifier():
    text = "at https://x.org/a/b, then https://x.org/c/d; and https://x.org/e/f: also https://x.org/G/X."
    assert extract_identifiers(text) == ["https://x.org/a/b", "https://x.org/c/d", "https://x.org/e/f",
                                         "https://x.org/G/X"]
    assert extract_identifiers("see docs/INDEX.") == ["docs/INDEX"]


def test_a_backticked_name_is_present_when_the_summary_names_it_bare():
    assert missing_identifiers("call `MAX_X`", "we call MAX_X daily") == []
    assert missing_identifiers("call `XY_Z`", "we call XY_Z daily") == []
    assert missing_identifiers("call `MAX_X`", "we call MAX_XY daily") == ["`MAX_X`"]


# The list's cost: its header (3 tokens in cl100k and o200k) plus 2 for the blank line and
# the space after it, then each identifier plus 1 for its "; " separator.
def test_the_header_counts_against_the_cap_cl100k():
    assert count_text("Key identifiers:", ENC) == 3
    assert (count_text("ABC-7", ENC), count_text("KeyError", ENC)) == (3, 2)
    source, summary = "KeyError then ABC-7", "S."  # ABC-7 is the newer: it wins the room

    def listed(cap):
        out = append_facts(summary, source, cap, ENC)
        return out.split(f"{FACTS_HEADER} ", 1)[1].split("; ") if FACTS_HEADER in out else []

    assert listed(13) == ["KeyError", "ABC-7"]  # listed as they came
    assert listed(12) == ["KeyError", "ABC-7"]  # 5 + 4 + 3: exactly the cap
    assert listed(11) == ["ABC-7"]
    assert listed(9) == ["ABC-7"]  # 5 + 4
    assert listed(8) == ["KeyError"]  # 5 + 3: ABC-7 is skipped, the shorter one still fits
    assert listed(7) == []
    assert append_facts(summary, source, 7, ENC) == summary
    assert listed(5) == []  # the header alone


def test_the_cap_is_counted_in_the_given_encoding_o200k():
    path = "/srv/données/überall.csv"  # 8 tokens in o200k, 9 in cl100k
    assert (count_text(path, "o200k_base"), count_text(path, "cl100k_base")) == (8, 9)
    out = append_facts("S.", f"KeyError and {path}", 17, "o200k_base")  # 5 + 9 + 3
    assert out == f"S.\n\n{FACTS_HEADER} KeyError; {path}"
    out = append_facts("S.", f"KeyError and {path}", 16, "o200k_base")  # the newer path wins the room
    assert out == f"S.\n\n{FACTS_HEADER} {path}"


def test_the_header_is_counted_in_the_given_encoding(byte_encoding):
    # Every byte is a token: "\n\nKey identifiers: ABC-7" is 2 + 16 + 1 + 5 = 24 tokens.
    assert append_facts("S.", "ABC-7", 24, byte_encoding) == f"S.\n\n{FACTS_HEADER} ABC-7"
    assert append_facts("S.", "ABC-7", 23, byte_encoding) == "S."


def test_the_list_never_runs_over_its_cap():
    source = ("Paths /srv/app/main.py, src/ocw/engine.py and notes.md; errors KeyError, ValueError; tickets OPS-12, "
              "ABC-345; `load_events`, `fit_tail`; commit a1b2c3d; 250 ms, 3.5 GB, 1500 rows; issue #4521.")
    summary = "The team fixed the loader."
    assert len(missing_identifiers(source, summary)) == 14
    sizes = []
    for cap in range(0, 80):
        out = append_facts(summary, source, cap, ENC)
        assert out.startswith(summary)
        added = count_text(out, ENC) - count_text(summary, ENC)
        assert added <= cap, cap
        sizes.append(added)
    assert sizes[:8] == [0] * 8 and sizes[-1] > 40  # nothing below the header's cost; the list grows with the cap


def test_the_summary_is_kept_as_written():
    out = append_facts("  Indented summary.  \n", "KeyError", 100, ENC)
    assert out == f"  Indented summary.\n\n{FACTS_HEADER} KeyError"


# -- one pass (issue 28, item 3): the same answers as the per-identifier regexes ---------------
def _oracle_rx():
    """The matcher before issue 28: the plain ordered alternation of every pattern."""
    import re

    from ocw.context.facts import _PATTERNS

    return re.compile("|".join(f"(?:{p})" for p in _PATTERNS))


def _oracle_present(ident: str, text: str) -> bool:
    """The check before issue 28: one regex built per identifier."""
    import re

    bare = ident.strip("`")
    return re.search(r"(?<![\w.])" + re.escape(bare) + r"(?![\w])", text) is not None


_ORACLE_TEXT = (
    "see https://api.example.com/v2/orders?limit=50. and `src/app.py` or src/app.py, /srv/data/raw/x.parquet; "
    "~/notes/a.md ../up/one/two KeyError: ValueError raised; load_events() fit_tail_v2 OPS-12 ABC-345x "
    "123e4567-e89b-12d3-a456-426614174000 deadbeef42 cafe1234 #4521 #7 250 ms 0.50 ms 50 ms. 3,5 GB 12% 7 req/s "
    "api.example.com www.x.co.uk run_1 run_10 `run_1` data.duckdb 数据_表 über_schnell `…` `---` `a b` "
    "HTTP/1.1 x.y/z 1500 rows 80°C 2 GHz\n250\nms"
)


def test_the_factored_matcher_matches_what_the_plain_alternation_matches():
    rx = _oracle_rx()
    import random

    rng = random.Random(28)
    words = _ORACLE_TEXT.split(" ")
    texts = [_ORACLE_TEXT] + [" ".join(rng.choice(words) for _ in range(60)) for _ in range(200)] + \
            ["".join(rng.choice(words) for _ in range(20)) for _ in range(200)]  # glued: boundaries move
    from ocw.context.facts import _RX

    for t in texts:
        assert [(m.start(), m.group(0)) for m in _RX.finditer(t)] == [(m.start(), m.group(0)) for m in rx.finditer(t)]


def test_present_in_answers_as_one_regex_per_identifier_would():
    from ocw.context.facts import present_in
    import random

    rng = random.Random(3)
    words = _ORACLE_TEXT.split(" ")
    idents = sorted(set(extract_identifiers(_ORACLE_TEXT)) | {"`…`", "`---`", "...", "50 ms", "ms", "a b", "0.50"})
    assert len(idents) == 37
    summaries = [_ORACLE_TEXT, "", "50 ms", "x50 ms", ".50 ms", "50 msx", "(50 ms)", "--- … ...", "a b."] + \
                [" ".join(rng.choice(words) for _ in range(25)) for _ in range(150)] + \
                ["".join(rng.choice(words) for _ in range(8)) for _ in range(150)]
    hits = 0
    for s in summaries:
        expected = {i for i in idents if _oracle_present(i, s)}
        assert present_in(idents, s) == expected, s
        hits += len(expected)
    assert 0 < hits < len(idents) * len(summaries)  # both answers occur


@pytest.mark.parametrize("summary, absent", [
    ("it took 50 ms", False), ("it took 150 ms", True), ("it took 0.50 ms", True),  # a dot before: another number
    ("it took 50 ms.", False), ("50 ms", False), ("50 msx", True), ("_50 ms", True), ("é50 ms", True),
    ("-50 ms", False), ("50 ms_", True), ("50 ms 50 ms2", False), ("x50 ms then 50 ms", False),
])
def test_a_quantity_is_present_only_as_a_whole_token(summary, absent):
    assert missing_identifiers("it took 50 ms", summary) == (["50 ms"] if absent else [])


def test_an_identifier_without_a_word_character_is_still_checked():
    from ocw.context.facts import present_in

    assert present_in(["`---`"], "a --- b") == {"`---`"}
    assert present_in(["`---`"], "a -- b") == set()
    assert present_in(["`---`"], "x.--- b") == set()  # the dot rule holds for these too


def test_stale_phrases_take_their_identifiers_with_them():
    source = "Use /srv/a/b.csv and /srv/c/d.csv."
    assert append_facts("S.", source, 100, ENC, exclude=["the file /srv/a/b.csv is gone"]) == \
        f"S.\n\n{FACTS_HEADER} /srv/c/d.csv"
    assert append_facts("S.", source, 100, ENC, exclude=["the file /srv/a/b.csvx is gone"]) == \
        f"S.\n\n{FACTS_HEADER} /srv/a/b.csv; /srv/c/d.csv"


# -- each line matched once per kernel (issue 28, item 3) --------------------------------------
def test_the_line_memo_gives_the_same_identifiers_and_matches_a_line_once(monkeypatch):
    import random

    from ocw.context import facts
    from ocw.text.memo import TEXT_BOUND, Memo

    rng = random.Random(7)
    words = _ORACLE_TEXT.split(" ") + ["\n", "\n", "250", "ms", "\n\n"]
    texts = [_ORACLE_TEXT, "a 250\nms b", "x\n250 ms\ny", "5\n\nms run_1"] + \
            [" ".join(rng.choice(words) for _ in range(50)) for _ in range(150)]
    monkeypatch.setattr(facts, "LINE_MATCHES", Memo(TEXT_BOUND))
    with monkeypatch.context() as m:
        m.setattr(facts, "_crosses_lines", lambda text: True)  # every text matched whole: no memo
        plain = [facts.located_identifiers(t) for t in texts]
    assert facts.LINE_MATCHES == {}
    for _ in range(2):  # line by line, the second time from the lines' memo
        assert [facts.located_identifiers(t) for t in texts] == plain
    assert len(facts.LINE_MATCHES) > 100
    assert "250\nms" in extract_identifiers(texts[1]) and "250 ms" in extract_identifiers(texts[2])

    real = facts._RX

    class Counting:  # the matcher, counting the texts it is given
        seen: list[str] = []

        def finditer(self, text):
            self.seen.append(text)
            return real.finditer(text)

    counting = Counting()
    monkeypatch.setattr(facts, "_RX", counting)
    monkeypatch.setattr(facts, "LINE_MATCHES", Memo(TEXT_BOUND))
    extract_identifiers("run_1 here\nsrc/app.py\nrun_1 here")
    extract_identifiers("other\nsrc/app.py")
    assert counting.seen == ["run_1 here", "src/app.py", "other"]
    facts.read_lines("read ahead\nsrc/app.py")  # the read-ahead matches only the new line
    assert counting.seen[3:] == ["read ahead"]
    extract_identifiers("read ahead")
    assert len(counting.seen) == 4
    extract_identifiers("took 250\nms")  # a quantity across the newline: the whole text
    assert counting.seen[-1] == "took 250\nms"
    facts.read_lines("took 250\nms")  # the read-ahead keeps no such text
    assert counting.seen[-1] == "took 250\nms" and len(counting.seen) == 5
    extract_identifiers("\nms then\n٣\nms")  # a digit of any script before the newline
    assert counting.seen[-1] == "\nms then\n٣\nms"
    extract_identifiers("\nms at the start\nx\nms")  # a unit line after no digit: line by line
    assert counting.seen[-4:] == ["", "ms at the start", "x", "ms"]


def test_the_line_memo_is_bounded(monkeypatch):
    from ocw.context import facts
    from ocw.text.memo import Memo

    monkeypatch.setattr(facts, "LINE_MATCHES", Memo(24))  # 4 lines of "run_k" and their line breaks
    for k in range(10):
        assert extract_identifiers(f"run_{k}") == [f"run_{k}"]
        assert facts.LINE_MATCHES.size <= 24
    assert list(facts.LINE_MATCHES) == ["run_6", "run_7", "run_8", "run_9"]  # the older half dropped twice


@pytest.mark.parametrize("before, named", [
    ("p95 latency is", "p95 latency: 741 ms"), ("p95 latency is now  ", "p95 latency: 741 ms"),
    ("latency:", "latency: 741 ms"), ("latency =\t", "latency: 741 ms"), ("warm-up took of", "741 ms"),
    ("the budget was", "budget: 741 ms"), ("capped at", "capped: 741 ms"), ("raised to", "raised: 741 ms"),
    ("latency isn't", "741 ms"), ("latency ist", "741 ms"), ("latency", "741 ms"), ("latency is.", "741 ms"),
    # the name is found among many words before it (a search from the last five chunks on)
    ("so after all of that we saw the p95 read latency is now", "p95 read latency: 741 ms"),
    ("one two three four five six seven eight cold_start=", "seven eight cold_start: 741 ms"),
    ("one two three (warm cache) hit ratio at", "hit ratio: 741 ms"),
])
def test_a_quantity_is_named_only_after_a_connector(before, named):
    from ocw.context.facts import _named

    assert _named("741 ms", f"{before} 741 ms") == named


_W56 = "w" * 56  # a one-word name that, with " is ", fills the 60 characters read before a value


@pytest.mark.parametrize("source, at, named", [
    # the line the value is on, not the text's last line
    ("x\np95 latency is 741 ms\nthen we moved on", None, "p95 latency: 741 ms"),
    # a name on the line above is not the value's: the nearest newline before it bounds the read
    ("a\nlatency\nis 741 ms", None, "741 ms"),
    # 60 characters before the value and not one more: the name is the word that starts there
    (f"x{_W56} is 741 ms", None, f"{_W56}: 741 ms"),
    # six chunks and more: the search starts five chunks back, so the three-word name is whole
    ("we saw that the p95 request latency is 741 ms", None, "p95 request latency: 741 ms"),
    # no `at`: the last occurrence is the one named; an `at` given is the one read
    ("took 741 ms at first; p95 latency is 741 ms", None, "p95 latency: 741 ms"),
    ("p95 latency is 741 ms; then 741 ms", 15, "p95 latency: 741 ms"),
])
def test_the_name_of_a_quantity_is_read_on_its_own_line_before_the_occurrence(source, at, named):
    from ocw.context.facts import _named

    assert source[15:21] == "741 ms" or at is None
    assert _named("741 ms", source, at) == named


def test_stale_values_are_compared_without_their_backticks_and_no_memory_text_is_assumed():
    source = "we set `PORT` and `HOST_NAME`, and `XXXX` too"
    assert append_facts("S.", source, 100, ENC) == f"S.\n\n{FACTS_HEADER} `PORT`; `HOST_NAME`; `XXXX`"
    # a stale value given as the memory wrote it, in backticks, is left out like a bare one
    assert append_facts("S.", source, 100, ENC, exclude=["`PORT`"]) == f"S.\n\n{FACTS_HEADER} `HOST_NAME`; `XXXX`"
    assert append_facts("S.", source, 100, ENC, exclude=["PORT"]) == f"S.\n\n{FACTS_HEADER} `HOST_NAME`; `XXXX`"
    # the memory's text, when given, counts as present; by default there is none
    assert append_facts("S.", source, 100, ENC, present="PORT HOST_NAME") == f"S.\n\n{FACTS_HEADER} `XXXX`"


@pytest.mark.parametrize("stale", ["XR-12", "`XR-12`"])
def test_a_stale_value_is_never_listed_with_or_without_its_backticks(stale):
    # (A value beginning with X, like any other: the comparison strips backticks, nothing else.)
    out = append_facts("S.", "Ticket XR-12 was closed. Then OPS-9 opened.", 200, ENC, exclude={stale})
    assert out == f"S.\n\n{FACTS_HEADER} OPS-9"


def test_a_backticked_name_is_as_new_as_its_last_bare_mention():
    # Newest first by where the name last occurs, quoted or not: here after the ticket, so
    # with room for one identifier the name is kept and the ticket is not.
    source = "We call `load_data` first.\nThe ticket is OPS-4471.\nThen load_data runs again."
    head = count_text(FACTS_HEADER, ENC) + 2
    one = count_text("`load_data`", ENC) + 1
    assert count_text("OPS-4471", ENC) + 1 <= one  # the ticket would fit in its place
    assert append_facts("S.", source, head + one, ENC) == f"S.\n\n{FACTS_HEADER} `load_data`"


def test_the_list_is_in_order_of_first_mention_quoted_or_not():
    source = "load_data is slow.\nThe ticket is OPS-4471.\nWe call `load_data` now."
    assert append_facts("S.", source, 200, ENC) == f"S.\n\n{FACTS_HEADER} `load_data`; OPS-4471"


def test_the_kinds_a_focus_names_are_listed_first_whatever_their_order():
    source = "Ticket OPS-4471 first.\nThen config/settings.toml."
    assert append_facts("S.", source, 200, ENC) == f"S.\n\n{FACTS_HEADER} OPS-4471; config/settings.toml"
    assert (append_facts("S.", source, 200, ENC, focus="keep the file paths")
            == f"S.\n\n{FACTS_HEADER} config/settings.toml; OPS-4471")


# -- where each identifier is mentioned, from the one matching pass (issue 28, item 3) ---------
def _oracle_mentions(text: str) -> dict[str, tuple[int, int]]:
    """Each identifier's first and last match, read off the plain alternation."""
    out: dict[str, tuple[int, int]] = {}
    for m in _oracle_rx().finditer(text):
        ident = m.group(0).rstrip(".,;:")
        if len(ident) >= 3:
            out[ident] = (out[ident][0], m.start()) if ident in out else (m.start(), m.start())
    return out


def test_located_identifiers_give_each_ones_first_and_last_match_with_or_without_the_lines_memo():
    import random

    from ocw.context import facts

    rng = random.Random(29)
    words = _ORACLE_TEXT.split(" ") + ["\n", "\n", "250", "ms", "\n\n"]
    texts = [_ORACLE_TEXT, "a 250\nms b 250 ms", "run_1\nrun_1 x\n\nrun_1"] + \
            [" ".join(rng.choice(words) for _ in range(60)) for _ in range(150)]
    moved = 0
    for t in texts:
        expected = _oracle_mentions(t)
        idents, where = facts.located_identifiers(t)
        assert where == expected, t
        assert idents == extract_identifiers(t)
        assert facts.located_identifiers(t) == (idents, where)  # read again from the lines' memo
        moved += sum(a != b for a, b in where.values())
    assert moved > 100  # most identifiers are mentioned more than once: first and last differ
    assert facts.located_identifiers("run_1\nrun_1 x\n\nrun_1")[1] == {"run_1": (0, 15)}


def test_an_identifier_is_as_new_as_its_last_mention_as_itself():
    # app.py is named again only inside the longer path: that is the path's mention, so with
    # room for one identifier the newest — the path — is kept, then the ticket, then app.py.
    source = "We open app.py.\nThe ticket is OPS-4471.\nThen src/app.py changed."
    head = count_text(FACTS_HEADER, ENC) + 2
    costs = {i: count_text(i, ENC) + 1 for i in ("app.py", "OPS-4471", "src/app.py")}
    assert append_facts("S.", source, head + costs["src/app.py"], ENC) == f"S.\n\n{FACTS_HEADER} src/app.py"
    two = head + costs["src/app.py"] + costs["OPS-4471"]
    assert max(costs.values()) < costs["src/app.py"] + costs["OPS-4471"]
    assert append_facts("S.", source, two, ENC) == f"S.\n\n{FACTS_HEADER} OPS-4471; src/app.py"
    # listed in order of first mention: app.py's own first match is the first line
    assert append_facts("S.", source, 200, ENC) == f"S.\n\n{FACTS_HEADER} app.py; OPS-4471; src/app.py"


def test_a_quantity_is_named_where_it_is_last_mentioned_as_itself():
    # "8.4 ms" last stands as itself on the first line; later it is only part of "18.4 ms",
    # whose words before it are no name: the name read is the one before its own mention.
    source = "p95 latency is 8.4 ms\nthe total came to a 18.4 ms"
    assert append_facts("S.", source, 200, ENC) == f"S.\n\n{FACTS_HEADER} p95 latency: 8.4 ms; 18.4 ms"
    # the same when a focus names the kind
    assert append_facts("S.", source, 200, ENC, focus="the latency numbers") == \
        f"S.\n\n{FACTS_HEADER} p95 latency: 8.4 ms; 18.4 ms"


def test_a_one_token_identifier_fits_a_room_of_two():
    assert count_text("TypeError", ENC) == 1  # one cl100k token: with its separator, 2
    assert append_facts("S.", "TypeError", 5 + 2, ENC) == f"S.\n\n{FACTS_HEADER} TypeError"
    assert append_facts("S.", "TypeError", 5 + 1, ENC) == "S."


def test_a_quantity_is_named_only_while_it_may_still_fit(monkeypatch):
    from ocw.context import facts

    named: list[str] = []
    real = facts._named
    monkeypatch.setattr(facts, "_named", lambda ident, source, at=None: named.append(ident) or real(ident, source, at))
    source = "\n".join(f"step{k} latency is {100 + k} ms" for k in range(40))  # the newest is step39's
    assert count_text("step39 latency: 139 ms", ENC) == 7
    # The header (5), two of 7 tokens and a separator each, and a room of 2 left: a quantity's
    # "1xx" and "ms" are two runs, at least 2 tokens and a separator, so none is named.
    out = append_facts("S.", source, 5 + 8 + 8 + 2, ENC)
    assert out == f"S.\n\n{FACTS_HEADER} step38 latency: 138 ms; step39 latency: 139 ms"
    assert named == ["139 ms", "138 ms"]
    named.clear()  # a room of 3: each may fit, so each is named (and counted over it)
    assert append_facts("S.", source, 5 + 8 + 8 + 3, ENC) == out
    assert len(named) == 40


def test_a_focus_ranks_by_the_identifiers_kind_and_names_only_what_may_fit(monkeypatch):
    from ocw.context import facts

    named: list[str] = []
    real = facts._named
    monkeypatch.setattr(facts, "_named", lambda ident, source, at=None: named.append(ident) or real(ident, source, at))
    source = "\n".join(f"step{k} latency is {100 + k} ms" for k in range(6)) + "\nsee src/app.py"
    out = append_facts("S.", source, 5 + 9 + 5, ENC, focus="keep the file paths")
    assert out == f"S.\n\n{FACTS_HEADER} src/app.py; step5 latency: 105 ms"  # the path first, as the focus asks
    assert named == ["src/app.py", "105 ms"]  # then a room of 1: the list stops
    # "keep the numbers": a named quantity is a number too ("p95 latency: 741 ms" is no less one than
    # "18.4 ms"), so the list keeps its order of first mention, the path after both.
    source = "p95 latency is 8.4 ms\nsee src/app.py\nthe total came to a 18.4 ms"
    assert append_facts("S.", source, 200, ENC, focus="keep the numbers") == \
        f"S.\n\n{FACTS_HEADER} p95 latency: 8.4 ms; 18.4 ms; src/app.py"


def test_reading_lines_ahead_leaves_each_line_and_identifier_in_its_memo_at_its_weight():
    """`read_lines` returns nothing: what it does is fill the memos a compaction reads —
    each line's words and identifiers, each identifier's word runs and (with an
    encoding) its count — each entry weighing its text's length + 1. A line matched
    before is skipped, not the lines after it."""
    from ocw.context import facts
    from ocw.text import tokens

    first, second = "set `max_tokens` to 4096 in src/app.py", "see https://example.com/x, `run_id` and commit 1a2b3c4d"
    facts._line_identifiers(first)  # matched before: its identifiers are not read again
    kept_before, runs_before, words_before = tokens._KEPT.size, facts._RUNS.size, facts.LINE_WORDS.size
    facts.read_lines(f"{first}\n{second}", "o200k_base")
    idents = ["https://example.com/x", "`run_id`", "1a2b3c4d"]
    bare = ["https://example.com/x", "run_id", "1a2b3c4d"]  # runs are kept by the name without its backticks
    assert sorted(facts._line_identifiers(second)) == sorted(idents) and second in facts.LINE_MATCHES
    assert {b: facts._RUNS.get(b) for b in bare} == {b: facts._runs(b) for b in bare}
    assert facts._RUNS.size - runs_before == sum(len(b) + 1 for b in bare)
    assert all(tokens.is_kept(i, "o200k_base") for i in idents) and not tokens.is_kept("src/app.py", "o200k_base")
    assert tokens._KEPT.size - kept_before == sum(len(i) + 1 for i in idents)
    assert tokens._KEPT[("o200k_base", "1a2b3c4d")] == tokens.count_text("1a2b3c4d", "o200k_base")
    for line in (first, second):  # every line's words and where they stand, the matched one's too
        words: dict = {}
        for m in facts._WORD_RUN.finditer(line):
            words.setdefault(m.group(), []).append(m.start())
        assert facts.LINE_WORDS.get(line) == words and len(words) >= 6
    assert facts.LINE_WORDS.size - words_before == len(first) + 1 + len(second) + 1


def test_present_in_reads_each_line_once_and_each_identifiers_runs_once_at_their_weights():
    """`present_in`'s memos: each line of the text is an entry of its own (its words and
    where they stand, weighing the line's length + 1) and is handed back the next time,
    the same object, not read again; an identifier's runs are kept by its name without
    backticks (length + 1) and read back the next time, not made again."""
    from ocw.context import facts

    text = "call `max_tokens` here\nand max_tokens there, beside maxtokens"
    lines = text.split("\n")
    assert facts.present_in(["`max_tokens`"], text) == {"`max_tokens`"}
    assert [line in facts.LINE_WORDS for line in lines] == [True, True] and text not in facts.LINE_WORDS
    assert facts.LINE_WORDS.size == sum(len(line) + 1 for line in lines)
    words, runs = [facts.LINE_WORDS[line] for line in lines], facts._RUNS["max_tokens"]
    assert words[1] == {"and": [0], "max_tokens": [4], "there": [15], "beside": [22], "maxtokens": [29]}
    assert runs == (frozenset({"max_tokens"}), "max_tokens", 0) and facts._RUNS.size == len("max_tokens") + 1
    assert facts.present_in(["`max_tokens`", "maxtok"], text) == {"`max_tokens`"}
    assert all(facts.LINE_WORDS[line] is w for line, w in zip(lines, words)) and facts._RUNS["max_tokens"] is runs


def test_an_identifiers_runs_are_its_word_runs_and_the_longest_with_where_it_starts():
    """`_runs`: the word runs, and the longest (not the last in order, nor the greatest
    by text) with its offset in the identifier; none for one with no word character."""
    from ocw.context import facts

    assert facts._runs("ab.cdef.z") == (frozenset({"ab", "cdef", "z"}), "cdef", 3)
    assert facts._runs("zz-abc") == (frozenset({"zz", "abc"}), "abc", 3)
    assert facts._runs("---") == (frozenset(), "", 0)


def test_a_lines_identifiers_are_kept_at_its_length_plus_one():
    from ocw.context import facts

    line = "bump `retry_limit` to 7 in cfg/app.toml"
    assert sorted(facts._line_identifiers(line)) == ["`retry_limit`", "cfg/app.toml"]
    assert facts.LINE_MATCHES._sizes[line] == len(line) + 1 and facts.LINE_MATCHES.size == len(line) + 1


def test_reading_a_line_ahead_keeps_an_identifiers_runs_by_its_whole_name_without_backticks():
    """Only the backticks are stripped from the name the runs are kept by: an identifier
    that begins and ends with other characters (X here) keeps them."""
    from ocw.context import facts

    facts.read_lines("set `XML_MAX` to 4, not `MAX_X`")
    assert {"XML_MAX", "MAX_X"} <= set(facts._RUNS) and facts._RUNS["XML_MAX"] == facts._runs("XML_MAX")
