"""The built-in offline model: deterministic, honest, counted, and network-free."""
from __future__ import annotations

import re
import socket

import pytest
from refserver import user

from ocw.text.errors import ContextOverflowError
from ocw.providers import SUMMARY_MARKER, OfflineProvider, make_provider
from ocw.providers.offline_reading import identifiers
from ocw.text.tokens import count_message, count_text

TOOLS = [
    {"name": "list_variables", "description": "List the kernel's variables", "input_schema": {"type": "object", "properties": {}}},
    {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]

TRANSCRIPT = """user: I'm building a notebook that loads sales data from data/sales_2023.csv and plots monthly revenue.
assistant: Sure. Use pandas to read the file. Then group by month.
user: It fails with KeyError: 'month' when I run `df.groupby('month')`. The file is 45 MB.
assistant: The column is probably called `order_date`. Parse it with pd.to_datetime and derive the month.
user: That worked. Now the plot takes 3.5 s to render, see https://example.com/perf?id=7 for the profile.
assistant: Decided: switch to the Agg backend and cache the monthly revenue frame in cache/monthly.parquet.
user: Great, ticket DATA-142 is closed. Next we need a ValueError check for negative amounts in the sales data.
assistant: OK. I will add a validation step that raises ValueError for negative sales amounts.
user: Thanks, that's all for today. The weather is nice. I like coffee.
"""
IDENTS = ["data/sales_2023.csv", "KeyError", "`df.groupby('month')`", "45 MB", "`order_date`", "3.5 s",
          "https://example.com/perf?id=7", "cache/monthly.parquet", "DATA-142", "ValueError"]


def summarize(p: OfflineProvider, budget: int, transcript: str = TRANSCRIPT):
    return p.complete([user(transcript)], system=SUMMARY_MARKER + "\nSummarize: User intent, Decisions.", max_tokens=budget)


def test_reply_is_deterministic_says_offline_and_depends_on_the_message():
    a = OfflineProvider().stream([user("How do I read a CSV file with pandas? I have data.csv.")])
    b = OfflineProvider().stream([user("How do I read a CSV file with pandas? I have data.csv.")])
    c = OfflineProvider().stream([user("Explain DuckDB locking across kernels.")])
    assert a.content == b.content and a.usage == b.usage
    assert a.text.startswith("(offline model) ")
    assert "How do I read a CSV file with pandas?" in a.text and "pandas" in a.text
    assert c.text != a.text and "DuckDB" in c.text
    assert a.stop_reason == "end_turn" and a.model == "ocw-offline"


def test_streams_in_several_text_chunks():
    events: list = []
    reply = OfflineProvider().stream([user("tell me something about tokens")], on_event=lambda k, d: events.append((k, d)))
    assert len(events) >= 3 and {k for k, _ in events} == {"text"}
    assert "".join(d for _, d in events) == reply.text
    # Three words a chunk, as a model streams a few tokens at a time (the last holds the rest).
    assert all(len(d.split()) == 3 for _, d in events[:-1]) and 1 <= len(events[-1][1].split()) <= 3


def test_usage_is_counted_with_the_tokenizer():
    p = OfflineProvider()
    assert p.encoding == "cl100k_base" and p.context_window == 8192
    msgs = [user("first question"), {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]}, user("second one")]
    reply = p.stream(msgs, system="You are terse.")
    # ocw's own rules: the system prompt and every message with their framing, and the
    # assistant's header that ends the prompt (a chat template's generation prompt).
    expected = count_message("system", [{"type": "text", "text": "You are terse."}], "cl100k_base") + sum(
        count_message(m["role"], m["content"], "cl100k_base") for m in msgs
    ) + count_message("assistant", [], "cl100k_base")
    assert reply.usage.input_tokens == expected
    assert reply.usage.output_tokens == count_text(reply.text, "cl100k_base") > 0
    assert OfflineProvider(context_window=1000).context_window == 1000


def test_max_tokens_truncates():
    reply = OfflineProvider().stream([user("a fairly long question about many different things " * 3)], max_tokens=5)
    assert reply.stop_reason == "max_tokens" and count_text(reply.text) <= 5 and reply.usage.output_tokens <= 5


def test_prompt_over_the_window_overflows():
    p = OfflineProvider(context_window=50)
    p.stream([user("short")])
    with pytest.raises(ContextOverflowError, match="prompt is too long"):
        p.stream([user("word " * 200)])


@pytest.mark.parametrize("budget", [1, 8, 20, 40, 60, 100, 150, 400])
def test_summary_never_exceeds_its_budget(budget):
    reply = summarize(OfflineProvider(), budget)
    assert count_text(reply.text) <= budget
    assert reply.usage.output_tokens == count_text(reply.text)
    if budget >= 20:
        assert reply.text.startswith("(offline model) Summary")


def test_summary_keeps_identifiers_and_salient_sentences():
    p = OfflineProvider()
    reply = summarize(p, 300)
    for ident in IDENTS:
        assert ident.strip("`") in reply.text, ident
    assert "data/sales_2023.csv" in reply.text
    # recurring topic sentences beat one-off chit-chat
    assert "The weather is nice." not in reply.text and "I like coffee." not in reply.text
    assert "Summarize" not in reply.text  # the instruction is not part of the summary
    assert reply.text == summarize(p, 300).text == summarize(OfflineProvider(), 300).text  # deterministic
    assert count_text(reply.text) < count_text(TRANSCRIPT)  # it compacts


def test_summary_of_a_summary_keeps_identifiers():
    p = OfflineProvider()
    first = summarize(p, 150).text
    second = summarize(p, 150, first + "\nuser: Also see notes/todo.md for ABC-7.").text
    assert count_text(second) <= 150
    for ident in ("notes/todo.md", "ABC-7", "data/sales_2023.csv"):
        assert ident in second


def test_identifier_extraction():
    text = "See src/ocw/store.py and https://x.org/a/b.html, `make_provider` raised TimeoutError after 30 s (JIRA-12)."
    assert identifiers(text) == ["src/ocw/store.py", "https://x.org/a/b.html", "`make_provider`", "TimeoutError", "30 s", "JIRA-12"]


def test_tool_call_when_the_user_names_a_tool():
    p = OfflineProvider()
    events: list = []
    reply = p.stream([user("please call list_variables")], tools=TOOLS, on_event=lambda k, d: events.append((k, d)))
    assert reply.stop_reason == "tool_use"
    assert reply.tool_uses == [{"type": "tool_use", "id": "toolu_offline_1", "name": "list_variables", "input": {}}]
    assert reply.text.startswith("(offline model)")
    assert ("tool_use", reply.tool_uses[0]) in events


@pytest.mark.parametrize(
    "text, expected",
    [
        ('run read_file(path="notes.txt", limit=5)', {"path": "notes.txt", "limit": 5}),
        ("use `read_file` with path=notes.txt, strict=true", {"path": "notes.txt", "strict": True}),
        ("use `read_file` on notes.txt", {}),
    ],
)
def test_tool_arguments_are_parsed(text, expected):
    reply = OfflineProvider().stream([user(text)], tools=TOOLS)
    assert reply.tool_uses[0]["name"] == "read_file" and reply.tool_uses[0]["input"] == expected


def test_tool_ids_are_deterministic_and_unique_in_a_conversation():
    history = [
        user("call list_variables"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_offline_1", "name": "list_variables", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_offline_1", "content": "x = 1"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        user("now call read_file"),
    ]
    assert OfflineProvider().stream(history, tools=TOOLS).tool_uses[0]["id"] == "toolu_offline_2"


def test_tool_results_are_reported_not_called_again():
    results = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_offline_1", "content": "df: DataFrame (3 rows); " + "x" * 300},
    ]}
    reply = OfflineProvider().stream([user("call list_variables"), results], tools=TOOLS)
    assert reply.tool_uses == [] and reply.stop_reason == "end_turn"
    assert reply.text.startswith("(offline model) The tool returned: df: DataFrame (3 rows);")
    assert len(reply.text) < 260


def test_no_tool_mentioned_means_a_normal_reply():
    reply = OfflineProvider().stream([user("what variables do I have?")], tools=TOOLS)
    assert reply.tool_uses == [] and reply.text.startswith("(offline model)")


def test_works_without_network_or_keys(monkeypatch):
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # a dead port

    def no_network(*a, **k):
        raise AssertionError("the offline model touched the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    p = make_provider()
    assert isinstance(p, OfflineProvider) and p.offline and p.name == "offline"
    assert p.stream([user("hello")]).text.startswith("(offline model)")
    assert count_text(summarize(p, 50).text) <= 50
    assert make_provider("offline", context_window=4096).context_window == 4096
    p.close()


def test_summary_never_harvests_ocw_prune_stubs_or_cut_notes():
    """ocw's own stubs say how big a pruned result was; those token counts are not the
    conversation's numbers and must not come back as identifiers (issue 22)."""
    p = OfflineProvider()
    own = ("tool: [old tool output pruned: run_cell(code='show()') returned 1,776 tokens; ocw keeps the full "
           "result, call the tool again if it is needed]\n"
           "tool: rows…\n[… 3,210 of 4,000 tokens cut from this tool result; the full result is in the ocw store]\n"
           "user: The loader reads data/sales_2023.csv and took 30 s.")
    text = summarize(p, 300, own).text
    assert "data/sales_2023.csv" in text and "30 s" in text  # the conversation's own facts stay
    assert "1,776" not in text and "3,210" not in text and "tokens" not in text


def test_the_identifier_hint_never_hides_an_identifier(monkeypatch):
    """Issue 28: text without the hint's characters skips the searches; the answers are
    those of the full searches on every sentence of generated sessions and on edge cases."""
    from ocw.bench.quality_gen import generate
    from ocw.providers import offline_reading as offline

    texts = ["see `x`", "a/b", "run 5 ms", "file.py here", "KeyError raised", "ABC-1", "https://h.io/x",
             "plain words only.", "End. Next", "Ünïcode ٣ ms", "DataWarning", "no.", "e.g. this", ""]
    for seed in range(6):
        for st in generate(seed, 30, "ABC"[seed % 3]).steps:
            texts += offline.sentences(st.text)
    fast = [offline.identifiers(t) for t in texts]
    always = type("Always", (), {"search": staticmethod(lambda t: True)})
    monkeypatch.setattr(offline, "_IDENT_HINT", always)
    assert fast == [offline.identifiers(t) for t in texts]
    assert sum(bool(f) for f in fast) >= 40  # identifiers were found ...
    monkeypatch.undo()
    assert sum(not offline._IDENT_HINT.search(t) for t in texts) >= 500  # ... and many texts skipped the search
    assert offline.identifiers("Ünïcode ٣ ms") == ["٣ ms"]  # a digit of any script


def _generated_texts(seeds=range(6)):
    from ocw.bench.quality_gen import generate

    return ["\n".join(st.text for st in generate(seed, 40, "ABC"[seed % 3]).steps) for seed in seeds]


def test_the_patterns_needs_and_lines_never_change_the_identifiers(monkeypatch):
    """Issue 28: a pattern runs only where what it needs occurs, and the body's patterns (all
    but the quantities) only in the lines holding it; the answers are those of every pattern
    over the whole text."""
    from ocw.providers import offline_reading as offline

    edge = ["a.pyhttp://x.io/y", "see http://a.b/c.py and a/b", "took 4\nms", "x\nDataWarning\nAB-12 `q`\n/a/b",
            "line.md\nnext", "Error-1 ZZ-9\n-", "a/\nb", "`a\nb`", "run 5\n\n ms"]
    texts = edge + _generated_texts() + [offline.sentences(t)[0] for t in _generated_texts()]
    fast = [offline.identifiers(t) for t in texts]
    monkeypatch.setattr(offline, "_IDENT_NEEDS", tuple(lambda t: True for _ in offline._IDENT_NEEDS))
    monkeypatch.setattr(offline, "_lines", lambda text: None)
    assert fast == [offline.identifiers(t) for t in texts]
    assert fast[0] == ["a.py", "http://x.io/y"] and fast[2] == ["4\nms"] and fast[3] == ["DataWarning", "AB-12", "`q`"]
    assert sum(len(f) for f in fast) > 40


def test_the_count_bound_never_changes_a_summary_and_spares_counts(monkeypatch):
    from ocw.providers import offline_summary as offline
    from ocw.text import tokens

    p = OfflineProvider(context_window=200_000)
    counted: list[str] = []
    real = tokens.get_encoding

    class Spy:  # the encoding, recording what it tokenizes
        def __init__(self, enc):
            self.enc = enc

        def encode_ordinary(self, text):
            counted.append(text)
            return self.enc.encode_ordinary(text)

    monkeypatch.setattr(offline, "count_kept", lambda t, e="cl100k_base": len(Spy(real(e)).encode_ordinary(t)) if t else 0)
    texts = _generated_texts() + [TRANSCRIPT]
    fast = [summarize(p, b, t).text for t in texts for b in (120, 600)]
    spared = len(counted)
    monkeypatch.setattr(offline, "tokens_at_least", lambda text, encoding: 0)
    counted.clear()
    assert fast == [summarize(p, b, t).text for t in texts for b in (120, 600)]
    assert spared < len(counted) * 3 // 4  # the bound left a quarter of the counts or more untaken


def test_an_identifier_is_listed_once_with_or_without_its_backticks():
    assert identifiers("edit foo.py then `foo.py` again") == ["foo.py"]
    assert identifiers("edit `foo.py` then foo.py again") == ["`foo.py`"]


def test_the_digest_answers_the_users_words_not_the_summary_before_them():
    from ocw.text.prompts import SUMMARY_PREFIX

    summary = {"type": "text", "text": SUMMARY_PREFIX + " Earlier: the team chose polars over pandas."}
    reply = OfflineProvider().stream([{"role": "user", "content": [summary, {"type": "text", "text": "How big is orders.csv?"}]}])
    assert "begins \u201cHow big is orders.csv?\u201d" in reply.text and "polars" not in reply.text
    assert reply.text.endswith("\u2014 keywords: big, orders.csv.")  # the digest's keywords close it


def test_ocw_s_own_digest_lines_are_never_summarized_with_or_without_the_role_mark():
    p = OfflineProvider()
    own = ("It is 812 tokens long and begins \u201cquux frobnicates\u201d\n"
           "[assistant] It is 95 tokens long and begins \u201czap\u201d\n"
           "user: The loader reads data/sales_2023.csv and took 30 s.")
    text = summarize(p, 300, own).text
    assert "data/sales_2023.csv" in text and "30 s" in text
    assert "tokens long" not in text and "812" not in text and "frobnicates" not in text


def test_a_lone_quote_is_an_argument_value_of_its_own():
    p = OfflineProvider()
    reply = p.stream([user("please call read_file with path=' now")], tools=TOOLS)
    assert reply.content[-1]["input"] == {"path": "'"}
    reply = p.stream([user('please call read_file with path=" now')], tools=TOOLS)
    assert reply.content[-1]["input"] == {"path": '"'}


def test_identifiers_are_dropped_last_when_the_joined_summary_is_over_budget(monkeypatch):
    """Joins can count more than their parts: here every character is a token, so the ", "
    between identifiers costs two where one was planned. The summary is trimmed, sentences
    first, then identifiers, until it fits."""
    from ocw.providers import offline_summary as offline

    monkeypatch.setattr(offline, "count_kept", lambda text, encoding="cl100k_base": len(text))
    filler = "and then the job went on with the next batch of rows " * 10  # no sentence fits the summary
    lines = [f"Step {k} wrote out/part_{k}.parquet and logs/run_{k}.log {filler}." for k in range(40)]
    text = OfflineProvider(context_window=200_000).summarize([user("\n".join(lines))], 400)
    assert len(text) <= 400
    assert offline.LABELS[0] not in text  # no sentence fits ...
    listed = text.split(offline.LABELS[1] + " ")[1].split(", ")
    assert 5 < len(listed) < 120  # ... then identifiers, from the end, until it fit
    assert listed[0] == "out/part_0.parquet"
    # Dropped whole, from the end: every one listed is an identifier of the text, none cut short.
    assert all(re.fullmatch(r"out/part_\d+\.parquet|logs/run_\d+\.log", i.rstrip(".")) for i in listed), listed
    # "Never over the budget" includes the budget itself: here the trimmed summary fills 401 exactly.
    exact = OfflineProvider(context_window=200_000).summarize([user("\n".join(lines))], 401)
    assert len(exact) == 401


def test_keywords_are_the_five_most_frequent_content_words_numbers_included():
    from ocw.providers.offline_reading import keywords

    text = "retry 8080 8080 8080 port port port alpha alpha beta beta gamma gamma delta delta epsilon"
    assert keywords(text) == ["8080", "port", "alpha", "beta", "gamma"]
    reply = OfflineProvider().stream([user(text)])
    assert reply.text.endswith("\u2014 keywords: 8080, port, alpha, beta, gamma.")
    # A number that ends a sentence is the number: its full stop is not part of it (3.5 keeps its point).
    assert keywords("It took 250. Then it took 250 again. The build took 250. Then 3.5 ms.") == \
        ["took", "250", "again", "build", "3.5"]


def test_readable_drops_and_strips_exactly_what_every_pattern_would_on_every_line():
    """`readable` runs each pattern only on lines holding its literal: the same text as
    running every pattern on every line, on lines made of every piece it knows."""
    import random

    from ocw.providers import offline_reading as o
    from ocw.text.prompts import PRUNED_STUB_OPEN

    def everywhere(text):
        return "\n".join(o._OWN_STUB.sub(" ", o._ROLE_MARK.sub("", ln)) for ln in text.splitlines()
                         if not ln.strip().startswith(o._OWN_LINES) and not o._WRAPPER.match(ln)
                         and not o._OWN_DIGEST.search(ln))

    pieces = ["[user] ", "[tool:run_sql] ", "[assistant]", " [user] ", "<new-turns>", "</previous-summary>", "  (none) ",
              "(offline model) said", "It is 12 tokens long and begins", "[assistant] It is 3 tokens long and begins",
              f"{PRUNED_STUB_OPEN} 1,776 tokens]", "[… 1,200 of 3,000 tokens cut from this tool result]", "[… x]",
              o.HEADER, o.LABELS[0], " " + o.LABELS[1] + " a.py", "plain words", "worker[3] t=1.5ms", "<b>", "It is"]
    rng = random.Random(11)
    for _ in range(2000):
        text = "\n".join("".join(rng.choice(pieces) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 6)))
        assert o.readable(text) == everywhere(text), repr(text)
    assert o.readable("[user] keep this\n<new-turns>\n(offline model) no") == "keep this"


def test_a_sentence_that_fills_the_room_to_the_token_is_kept_and_one_more_is_not(monkeypatch):
    """A token per word, and a lower bound as high as the count: the first sentence (the
    opening's bonus ranks it first) is kept when the room is exactly its tokens plus its two
    of framing, and not one token before. (No identifiers: no room is held back for them.)"""
    from ocw.providers import offline_summary as o

    words = lambda text, encoding="cl100k_base": len(text.split())  # noqa: E731
    monkeypatch.setattr(o, "count_kept", words)
    monkeypatch.setattr(o, "tokens_at_least", words)
    fillers = "red green blue brown amber coral ivory olive pearl ruby slate teal umber violet wheat".split()
    sents = [f"The alpha beta gamma delta test holds {w} here." for w in fillers * 3]
    texts = [" ".join(sents[:15]), " ".join(s.replace("here", "there") for s in sents[15:])]
    first = sents[0]
    exact = words(o.HEADER) + 8 + words(first) + 2
    assert o.summarize(texts, exact, "cl100k_base", None).endswith("- " + first)
    assert o.LABELS[0] not in o.summarize(texts, exact - 1, "cl100k_base", None)


def test_a_budget_under_the_header_keeps_its_first_tokens_all_of_them():
    from ocw.providers import offline_summary as o
    from ocw.text.tokens import count_text

    for budget in (1, 5, 9):
        text = o.summarize(["One sentence here. Another one there."], budget, "cl100k_base", None)
        assert o.HEADER.startswith(text) and count_text(text, "cl100k_base") == budget


def test_identifiers_are_not_counted_once_the_summary_has_no_room_for_one(monkeypatch):
    from ocw.providers import offline_summary as offline

    text = " ".join(f"Step {k} took {100 + k} ms." for k in range(300))
    idents = identifiers(text)
    assert len(idents) == 300 and idents[0] == "100 ms"
    counted: list[str] = []
    real = offline.count_kept
    monkeypatch.setattr(offline, "count_kept", lambda t, e="cl100k_base": counted.append(t) or real(t, e))
    out = offline.summarize([text], 120, "cl100k_base", None)
    listed = out.split(offline.LABELS[1], 1)[1].strip().split(", ")
    assert 0 < len(listed) < 300 and real(out, "cl100k_base") <= 120
    # Counted: those listed, and at most the one that then ran over (each "1xx ms" is 2 tokens).
    assert len({t for t in counted if t in set(idents)}) <= len(listed) + 1


def test_sentence_spans_are_the_sentences_each_at_its_place():
    import random

    from ocw.providers.offline_reading import sentence_spans, sentences, _SENT_SPLIT

    def plain(text):  # the reading before spans: lines, split after . ! ?, stripped of marks
        return [s.strip(" \t-*#>") for line in text.splitlines() for s in _SENT_SPLIT.split(line.strip())
                if len(s.strip(" \t-*#>")) >= 3]

    rng = random.Random(12)
    alphabet = list("ab AZ09.,!?/-*#>`'\"([\t\n\r\x0b\x0c\x1c\x85\u2028") + ["Hello. World", "x! Y", "- item", "1. A"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    for text in texts:
        spans = sentence_spans(text)
        assert [s for s, _ in spans] == plain(text) == sentences(text)
        assert all(text[at:at + len(s)] == s for s, at in spans)
    assert sentence_spans("- One. Two!\r\n  > three") == [("One.", 2), ("Two!", 7), ("three", 17)]


def test_sentence_identifiers_are_each_sentences_own_even_where_a_match_crosses_its_edge():
    import random

    from ocw.providers.offline_reading import _found, identifiers, readable, sentence_identifiers, sentence_spans

    def both(text):  # (read from the one pass, matched alone)
        body = readable(text)
        spans = sentence_spans(body)
        return sentence_identifiers(_found(body), spans), [identifiers(s) for s, _ in spans]

    # A match that reaches across a sentence's edge: the path takes the list mark before
    # "foo/bar.py" (the body's match starts before the sentence); "`a. B`" runs on into the
    # next sentence (the body's match ends after it). Each of those sentences is read alone.
    assert both("-foo/bar.py see https://x.org/a/b.c now") == ([["foo/bar.py", "https://x.org/a/b.c"]],) * 2
    assert both("`code` `a. B` here") == ([["`code`"], []],) * 2
    pieces = ["Set `batch_size` to 64.", "- src/app.py failed with KeyError.", "It took 250 ms. Then 3 s.",
              "see https://x.org/a/b.c now", "ABC-123 is open", "ok", "-foo/bar.py", "#> notes.md", "`a. B` here",
              "http://x.org/a-", "took 5 -", "ms later", "a/b-", "x.py-", "Done! 3 KB", "`code`-", "OPS-12-"]
    rng = random.Random(28)
    for _ in range(1500):
        text = "\n".join(" ".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 6)))
        got, alone = both(text)
        assert got == alone, text


def test_identifiers_are_listed_while_a_room_of_two_is_left_and_not_after():
    from ocw.providers.offline_summary import _listed

    costs = {"TypeError": 1, "src/app.py": 3, "OPS-12": 3}  # TypeError is one cl100k token
    asked: list[str] = []

    def cost(tok):
        asked.append(tok)
        return costs[tok]

    # A room of 2: src/app.py (3 and a separator) is skipped, TypeError (1 and a separator) fits.
    assert _listed(["src/app.py", "TypeError"], "", 8, 10, cost) == (["TypeError"], 10)
    asked.clear()  # a room of 1: nothing can fit, so nothing is counted
    assert _listed(["TypeError", "OPS-12"], "", 9, 10, cost) == ([], 9) and asked == []
    # one the sentences hold is not listed again, backticked or not
    assert _listed(["`OPS-12`", "TypeError"], "see OPS-12", 0, 10, cost) == (["TypeError"], 2)
