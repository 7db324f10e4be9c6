"""Issue 17: pruning old tool output without an LLM call — through the magics in a real
IPython shell with the offline model and a real @ocw.tool, on real DuckDB files.

What is pinned: the acceptance (a tool-heavy session — 10 results of ~2k tokens on a
16k window — runs more turns before its first summary with pruning than without, and
the model still sees which tools ran), that a prune is a generation change shown as its
own line, that the store keeps every result whole, that the pruned figure needs no
content read on open, and that a rewind before the mark brings the results back.
"""
from __future__ import annotations

import json
import re

import pytest

import ocw
from ocw.context import prune as prune_rules
from ocw.providers.offline import OfflineProvider
from ocw.text.tokens import count_message

TOOL = '''
import ocw
@ocw.tool
def read_log(day: int) -> str:
    "The server log of one day."
    return "\\n".join(f"day {day} line {i}: GET /api/orders/{i} 200 in {i % 97} ms" for i in range(110))
'''
STUB = re.compile(r'^\[old tool output pruned: read_log\(\{"day": (\d+)\}\) returned ([\d,]+) tokens; ')


def ok(shell, cell: str, capsys) -> str:
    res = shell.run_cell(cell, store_history=True)
    out = capsys.readouterr().out
    assert res.error_in_exec is None and res.error_before_exec is None, out
    return out


@pytest.fixture
def sent(monkeypatch):
    """Every request the offline model receives (its messages), recorded on the way in."""
    calls: list[list[dict]] = []
    real = OfflineProvider.stream

    def stream(self, messages, **kw):
        calls.append(json.loads(json.dumps(messages)))
        return real(self, messages, **kw)

    monkeypatch.setattr(OfflineProvider, "stream", stream)
    return calls


def tool_turns(shell, capsys, *, prune: bool, turns: int = 10) -> tuple[int | None, list[str]]:
    """`turns` %%chat cells, each making the model read one day's log (~2.2k tokens) on a
    16k window. Returns (the turn of the first summary or None, the cells' outputs)."""
    ok(shell, TOOL, capsys)
    ok(shell, "%config Ocw.context_window = 16000", capsys)
    ok(shell, f"%config Ocw.prune_tool_output = {prune}", capsys)
    ok(shell, f"%new --name tools-{prune}", capsys)
    first, outs = None, []
    for day in range(1, turns + 1):
        outs.append(ok(shell, f"%%chat\nPlease call read_log with day={day} and tell me what you see.", capsys))
        if first is None and ocw.current_session().compaction_count:
            first = day
    return first, outs


def test_pruning_keeps_a_tool_heavy_session_under_the_line_longer_and_the_model_sees_every_tool(ip, capsys, sent):
    without, outs_without = tool_turns(ip, capsys, prune=False)
    assert without == 6  # measured: the sixth turn's second step crosses 80 % of 16,000
    assert not any("Pruned old tool output" in o for o in outs_without)

    first_request = len(sent)
    with_pruning, outs = tool_turns(ip, capsys, prune=True)
    assert with_pruning is None  # no summary in all ten turns
    s = ocw.current_session()
    assert s.compaction_count == 0 and s.occupancy()["ratio"] < 0.8
    pruned_lines = [ln for o in outs for ln in o.splitlines() if ln.startswith("Pruned old tool output")]
    assert len(pruned_lines) == 1, pruned_lines  # measured: in turn 6, between its two steps
    assert all(re.fullmatch(r"Pruned old tool output: \d+ results? replaced by one-line stubs \(the store keeps "
                            r"them whole\), [\d,]+ → [\d,]+ tokens", ln) for ln in pruned_lines)

    # The last request: every one of the ten calls is there, with its result or its stub.
    last = sent[-1]
    assert len(sent) > first_request
    calls = [b for m in last for b in m["content"] if b.get("type") == "tool_use"]
    results = [b for m in last for b in m["content"] if b.get("type") == "tool_result"]
    assert [c["input"]["day"] for c in calls] == list(range(1, 11))
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in calls]
    stubs = [STUB.match(r["content"]) for r in results]
    stubbed_days = [int(m.group(1)) for m in stubs if m]
    assert stubbed_days == list(range(1, len(stubbed_days) + 1)) and 5 <= len(stubbed_days) < 10
    assert all(m.group(2) == "2,199" or m.group(2) == "2,200" for m in stubs if m)
    whole = [r["content"] for r in results if not STUB.match(r["content"])]
    assert whole and all(r.startswith(f"day {10 - len(whole) + 1 + i} line 0") for i, r in enumerate(whole))


def test_a_prune_is_a_generation_change_with_its_own_line_and_the_store_keeps_the_results(ip, capsys, store_dump):
    tool_turns(ip, capsys, prune=False, turns=5)  # 5 results, under the line
    s = ocw.current_session()
    before = store_dump(s.store)
    gen, count = s.generation, s.compaction_count
    assert s.occupancy()["basis"] == "measured"
    done = s.prune_tool_output()
    assert done["results"] == 4 and done["before"] - done["after"] == done["freed"] > 800
    assert s.generation == gen + 1 and s.compaction_count == count  # not a compaction
    occ = s.occupancy()
    assert occ["basis"] == "estimated" and occ["pruned"] == {"results": 4, "tokens": done["freed"]}
    parts = s.occupancy_parts()
    assert parts["messages"] == s._head.cum - done["freed"]
    assert sum(m.get("tokens", 0) for m in s.rendered_history()[1:]) == parts["messages"]
    table = ok(ip, "%context --text", capsys)
    assert f"  Pruned tool output: 4 results, {done['freed']:,} tokens replaced by one-line stubs" in table.splitlines()
    # Only the session row changed; every node — every result — is as it was.
    after = json.loads(store_dump(s.store))
    assert after["nodes"] == json.loads(before)["nodes"]
    tool_rows = [n for n in after["nodes"] if n["role"] == "tool"]
    assert len(tool_rows) == 5 and all(len(json.loads(n["content"])[0]["content"]) > 5000 for n in tool_rows)
    # Nothing more to prune: a second call writes nothing.
    assert s.prune_tool_output() is None and s.generation == gen + 1


def test_the_pruned_figure_needs_no_content_read_when_a_session_is_opened(ip, capsys, tmp_path):
    tool_turns(ip, capsys, prune=False, turns=5)
    s = ocw.current_session()
    s.prune_tool_output()
    expected, path, sid = s.occupancy_parts()["messages"], s.store.path, s.id
    ip.run_line_magic("unload_ext", "ocw")  # closes the file
    st = ocw.Store(path)
    try:
        reads = []
        real = st.backend.content
        st.backend.content = lambda sid, nodes: reads.append([n.id for n in nodes]) or real(sid, nodes)
        fresh = st.open_session(sid)
        assert fresh.occupancy_parts()["messages"] == expected and fresh.occupancy()["pruned"]["results"] == 4
        assert reads == []  # the figure stored with the mark: no scan, no content
        fresh.rendered_history()  # sending does read the tail (once)
        assert len(reads) == 1
    finally:
        st.close()


def test_rewinding_before_the_mark_shows_the_results_again(ip, capsys):
    tool_turns(ip, capsys, prune=False, turns=5)
    s = ocw.current_session()
    s.prune_tool_output()
    mark = s.prune_mark()
    assert mark is not None
    ok(ip, "%rewind 4", capsys)  # before the marked result
    assert s.prune_mark() is None and "pruned" not in s.occupancy()
    assert s.occupancy_parts()["messages"] == s._head.cum
    results = [b["content"] for m in s.rendered_history() for b in m["content"] if b.get("type") == "tool_result"]
    assert results and not any(r.startswith("[old tool output pruned") for r in results)
    ok(ip, "%branch " + mark.id, capsys)  # back on the pruned branch: the stubs again
    assert s.prune_mark() is not None and s.occupancy()["pruned"]["results"] == 4


def test_prune_rules_at_their_boundaries():
    nodes = [("a", 1, 100), ("b", 2, 100), ("c", 3, 100)]
    assert prune_rules.choose_mark(nodes, 300) is None  # all fit
    assert prune_rules.choose_mark(nodes, 299) == "a"
    assert prune_rules.choose_mark(nodes, 200) == "a"
    assert prune_rules.choose_mark(nodes, 199) == "b"
    assert prune_rules.choose_mark(nodes, 99) == "c"
    assert prune_rules.choose_mark([], 0) is None
    # 5 % of a 16,000 window: 800 tokens.
    assert not prune_rules.worth_it(799, 16000) and prune_rules.worth_it(800, 16000)
    assert not prune_rules.worth_it(0, 100)
    call = {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}}
    blocks = prune_rules.stub_blocks([{"type": "tool_result", "tool_use_id": "t1", "content": " ".join(["x"] * 500),
                                       "is_error": True}], {"t1": call}, "cl100k_base")
    assert blocks == [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                       "content": '[old tool output pruned: read({"path": "a.py"}) failed with 500 tokens; ocw keeps '
                                  'the full result, call the tool again if it is needed]'}]
    assert prune_rules.stub_blocks([{"type": "text", "text": "hi"}], {}, "cl100k_base") is None


# -- the pure rules (ocw/context/prune.py) at their edges ---------------------------------
ENC = "cl100k_base"
TAIL = "; ocw keeps the full result, call the tool again if it is needed]"


def test_a_stub_names_the_call_with_its_arguments_cut_at_120_characters():
    assert prune_rules._args(None) == "an earlier call"
    assert prune_rules._args({"input": {}}) == "?({})"  # a call without a name
    assert prune_rules._args({"name": "r"}) == "r({})"  # ... or without arguments
    # sorted keys, non-ASCII as it is
    assert prune_rules._args({"name": "r", "input": {"b": "é", "a": 1}}) == 'r({"a": 1, "b": "é"})'
    at = {"p": "x" * 111}  # json.dumps: {"p": "xxx…"} is 120 characters
    assert len(prune_rules._args({"name": "r", "input": at})) == len("r()") + 120
    assert prune_rules._args({"name": "r", "input": at}).endswith('x"})')
    over = {"p": "x" * 112}  # 121 characters: 119 kept and an ellipsis
    assert prune_rules._args({"name": "r", "input": over}) == "r(" + ('{"p": "' + "x" * 112)[:119] + "…)"


def test_a_stub_says_how_big_the_result_was_and_whether_it_failed():
    call = {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}}
    big = {"content": "word " * 1200}
    assert prune_rules.stub_text(call, big, ENC) == \
        '[old tool output pruned: read({"path": "a.py"}) returned 1,201 tokens' + TAIL
    cjk = {"content": "日本語のテキストです。" * 20}  # 200 tokens in cl100k, 160 in o200k: counted in the session's
    assert "returned 160 tokens" in prune_rules.stub_text(call, cjk, "o200k_base")
    assert "returned 200 tokens" in prune_rules.stub_text(call, cjk, ENC)
    blocks = {"content": [{"type": "text", "text": "a b"}, "junk", {"type": "image"}, {"type": "text", "text": "c"}]}
    # text blocks joined by newlines ("a b\nc": 4 tokens); what is not a dict counts nothing
    assert prune_rules.stub_text(None, blocks, ENC) == "[old tool output pruned: an earlier call returned 4 tokens" + TAIL
    assert prune_rules.stub_text(call, {"content": "x", "is_error": False}, ENC).startswith(
        '[old tool output pruned: read({"path": "a.py"}) returned 1 tokens')
    assert "failed with 0 tokens" in prune_rules.stub_text(call, {"is_error": True}, ENC)


def test_stub_blocks_replace_results_only_and_keep_the_pairing():
    call = {"type": "tool_use", "id": "t1", "name": "read", "input": {}}
    text = {"type": "text", "text": "here"}
    ok_result = {"type": "tool_result", "tool_use_id": "t1", "content": " ".join(["data"] * 50), "extra": 1}
    orphan = {"type": "tool_result", "tool_use_id": "t9", "content": "x", "is_error": True}
    out = prune_rules.stub_blocks([text, ok_result, orphan], {"t1": call}, ENC)
    assert out[0] is text
    assert out[1] == {"type": "tool_result", "tool_use_id": "t1",
                      "content": "[old tool output pruned: read({}) returned 50 tokens" + TAIL}  # no is_error key
    assert out[2] == {"type": "tool_result", "tool_use_id": "t9", "is_error": True,
                      "content": "[old tool output pruned: an earlier call failed with 1 tokens" + TAIL}
    assert prune_rules.stub_blocks([], {}, ENC) is None


def test_calls_of_maps_ids_to_tool_calls_only():
    a = {"type": "tool_use", "id": "a", "name": "x"}
    blocks = [a, {"type": "tool_use", "name": "no id"}, {"type": "text", "id": "t"}, {"type": "tool_result", "id": "r"}]
    assert prune_rules.calls_of(blocks) == {"a": a}


def test_saving_is_what_the_stubbed_message_saves_never_below_zero():
    stubbed = [{"type": "tool_result", "tool_use_id": "t1", "content": "short"}]
    counted = count_message("user", stubbed, ENC, None)
    assert prune_rules.saving("user", None, counted + 40, stubbed, ENC) == 40
    assert prune_rules.saving("user", None, counted, stubbed, ENC) == 0
    assert prune_rules.saving("user", None, counted - 5, stubbed, ENC) == 0
    named = count_message("tool", stubbed, ENC, "read")
    assert prune_rules.saving("tool", "read", named + 3, stubbed, ENC) == 3


def test_worth_it_at_five_percent_of_the_window_rounded_down():
    # 5 % of 16,030 is 801.5: 801 frees enough (the share is rounded down), 800 does not.
    assert prune_rules.worth_it(801, 16030) and not prune_rules.worth_it(800, 16030)
    assert prune_rules.worth_it(1, 10) and not prune_rules.worth_it(0, 10)  # a tiny window: any saving
    assert not prune_rules.worth_it(-5, 0)
