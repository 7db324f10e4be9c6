"""Session memory rules (issue 22, DESIGN.md §4b): each rule pinned through the pure
pass, through Session.compact on a real DuckDB file, and through %%chat with
automatic compaction in a real InteractiveShell (the offline model)."""
from __future__ import annotations

import pytest

from ocw.context.facts import FACTS_HEADER, append_facts
from ocw.context.memory import Event, Item, Memory, from_blocks, ground, merge, render
from ocw.context.memory_rules import events, update

ENC = "cl100k_base"
PAD = " ".join(f"filler{i}" for i in range(250))


def mem_of(*texts, role="user", old=None, budget=2_000):
    return update(old or Memory(), [(i + 1, role, t) for i, t in enumerate(texts)], budget=budget, encoding=ENC)


def current(m, kind):
    return {i.key: i.value for i in m.current(kind)}


# -- the pure pass, one rule at a time ------------------------------------------------------
def test_a_change_replaces_and_the_old_value_is_only_superseded():
    m = mem_of("Please set the batch size to 64.", "Let's bump batch_size to 128 now.")
    assert current(m, "setting") == {"batch_size": "128"}
    assert [i.value for i in m.items if i.status == "superseded"] == ["64"]
    assert "128" in render(m) and "= 64" not in render(m)


def test_a_retraction_removes_the_item():
    m = mem_of("Load data/raw/events.parquet first.", "Forget data/raw/events.parquet, it is corrupt.")
    assert "data/raw/events.parquet" not in render(m)
    assert "data/raw/events.parquet" in m.stale_values()
    kept = mem_of("Load data/raw/events.parquet first.")  # without the retraction it is current
    assert "data/raw/events.parquet" in render(kept)


def test_a_closing_removes_the_todo():
    m = mem_of("TODO: check the outliers in sales_2024.csv.", "Done with the outliers check.")
    assert m.current("todo") == []
    still = mem_of("TODO: check the outliers in sales_2024.csv.", "Something else entirely.")
    assert [i.value for i in still.current("todo")] == ["check the outliers in sales_2024.csv"]


def test_instruction_and_decision_are_kept_with_their_turn():
    m = mem_of("From now on answer in Chinese.", "We'll go with polars over pandas.")
    assert [(i.value, i.turn) for i in m.current("instruction")] == [("From now on answer in Chinese.", 1)]
    (d,) = m.current("decision")
    assert (d.value, d.detail, d.turn) == ("polars", "pandas", 2)
    later = mem_of("From now on answer in Chinese.", "Actually, answer in English from now on.")
    assert [i.value for i in later.current("instruction")] == ["Actually, answer in English from now on."]


def test_a_quantity_keeps_what_it_names():
    m = mem_of("The p95 latency is now 741 ms.")
    assert current(m, "setting") == {"p95_latency": "741 ms"}


def test_an_invented_value_is_dropped():
    invented = Event("add", 3, Item("setting", "threshold", "0.93", 3))
    honest = Event("add", 3, Item("setting", "threshold", "0.45", 3))
    m = update(Memory(), [(1, "user", "the threshold is 0.45")], budget=2_000, encoding=ENC, extra=[invented])
    assert current(m, "setting") == {"threshold": "0.45"}
    m2 = update(Memory(), [(1, "user", "hello")], budget=2_000, encoding=ENC, extra=[honest])
    assert m2.current() == []  # 0.45 occurs nowhere in the turns or the old memory
    assert ground([Item("working", "k", "data/x.csv", 1)], "see data/x.csv") != []


def test_ocw_own_text_is_never_harvested():
    own = ("[old tool output pruned: ls(path='logs/run_1') returned 1,776 tokens; ocw keeps the full result]\n"
           "(offline model) It is 40 tokens long and begins “see logs/run_2.txt”\n"
           "[system note] results in logs/run_3.txt were cut")
    assert events([(1, "tool", own)]) == []
    out = append_facts("S.", own + "\nthe user opened notes/plan.md", 500, ENC)
    assert "notes/plan.md" in out
    assert "run_1" not in out and "run_2" not in out and "run_3" not in out and "1,776" not in out


def test_a_superseded_value_is_never_re_added_by_the_facts_pass():
    m = mem_of("Use config/old.yaml for the run.", "Forget config/old.yaml.")
    source = "Use config/old.yaml for the run. Forget config/old.yaml."
    assert "config/old.yaml" not in append_facts("S.", source, 500, ENC, exclude=m.stale_values())
    assert "config/old.yaml" in append_facts("S.", source, 500, ENC)  # the planted bug: no exclusion


def test_newest_identifiers_win_the_room():
    source = " ".join(f"logs/run_{i}.txt" for i in range(1, 21))
    out = append_facts("S.", source, 40, ENC)
    listed = out.split(FACTS_HEADER, 1)[1]
    assert "logs/run_20.txt" in listed and "logs/run_1.txt;" not in listed and "logs/run_1.txt" not in listed


def test_the_memory_keeps_its_budget_and_says_what_it_evicted():
    texts = [f"Open data/part_{i:02d}.parquet next." for i in range(60)] + ["From now on answer in Chinese."]
    m = mem_of(*texts, budget=200)
    from ocw.text.tokens import count_text

    assert count_text(render(m), ENC) <= 200 and m.evicted > 0
    assert "answer in Chinese" in render(m)  # instructions go last
    assert "data/part_59.parquet" in render(m) and "data/part_00.parquet" not in render(m)  # oldest go first
    assert f"{m.evicted} older" in render(m)


def test_merge_is_latest_wins_whatever_the_input_order():
    a = Event("add", 5, Item("setting", "lr", "3e-4", 5))
    b = Event("add", 2, Item("setting", "lr", "1e-3", 2))
    assert current(merge(Memory(), [a, b]), "setting") == {"lr": "3e-4"}


def test_the_summary_prose_never_states_a_stale_value():
    from ocw.context.summary_text import drop_stale

    prose = "We loaded config/old.yaml first. Then data/run_10.csv was read.\nThe rate is 319; it went well."
    out = drop_stale(prose, {"config/old.yaml", "319", "data/run_1.csv"})
    assert "config/old.yaml" not in out and "319" not in out
    assert "Then data/run_10.csv was read." in out and "it went well." in out  # whole tokens only
    assert drop_stale(prose, set()) == prose


def test_an_identifier_retracted_before_the_memory_held_it_is_never_listed():
    m = mem_of("Please also keep the column request_nup in mind.", "There is no column request_nup after all.")
    assert "request_nup" in m.stale_values() and "request_nup" not in render(m)
    source = "keep the column request_nup in mind. There is no column request_nup after all."
    assert "request_nup" not in append_facts("S.", source, 500, ENC, exclude=m.stale_values())
    assert [e.target for e in events([(1, "user", "Drop col_x9, it does not exist.")])] == ["col_x9"]  # not "it"
    # "Don't forget to …" is a TODO, not a retraction of "to".
    evs = events([(1, "user", "Don't forget to check the outliers in unhr_sales.")])
    assert [(e.action, e.item.kind) for e in evs] == [("add", "todo")]


def test_a_closing_that_names_an_identifier_closes_only_its_todo():
    m = mem_of("TODO: write the ydpn_migration note.", "TODO: write the jtyy_migration note.",
               "Done with write the jtyy_migration note.")
    assert [i.value for i in m.current("todo")] == ["write the ydpn_migration note"]
    # A closed TODO's identifier is stale for the facts pass, an open one's is not.
    source = "write the ydpn_migration note; write the jtyy_migration note"
    out = append_facts("S.", source, 500, ENC, exclude=m.stale_values())
    assert "jtyy_migration" not in out and "ydpn_migration" in out


def test_a_measured_quantity_and_key_equals_value_anywhere():
    m = mem_of("We measured total cache latency at 913.5 ms.", "Looks like p95 queue volume = 12.5 GB today.")
    assert current(m, "setting") == {"total_cache_latency": "913.5 ms", "p95_queue_volume": "12.5 GB"}


# -- through Session.compact -------------------------------------------------------------------
def test_rules_hold_through_session_compact_and_are_carried(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    said = ["Please set the batch size to 64.", "From now on answer in Chinese.",
            "We'll go with polars over pandas.", "TODO: check the outliers in sales_2024.csv.",
            "Forget config/staging.yaml, it is wrong.", "Use config/staging.yaml and config/prod.yaml."]
    for t in said:
        s.append("user", t + " " + PAD)
        s.append("assistant", "ok " + PAD)
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    # Second compaction: changes, a closing and a retraction arrive in new turns.
    for t in ["Change batch size to 128.", "Done with the outliers check.", "config/staging.yaml is corrupt."]:
        s.append("user", t + " " + PAD)
        s.append("assistant", "ok " + PAD)
    r = s.compact(keep_recent_tokens=300)
    assert r.outcome == "succeeded" and r.tokens_after < r.tokens_before
    node = s.active_summary()
    m = from_blocks(s._contents([node])[node.id])
    assert current(m, "setting")["batch_size"] == "128"
    assert m.current("todo") == []
    assert "config/staging.yaml" not in {i.value for i in m.current()}
    assert "config/prod.yaml" in {i.value for i in m.current()}
    assert [i.value for i in m.current("instruction")] == ["From now on answer in Chinese."]
    sent = "\n".join(b.get("text", "") for msg in s.rendered_history() for b in msg["content"])
    assert "batch_size = 128" in sent and "batch_size = 64" not in sent
    facts = node_text = s._contents([node])[node.id][0]["text"]
    listed = facts.split(FACTS_HEADER, 1)[1] if FACTS_HEADER in facts else ""
    assert "config/staging.yaml" not in listed  # the facts pass never re-adds it (the prose is the summarizer's)
    assert "config/staging.yaml" not in render(m)
    occ = s.occupancy()
    assert occ["breakdown"]["memory"] > 0
    assert occ["breakdown"]["summary"] + occ["breakdown"]["memory"] == node.tokens


def test_a_fact_in_a_tool_output_reaches_the_memory_though_pruned_first(store):
    s = store.create_session(model="ocw-offline", context_window=8192)
    rows = "\n".join(f"row_{i:03d} {i} fine" for i in range(300))
    s.append("user", "show it " + PAD)
    s.append_many([("assistant", [{"type": "tool_use", "id": "t1", "name": "run_cell", "input": {}}]),
                   ("tool", [{"type": "tool_result", "tool_use_id": "t1",
                              "content": rows + "\ndf_ab.shape = (95079, 33)\n" + rows}])])
    for k in range(4):
        s.append("user", f"next {k} " + PAD)
        s.append("assistant", "ok " + PAD)
    assert s.prune_tool_output()  # the stub replaces the output before the compaction folds it
    assert "(95079, 33)" not in "\n".join(b.get("text", "") for m in s.rendered_history() for b in m["content"])
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    node = s.active_summary()
    m = from_blocks(s._contents([node])[node.id])
    assert {i.value for i in m.current("working")} >= {"(95079, 33)"}


# -- through %%chat with automatic compaction --------------------------------------------------
def test_rules_hold_through_chat_with_auto_compaction(ocw_shell):
    import ocw

    shell, rt = ocw_shell
    shell.run_line_magic("config", "Ocw.provider = 'offline'")
    shell.run_line_magic("config", "Ocw.context_window = 4096")
    cells = ["Please set the batch size to 64.", "From now on answer in Chinese.",
             "TODO: check the outliers in sales_2024.csv.", "Forget config/staging.yaml.",
             "Change batch size to 128.", "Done with the outliers check."]
    for t in cells + [f"Go on with part {i}." for i in range(6)]:
        res = shell.run_cell(f"%%chat\n{t} {PAD}")
        assert res.error_in_exec is None
    s = ocw.current_session()
    s.sync()
    assert s.compaction_count >= 1
    node = s.active_summary()
    m = from_blocks(s._contents([node])[node.id])
    assert current(m, "setting").get("batch_size") == "128"
    assert "batch_size = 64" not in "\n".join(b.get("text", "") for msg in s.rendered_history()
                                              for b in msg["content"])
    assert m.current("todo") == [] and "config/staging.yaml" not in {i.value for i in m.current()}
    assert [i.value for i in m.current("instruction")] == ["From now on answer in Chinese."]


def _sent(s) -> str:
    return "\n".join(b.get("text", "") for msg in s.rendered_history() for b in msg["content"])


def test_newest_identifiers_win_and_own_text_is_never_harvested_through_session_compact(store):
    """Through Session.compact: 120 paths overflow the memory's room, the newest stay; a prune
    stub's figures (ocw's own text) reach neither the memory nor the identifier list."""
    s = store.create_session(model="ocw-offline", context_window=8192)
    rows = "\n".join(f"row_{i:03d} {i} fine" for i in range(300))
    s.append("user", "show it " + PAD)
    s.append_many([("assistant", [{"type": "tool_use", "id": "t1", "name": "run_cell", "input": {}}]),
                   ("tool", [{"type": "tool_result", "tool_use_id": "t1", "content": rows}])])
    for k in range(12):
        paths = " ".join(f"logs/stage_{k * 10 + j:03d}/events.parquet" for j in range(10))
        s.append("user", f"Open {paths} next. " + PAD)
        s.append("assistant", "ok " + PAD)
    assert s.prune_tool_output(keep_tokens=0)
    import re

    from ocw.text.tokens import render_block

    shown = "\n".join(render_block(b) for m in s.rendered_history() for b in m["content"])
    figure = re.search(r"\[old tool output pruned: .*? returned ([\d,]+) tokens", shown).group(1)  # e.g. "1,234"
    assert s.compact(keep_recent_tokens=300).outcome == "succeeded"
    node = s.active_summary()
    m = from_blocks(s._contents([node])[node.id])
    paths = [i.value for i in m.current("working")]
    assert m.evicted > 0 and f"{m.evicted} older" in render(m)
    assert "logs/stage_109/events.parquet" in paths and "logs/stage_000/events.parquet" not in paths
    assert all(figure not in i.value for i in m.items)
    prose = s._contents([node])[node.id][0]["text"]
    listed = prose.split(FACTS_HEADER, 1)[1] if FACTS_HEADER in prose else ""
    assert figure not in listed and "tokens" not in listed
    assert figure not in prose  # nor the offline summarizer's own identifier line


def test_newest_identifiers_win_and_own_text_is_never_harvested_through_chat(ocw_shell):
    import ocw

    shell, rt = ocw_shell
    shell.run_line_magic("config", "Ocw.provider = 'offline'")
    shell.run_line_magic("config", "Ocw.context_window = 4096")
    for k in range(12):
        paths = " ".join(f"logs/stage_{k * 10 + j:03d}/events.parquet" for j in range(10))
        assert shell.run_cell(f"%%chat\nOpen {paths} next. {PAD}").error_in_exec is None
    s = ocw.current_session()
    s.sync()
    assert s.compaction_count >= 1
    node = s.active_summary()
    m = from_blocks(s._contents([node])[node.id])
    paths = [i.value for i in m.current("working")]
    assert m.evicted > 0 and paths and "logs/stage_000/events.parquet" not in paths
    newest = max(int(p.split("_")[1][:3]) for p in paths)
    assert newest >= 60  # the newest folded ones hold the room, not the first
    # The offline model's digests ("It is N tokens long") are ocw's own text: never memory.
    assert not any("tokens long" in i.value or "offline model" in i.value for i in m.items)
    assert "[Session memory:" in _sent(s)


def test_a_summarys_identifier_list_is_no_source_of_memory_and_a_todos_key_is_its_first_six_words():
    from ocw.context.memory_rules import clean

    assert events([(1, "user", "Key identifiers: conf/prod.yaml, OPS-1")]) == []  # ocw's own list, not the user's
    assert clean("Key identifiers: a/b.py\nreal text") == "real text"
    assert clean("Key identifiers: a/b.py\nreal text", keep_lists=True) == "Key identifiers: a/b.py\nreal text"
    (e,) = events([(1, "user", "TODO: rerun the nightly load for the orders table tomorrow morning")])
    assert (e.item.kind, e.item.key) == ("todo", "rerun_the_nightly_load_for_the")


def test_one_key_for_the_ways_a_name_is_written_and_a_lead_word_only_as_a_word():
    from ocw.context.memory import norm_key

    assert norm_key("the batch-size") == norm_key("Batch size") == norm_key("`batch_size`") == "batch_size"
    assert (norm_key("Theme color"), norm_key("Another  key"), norm_key("an index")) == \
        ("theme_color", "another_key", "index")


def test_at_most_64_stale_items_are_kept_the_newest():
    from ocw.context.memory import fit

    closed = [Item("todo", f"k{i}", f"task {i}", i, "closed") for i in range(70)]
    m = fit(Memory(closed + [Item("todo", "live", "live one", 80)]), 2_000, ENC)
    stale = sorted(i.turn for i in m.items if i.status != "current")
    assert stale == list(range(6, 70)) and [i.value for i in m.current()] == ["live one"]
    m = fit(Memory(closed[:64]), 2_000, ENC)
    assert len(m.items) == 64  # 64: none dropped


def test_each_kind_of_item_renders_its_own_line():
    assert Item("setting", "batch_size", "64", 7).line() == "- batch_size = 64 (turn 7)"
    assert Item("decision", "d", "use duckdb", 6, detail="sqlite").line() == "- use duckdb, over sqlite (turn 6)"
    assert Item("working", "p", "src/app.py", 4, detail="path").line() == "- path: src/app.py (turn 4)"
    assert Item("working", "p", "src/app.py", 4).line() == "- src/app.py (turn 4)"  # no sub-kind: no "- : "
    assert Item("todo", "t", "write the tests", 5, detail="x").line() == "- write the tests (turn 5)"


def test_a_closing_concerns_an_item_only_when_half_its_words_or_more_are_the_items():
    from ocw.context.memory import _mentions

    todo = Item("todo", "t", "write migration tests for the loader", 3)
    assert _mentions(todo, "migration loader")  # 2 of 2 words
    assert _mentions(todo, "migration tests cache warmup")  # 2 of 4: half
    assert not _mentions(todo, "migration cache warmup queue")  # 1 of 4: another item
    assert not _mentions(todo, "migration cache warmup queue retries")  # 1 of 5 (3 needed)
