"""The tool loop of a turn (issue 7), end to end: a real IPython shell with
`%load_ext ocw`, tools that read and change `shell.user_ns`, the loopback
reference server speaking OpenAI and Anthropic, and the DuckDB file read back.
"""
from __future__ import annotations

import json
import os

import duckdb
import pytest

import ocw
from IPython.core.error import UsageError

from ocw.context.render import render_blocks
from ocw.store.duckdb.store import DUCKDB_CONFIG
from ocw.text.tokens import count_message, count_text

KINDS = ["openai", "anthropic"]

TOOLS_CELL = '''
import ocw

prices = {"apple": 2, "pear": 3}
basket = []

@ocw.tool
def price_of(item: str) -> int:
    """The price of one item, in euros."""
    return prices[item]

@ocw.tool
def add_to_basket(item: str, qty: int = 1) -> str:
    """Put qty units of item in the basket."""
    basket.extend([item] * qty)
    return f"basket holds {len(basket)} items"
'''


def configure(rt, refserver, kind: str, **options) -> None:
    cfg = rt.config
    if kind == "openai":
        cfg.provider, cfg.base_url, cfg.model = "openai", refserver.openai_url, "gpt-4o-mini"
    else:
        cfg.provider, cfg.base_url, cfg.model = "anthropic", refserver.anthropic_url, "claude-sonnet-4-5"
    cfg.api_key = "sk-test-key"
    cfg.max_retries = 0
    cfg.timeout = 10
    cfg.status_line = False  # these tests read the reply at the end of the cell's output
    for k, v in options.items():
        setattr(cfg, k, v)


def run(shell, code: str) -> None:
    res = shell.run_cell(code)
    assert res.success, res.error_in_exec or res.error_before_exec


def chat(shell, text: str, flags: str = ""):
    return shell.run_cell_magic("chat", flags, text)


def model_requests(refserver) -> list:
    """The turn's requests (compaction's summary requests left out)."""
    return [r for r in refserver.requests if not r.is_summary]


def assert_calls_paired(rec) -> int:
    """No tool result without its call just before it, no call left unanswered —
    what both APIs reject. Returns how many results the request carries."""
    msgs = rec.messages
    n = 0
    if rec.kind == "openai":
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                j = i - 1
                while msgs[j]["role"] == "tool":
                    j -= 1
                assert msgs[j]["role"] == "assistant", f"orphaned tool result {m}"
                assert m["tool_call_id"] in {c["id"] for c in msgs[j].get("tool_calls") or []}, m
                n += 1
            if m["role"] == "assistant" and m.get("tool_calls"):
                answered = set()
                for f in msgs[i + 1:]:
                    if f["role"] != "tool":
                        break
                    answered.add(f["tool_call_id"])
                assert answered == {c["id"] for c in m["tool_calls"]}, f"unanswered call in {m}"
    else:
        for i, m in enumerate(msgs):
            blocks = m["content"] if isinstance(m["content"], list) else []
            results = [b for b in blocks if b["type"] == "tool_result"]
            uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
            if results:
                assert m["role"] == "user" and i > 0 and msgs[i - 1]["role"] == "assistant", f"orphaned {results}"
                before = {b["id"] for b in msgs[i - 1]["content"] if b["type"] == "tool_use"}
                assert {r["tool_use_id"] for r in results} == before
                assert blocks[: len(results)] == results  # results lead their message
                n += len(results)
            if uses:
                nxt = msgs[i + 1]["content"] if i + 1 < len(msgs) else []
                assert uses == {b["tool_use_id"] for b in nxt if b["type"] == "tool_result"}, "unanswered call"
    return n


def stored_branch(rt, session_id: str) -> list[dict]:
    """The branch root → HEAD, read straight from the DuckDB file."""
    path = rt.config.db
    rt.close()  # let go of the file (the runtime reopens it when needed)
    con = duckdb.connect(path, read_only=True, config=DUCKDB_CONFIG)
    try:
        (head,) = con.execute("SELECT head_id FROM sessions WHERE id = ?", [session_id]).fetchone()
        rows = {r[0]: r for r in con.execute(
            "SELECT id, parent_id, role, content FROM nodes WHERE session_id = ?", [session_id]).fetchall()}
    finally:
        con.close()
    out, n = [], head
    while n is not None:
        nid, parent, role, content = rows[n]
        out.append({"id": nid, "role": role, "content": json.loads(content)})
        n = parent
    return out[::-1]


def wire_tool_definitions(rec) -> list[dict]:
    """The tool definitions as the server received them, back in ocw's neutral form."""
    if rec.kind == "openai":
        return [{"name": t["function"]["name"], "description": t["function"]["description"],
                 "input_schema": t["function"]["parameters"]} for t in rec.body["tools"]]
    return [{"name": t["name"], "description": t["description"], "input_schema": t["input_schema"]}
            for t in rec.body["tools"]]


# -- a two-call turn ------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_two_call_turn_runs_tools_in_the_user_namespace(ocw_shell, refserver, kind, capsys):
    shell, rt = ocw_shell
    configure(rt, refserver, kind)
    run(shell, TOOLS_CELL)
    refserver.script(tool_calls=[{"name": "price_of", "input": {"item": "pear"}}])
    refserver.script(tool_calls=[{"name": "add_to_basket", "input": {"item": "pear", "qty": 2}}])
    refserver.script(text="Two pears are in the basket, 3 euros each.")

    chat(shell, "Buy two pears and tell me the price.")

    assert shell.user_ns["basket"] == ["pear", "pear"]
    out = capsys.readouterr().out
    assert '🔧 price_of({"item": "pear"}) → ok: 3' in out
    assert '🔧 add_to_basket({"item": "pear", "qty": 2}) → ok: basket holds 2 items' in out
    assert out.rstrip().endswith("Two pears are in the basket, 3 euros each.")

    reqs = model_requests(refserver)
    assert len(reqs) == 3 and all(r.stream and r.kind == kind for r in reqs)
    assert {t["name"] for t in wire_tool_definitions(reqs[0])} == {"price_of", "add_to_basket"}
    assert [assert_calls_paired(r) for r in reqs] == [0, 1, 2]
    last = reqs[2].messages
    if kind == "openai":
        tool_msgs = [m for m in last if m["role"] == "tool"]
        assert [m["content"] for m in tool_msgs] == ["3", "basket holds 2 items"]
        calls = [c for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        assert [m["tool_call_id"] for m in tool_msgs] == [c["id"] for c in calls]
        assert len({c["id"] for c in calls}) == 2  # the server reused call_ref_1; ocw kept them apart
        assert calls[0]["id"] == "call_ref_1"  # an id no other visible call has is kept as the server sent it
        assert json.loads(calls[1]["function"]["arguments"]) == {"item": "pear", "qty": 2}
    else:
        results = [b for m in last if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]
        assert [r["content"] for r in results] == ["3", "basket holds 2 items"]
        uses = [b for m in last if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
        assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
        assert uses[1]["input"] == {"item": "pear", "qty": 2}

    # Occupancy: the definitions count in `tools`, exactly (same serialisation, the session's encoding).
    s = rt.current_session()
    defs = wire_tool_definitions(reqs[-1])
    expected = count_text(json.dumps(defs, sort_keys=True, ensure_ascii=False), s.encoding.name)
    assert expected > 0 and s.occupancy_parts()["tools"] == expected  # the estimate; rows may be calibrated

    # The store holds call and result blocks in order, each result right after its call.
    nodes = stored_branch(rt, s.id)
    kinds = [(n["role"], [b["type"] for b in n["content"]]) for n in nodes]
    assert kinds == [("user", ["text"]), ("assistant", ["tool_use"]), ("tool", ["tool_result"]),
                     ("assistant", ["tool_use"]), ("tool", ["tool_result"]), ("assistant", ["text"])]
    for call_node, result_node in ((nodes[1], nodes[2]), (nodes[3], nodes[4])):
        call, result = call_node["content"][0], result_node["content"][0]
        assert result["tool_use_id"] == call["id"] and result["is_error"] is False
    assert nodes[1]["content"][0]["name"] == "price_of" and nodes[2]["content"][0]["content"] == "3"
    assert nodes[3]["content"][0]["input"] == {"item": "pear", "qty": 2}


# -- compaction between steps ------------------------------------------------------------
PAGES_CELL = '''
import ocw

fetched = []

@ocw.tool
def fetch_page(n: int) -> str:
    """Fetch page n of the report."""
    fetched.append(n)
    return f"Page {n}. " + " ".join(f"Row {n}.{i}: revenue grew in region {i} by {i * n} percent." for i in range(30))
'''


@pytest.mark.parametrize("kind", KINDS)
def test_ten_step_loop_compacts_between_steps_and_keeps_calls_with_results(ocw_shell, refserver, kind, capsys):
    shell, rt = ocw_shell
    # Pruning old tool output (tests/conversation/test_parity.py) would come first: this is the summary's path.
    configure(rt, refserver, kind, context_window=4000, max_tool_steps=12, prune_tool_output=False)
    run(shell, PAGES_CELL)
    refserver.summary_text = "Summary: pages of the report were fetched; revenue grew in every region."
    for n in range(1, 11):
        refserver.script(tool_calls=[{"name": "fetch_page", "input": {"n": n}}])
    refserver.script(text="All ten pages read.")

    chat(shell, "Read the ten pages of the report with fetch_page.")

    assert shell.user_ns["fetched"] == list(range(1, 11))
    out = capsys.readouterr().out
    assert "Context compacted: covered" in out and out.rstrip().endswith("All ten pages read.")
    s = rt.current_session()
    assert s.compaction_count >= 1
    # The compactions happened between steps: model requests before and after each summary request.
    order = ["summary" if r.is_summary else "model" for r in refserver.requests]
    assert order.count("model") == 11 and 0 < order.index("summary") < len(order) - 1
    assert all(r.status == 200 for r in refserver.requests)
    # Every request the model received was well formed: no result without its call.
    for rec in model_requests(refserver):
        assert_calls_paired(rec)
    # The rendered history: each result's call is earlier in it, or both were folded.
    history = s.rendered_history()
    assert history[1].get("name") == "context/summary"
    seen_calls: set[str] = set()
    results = 0
    for m in history:
        for b in m["content"]:
            if b.get("type") == "tool_use":
                seen_calls.add(b["id"])
            if b.get("type") == "tool_result":
                assert b["tool_use_id"] in seen_calls
                results += 1
    assert 0 < results < 10  # some pairs were folded into the summary, the latest kept
    assert s.occupancy()["ratio"] < 0.8


# -- errors become results ---------------------------------------------------------------------
ERRORS_CELL = '''
import ocw

@ocw.tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"boom: {reason}")

@ocw.tool
def count_to(n: int) -> str:
    """Counts."""
    return " ".join(map(str, range(1, n + 1)))
'''


@pytest.mark.parametrize("kind", KINDS)
def test_raising_unknown_and_malformed_calls_give_the_model_error_results(ocw_shell, refserver, kind, capsys):
    shell, rt = ocw_shell
    configure(rt, refserver, kind)
    run(shell, ERRORS_CELL)
    refserver.script(tool_calls=[
        {"name": "explode", "input": {"reason": "disk full"}},
        {"name": "no_such_tool", "input": {}},
        {"name": "count_to", "args": '{"n": 3'},  # torn JSON
        {"name": "count_to", "input": {"n": "three"}},  # wrong type
        {"name": "count_to", "input": {"n": 3}},
    ])
    refserver.script(text="Some of that failed.")

    chat(shell, "Try the tools.")

    out = capsys.readouterr().out
    assert "🔧 explode" in out and "→ error: explode raised ValueError: boom: disk full" in out
    assert "→ error: unknown tool 'no_such_tool'; available: explode, count_to" in out
    assert "→ error: malformed arguments for count_to: expected a JSON object" in out
    assert "→ error: bad arguments for count_to: n must be integer, not \"three\"" in out
    assert "→ ok: 1 2 3" in out
    assert out.rstrip().endswith("Some of that failed.")  # the turn went on

    s = rt.current_session()
    nodes = stored_branch(rt, s.id)
    results = nodes[2]["content"]
    assert nodes[2]["role"] == "tool" and [r["is_error"] for r in results] == [True, True, True, True, False]
    assert [r["tool_use_id"] for r in results] == [b["id"] for b in nodes[1]["content"] if b["type"] == "tool_use"]
    assert nodes[3]["role"] == "assistant" and nodes[3]["content"][0]["text"] == "Some of that failed."

    second = model_requests(refserver)[1]
    assert assert_calls_paired(second) == 5
    if kind == "anthropic":
        sent = [b for m in second.messages for b in m["content"] if b["type"] == "tool_result"]
        assert [b.get("is_error", False) for b in sent] == [True, True, True, True, False]
        assert "boom: disk full" in sent[0]["content"]
    else:  # chat completions has no is_error field: the content says it
        sent = [m for m in second.messages if m["role"] == "tool"]
        assert [m["content"].startswith("Error: ") for m in sent] == [True, True, True, True, False]
        assert "boom: disk full" in sent[0]["content"]


def test_a_call_in_a_turn_without_tools_gets_an_error_result_not_an_orphan(ocw_shell, refserver, capsys):
    shell, rt = ocw_shell
    configure(rt, refserver, "openai")
    refserver.script(tool_calls=[{"name": "rm_rf", "input": {"path": "/"}}])  # no tools were offered
    refserver.script(text="Sorry.")

    chat(shell, "Clean up.")

    assert "tools" not in model_requests(refserver)[0].body
    assert "→ error: tool 'rm_rf' is not available: no tools are on in this turn" in capsys.readouterr().out
    assert assert_calls_paired(model_requests(refserver)[1]) == 1
    nodes = stored_branch(rt, rt.current_session().id)
    assert [n["role"] for n in nodes] == ["user", "assistant", "tool", "assistant"]
    assert nodes[2]["content"][0]["is_error"] is True


# -- the step limit ---------------------------------------------------------------------------------
def count_with_limit(ocw_shell, refserver, capsys, limit: int, calls: int) -> str:
    """A model that calls count_to `calls` times in a row, under Ocw.max_tool_steps = `limit`;
    the cell's output."""
    shell, rt = ocw_shell
    configure(rt, refserver, "openai")
    run(shell, ERRORS_CELL)
    shell.run_line_magic("config", f"Ocw.max_tool_steps = {limit}")
    refserver.script(times=calls, tool_calls=[{"name": "count_to", "input": {"n": 2}}])
    chat(shell, "Count forever.")
    return capsys.readouterr().out


def test_a_limit_of_one_tool_step_says_one_step(ocw_shell, refserver, capsys):
    out = count_with_limit(ocw_shell, refserver, capsys, limit=1, calls=3)
    assert "Stopped after 1 tool step (the limit, %config Ocw.max_tool_steps = 1)" in out
    assert out.count("🔧 count_to") == 1 and refserver.pending == 2


def test_endless_tool_calls_stop_at_max_tool_steps_with_a_message(ocw_shell, refserver, capsys):
    shell, rt = ocw_shell
    out = count_with_limit(ocw_shell, refserver, capsys, limit=3, calls=10)
    assert out.count("🔧 count_to") == 3
    assert "Stopped after 3 tool steps (the limit, %config Ocw.max_tool_steps = 3)" in out
    assert len(model_requests(refserver)) == 3 and refserver.pending == 7
    s = rt.current_session()
    nodes = stored_branch(rt, s.id)
    assert [n["role"] for n in nodes] == ["user"] + ["assistant", "tool"] * 3  # every call has its result

    # The session is consistent: the next turn sends a valid request and finishes.
    refserver.requests.clear()
    while refserver.pending:
        refserver._scripts.pop()
    refserver.script(text="Stopped counting.")
    chat(shell, "Enough.")
    (rec,) = refserver.requests
    assert assert_calls_paired(rec) == 3
    assert rec.messages[-1] == {"role": "user", "content": "Enough."}
    assert capsys.readouterr().out.rstrip().endswith("Stopped counting.")


# -- the stop button ------------------------------------------------------------------------------------
INTERRUPT_CELL = '''
import ocw

steps = []

@ocw.tool
def step(n: int) -> str:
    """One step of work."""
    if n == 2:
        raise KeyboardInterrupt  # what the stop button raises in the kernel
    steps.append(n)
    return f"step {n} done"
'''


@pytest.mark.parametrize("kind", KINDS)
def test_interrupt_inside_a_tool_keeps_finished_steps_in_pairs(ocw_shell, refserver, kind, capsys):
    shell, rt = ocw_shell
    configure(rt, refserver, kind)
    run(shell, INTERRUPT_CELL)
    refserver.script(tool_calls=[{"name": "step", "input": {"n": 1}}])
    refserver.script(tool_calls=[{"name": "step", "input": {"n": 2}}])

    with pytest.raises(UsageError) as err:
        chat(shell, "Do the steps.")

    assert str(err.value) == ("Interrupted after 1 tool step: the finished step is saved (calls with their "
                              "results), the interrupted one is not; the next %%chat continues from there.")
    assert shell.user_ns["steps"] == [1]
    assert "Interrupted" not in capsys.readouterr().out  # said once, by the error line
    s = rt.current_session()
    nodes = stored_branch(rt, s.id)
    assert [n["role"] for n in nodes] == ["user", "assistant", "tool"]  # step 2 is not stored
    assert nodes[2]["content"][0]["tool_use_id"] == nodes[1]["content"][0]["id"]
    assert nodes[2]["content"][0]["content"] == "step 1 done"

    refserver.script(text="Resumed.")
    chat(shell, "Go on.")
    rec = model_requests(refserver)[-1]
    assert assert_calls_paired(rec) == 1
    assert capsys.readouterr().out.rstrip().endswith("Resumed.")
    assert [n["role"] for n in stored_branch(rt, s.id)] == ["user", "assistant", "tool", "user", "assistant"]


# -- the result cap ---------------------------------------------------------------------------------------
BIG_CELL = '''
import ocw

@ocw.tool
def dump_log() -> str:
    """The whole log."""
    return "".join(f"{i:05d} all systems nominal, nothing to report\\n" for i in range(1200))[:50_000]
'''


def test_a_result_over_the_cap_is_cut_for_the_model_and_kept_whole_in_the_store(ocw_shell, refserver):
    shell, rt = ocw_shell
    configure(rt, refserver, "openai", context_window=128_000)
    shell.run_line_magic("config", "Ocw.tool_result_cap = 500")
    run(shell, BIG_CELL)
    full = shell.user_ns["dump_log"]()
    assert len(full) == 50_000
    refserver.script(tool_calls=[{"name": "dump_log", "input": {}}])
    refserver.script(text="The log is calm.")

    chat(shell, "Read the log.")

    s = rt.current_session()
    enc = s.encoding.name
    total = count_text(full, enc)
    note = f"[… {total - 500:,} of {total:,} tokens cut from this tool result; the full result is in the ocw store]"
    # What the model read in the next step: the cut form with the note.
    sent = [m for m in model_requests(refserver)[1].messages if m["role"] == "tool"][0]["content"]
    assert sent.endswith(note) and sent.startswith("00000 all systems nominal") and len(sent) < 5_000
    # The rendered history has the same cut form; occupancy counts it, not the full text.
    tool_msg = next(m for m in s.rendered_history() if m["role"] == "tool")
    cut = tool_msg["content"][0]["content"]
    assert cut == sent
    assert tool_msg["tokens"] == count_message("tool", tool_msg["content"], enc) < total
    rendered = [m for m in s.rendered_history() if m.get("id")]
    assert s.occupancy_parts()["messages"] == sum(count_message(m["role"], m["content"], enc) for m in rendered)
    # The store keeps the whole result.
    stored = stored_branch(rt, s.id)
    assert stored[2]["content"][0]["content"] == full

    # A new cap applies from the next turn on, to the results already stored too.
    s = rt.current_session()
    generation = s.generation
    shell.run_line_magic("config", "Ocw.tool_result_cap = 1000")
    refserver.script(text="ok")
    chat(shell, "Again.")
    s = rt.current_session()
    assert s.generation == generation + 1 and s.tool_result_cap == 1000
    tool_msg = next(m for m in s.rendered_history() if m["role"] == "tool")
    assert tool_msg["content"][0]["content"].endswith(f"[… {total - 1000:,} of {total:,} tokens cut from this "
                                                      "tool result; the full result is in the ocw store]")
    assert tool_msg["tokens"] == count_message("tool", render_blocks(stored[2]["content"], 1000, enc), enc)
    # ... and the file holds the new counts: a fresh process reads the same occupancy.
    occupancy = s.occupancy_parts()["messages"]
    sid, path = s.id, rt.config.db
    rt.close()
    fresh = ocw.Store(path)
    try:
        assert fresh.open_session(sid).occupancy_parts()["messages"] == occupancy
    finally:
        fresh.close()


# -- no secrets -------------------------------------------------------------------------------------------
SECRET = "sk-secret-zzz12345"
SECRET_CELL = '''
import os
import ocw

@ocw.tool
def show_env(name: str) -> str:
    """The value of an environment variable."""
    print("looking up", name, "=", os.environ[name])
    return f"{name}={os.environ[name]}"

@ocw.tool
def fail_with_env(name: str) -> str:
    """Fails, quoting the variable."""
    raise RuntimeError(f"cannot use {os.environ[name]}")
'''


def test_secrets_from_the_environment_reach_neither_cell_nor_model_nor_store(ocw_shell, refserver, monkeypatch, capsys):
    monkeypatch.setenv("MY_API_KEY", SECRET)
    shell, rt = ocw_shell
    configure(rt, refserver, "anthropic")
    run(shell, SECRET_CELL)
    refserver.script(tool_calls=[{"name": "show_env", "input": {"name": "MY_API_KEY"}},
                                 {"name": "fail_with_env", "input": {"name": "MY_API_KEY"}}])
    refserver.script(text="I looked.")

    chat(shell, "What is MY_API_KEY?")

    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert "MY_API_KEY=[redacted]" in captured.out and "looking up MY_API_KEY = [redacted]" in captured.out
    for rec in refserver.requests:
        assert SECRET not in json.dumps(rec.body)
    s = rt.current_session()
    nodes = stored_branch(rt, s.id)
    assert [r["content"] for r in nodes[2]["content"]] == [
        "MY_API_KEY=[redacted]", "fail_with_env raised RuntimeError: cannot use [redacted]"]
    # Nowhere in the file: every table's rows, and the raw bytes.
    path = rt.config.db
    con = duckdb.connect(path, read_only=True, config=DUCKDB_CONFIG)
    try:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        assert "nodes" in tables
        for t in tables:
            assert SECRET not in repr(con.execute(f'SELECT * FROM "{t}"').fetchall())
    finally:
        con.close()
    for p in (path, path + ".wal"):
        if os.path.exists(p):
            with open(p, "rb") as fh:
                assert SECRET.encode() not in fh.read()


# -- the offline model ---------------------------------------------------------------------------------------
def test_the_offline_model_calls_a_tool_named_in_the_message(ocw_shell, capsys):
    shell, rt = ocw_shell
    assert rt.config.provider == "offline"
    run(shell, TOOLS_CELL)

    chat(shell, "Please call add_to_basket with item=apple, qty=3.")

    assert shell.user_ns["basket"] == ["apple"] * 3
    out = capsys.readouterr().out
    assert '🔧 add_to_basket({"item": "apple", "qty": 3}) → ok: basket holds 3 items' in out
    assert "(offline model) The tool returned: basket holds 3 items" in out

    chat(shell, "please call list_variables", "--tools")
    out = capsys.readouterr().out
    assert "🔧 list_variables({}) → ok:" in out
    assert "basket: list (len 3)" in out and "prices: dict (len 2)" in out
    assert "price_of" not in out.split("→ ok:")[1].split("\n")[0]  # tools and modules are not variables
