"""`%new --from-summary [N]` (issue 27) in a real IPython shell against the loopback
server: the new session starts with the origin's summary and memory and its last N
turns, sends nothing to do so, is linked to its origin in %sessions and %summary, and
the next request carries the seed; bad input is one line and changes nothing."""
from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

import ocw
from ocw.text.errors import StoreError

USER = "Please keep notes about ticket OPS-4471 and conf/prod.yaml: " + "tomatoes basil " * 30


def run(ip, cell, capsys):
    res = ip.run_cell(cell)
    out, err = capsys.readouterr()
    return res, out, err


def usage_line(ip, cell, capsys) -> str:
    res, out, err = run(ip, cell, capsys)
    assert isinstance(res.error_in_exec, UsageError) and "Traceback" not in out + err, (out, err)
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    return line


def origin_with_summary(ip, srv, capsys):
    ip.run_line_magic("new", "--name origin")
    for i in range(5):
        srv.script(text=f"Reply {i}: noted ticket OPS-447{i}. " + "green leaves " * 40)
        assert run(ip, f"%%chat\nTurn {i}. {USER}", capsys)[0].error_in_exec is None
    srv.script(text="Summary: the user tracks ticket OPS-4471 and conf/prod.yaml.")
    assert "Context compacted" in run(ip, "%compact 300", capsys)[1]
    return ocw.current_session()


def test_from_summary_seeds_links_and_sends_nothing(oip, openai_env, capsys):
    srv = openai_env
    origin = origin_with_summary(oip, srv, capsys)
    summary_id, origin_id = origin.active_summary().id, origin.id
    tail = [origin.node(nid) for nid in origin.branch()[-4:]]  # the last 2 turns, folded or not
    n = len(srv.requests)

    res, out, err = run(oip, "%new --from-summary 2", capsys)
    assert res.error_in_exec is None, err
    assert len(srv.requests) == n  # seeding sends nothing
    s = ocw.current_session()
    assert s.id != origin_id and s.name == "origin"
    m = re.fullmatch(r"New session 'origin' continues 'origin @ [\d-]+ [\d:]+ \((s_\w+)\)': its active summary and "
                     r"memory, the last 2 turns; model \S+, window 2,000 tokens, ([\d,]+) tokens to start with\.",
                     out.strip())
    assert m and m.group(1) == origin_id, out
    assert int(m.group(2).replace(",", "")) == s.occupancy()["total"]
    history = [h for h in s.rendered_history() if h.get("id")]
    assert [h["role"] for h in history] == ["system", "user", "assistant", "user", "assistant"]
    note = history[0]["content"][0]["text"]
    assert note.startswith("This conversation continues session 'origin'. What it had established:")
    assert "Summary: the user tracks ticket OPS-4471 and conf/prod.yaml." in note
    assert [(h["role"], h["content"]) for h in history[1:]] == [(t["role"], t["content"]) for t in tail]
    assert s.metadata["origin"]["summary"] == summary_id and s.metadata["origin"]["turns"] == 2

    out = run(oip, "%sessions", capsys)[1]
    (line,) = [ln for ln in out.splitlines() if ln.startswith(" * ")]
    assert re.search(r"  origin  ← from origin @ [\d-]+ [\d:]+ \(s_\w+\)$", line), line
    out = run(oip, "%summary", capsys)[1]
    assert re.search(rf"^Continued from session 'origin @ [^']+' \({origin_id}\) on [\d-]+ [\d:]+ UTC: its summary "
                     rf"{summary_id} and the last 2 turns\.$", out, re.M), out

    srv.script(text="Carried on.")
    assert run(oip, "%%chat\nWhere were we?", capsys)[0].error_in_exec is None
    assert len(srv.requests) == n + 1
    sent = str(srv.requests[-1].json["messages"])
    assert "This conversation continues session 'origin'" in sent and "OPS-4471" in sent


def test_from_summary_zero_turns_and_the_origin_left_unchanged(oip, openai_env, capsys):
    origin = origin_with_summary(oip, openai_env, capsys)
    before = (origin.head, origin.generation, origin.compaction_count, origin.backend.node_count(origin.id))
    out = run(oip, "%new --name fresh --from-summary 0", capsys)[1]
    assert "its active summary and memory;" in out and "turn" not in out.split(";")[0]
    s = ocw.current_session()
    assert [h["role"] for h in s.rendered_history() if h.get("id")] == ["system"]
    origin.sync()
    assert (origin.head, origin.generation, origin.compaction_count, origin.backend.node_count(origin.id)) == before
    assert origin.name == "origin"  # another name: nothing filed away


@pytest.mark.parametrize("line,words", [
    ("%new --from-summary x", "--from-summary takes a number of turns to carry over, e.g. %new --from-summary 3 "
                              "(got 'x')."),
    ("%new --from-summary -1", "--from-summary takes a number of turns"),
    ("%new --from-summary 51", "--from-summary carries at most 50 turns, not 51"),
])
def test_bad_n_is_one_line_and_changes_nothing(line, words, oip, openai_env, capsys):
    origin = origin_with_summary(oip, openai_env, capsys)
    count = len(ocw.current_session().store.sessions())
    assert words in usage_line(oip, line, capsys)
    assert ocw.current_session().id == origin.id and len(origin.store.sessions()) == count


def test_nothing_to_continue_from_is_one_line(oip, openai_env, capsys):
    oip.run_line_magic("new", "--name empty")
    line = usage_line(oip, "%new --from-summary", capsys)
    assert line.startswith("UsageError: Nothing to continue from: session 'empty' has no summary and no turns yet")
    assert "chat first, or start afresh with %new" in line


def test_a_seed_that_cannot_be_stored_takes_the_new_session_back(oip, openai_env, capsys, monkeypatch):
    origin = origin_with_summary(oip, openai_env, capsys)
    names = sorted(r["name"] for r in origin.store.sessions())

    def refuse(self, messages, **kw):
        raise StoreError("the disk is full")

    monkeypatch.setattr(ocw.Session, "append_many", refuse)
    line = usage_line(oip, "%new --from-summary 2", capsys)
    assert "the disk is full" in line
    assert ocw.current_session().id == origin.id
    assert sorted(r["name"] for r in origin.store.sessions()) == names  # nothing created, nothing renamed


def test_the_origins_pins_are_pins_of_the_new_session(oip, openai_env, capsys):
    """Pins travel as pins, not as lines of the seed note: the new session reads them
    verbatim in every request and after its own compactions; an unpinned one stays out."""
    srv = openai_env
    origin_with_summary(oip, srv, capsys)
    run(oip, "%pin Amounts are integer cents, never floats.", capsys)
    run(oip, "%pin The schema is orders(id, amount_cents).", capsys)
    run(oip, "%unpin 2", capsys)
    res, out, err = run(oip, "%new --from-summary 1", capsys)
    assert res.error_in_exec is None, err
    assert ", 1 pin;" in out, out
    s = ocw.current_session()
    from ocw.conversation.pinning import pins

    assert [(p["n"], p["text"]) for p in pins(s)] == [(1, "Amounts are integer cents, never floats.")]
    note = [h for h in s.rendered_history() if h.get("id")][0]["content"][0]["text"]
    assert "integer cents" not in note  # a pin, not a line of the note the next compaction folds
    srv.script(text="ok")
    assert run(oip, "%%chat\nand now?", capsys)[0].error_in_exec is None
    sent = srv.requests[-1].text
    assert sent.count("Amounts are integer cents, never floats.") == 1 and "orders(id, amount_cents)" not in sent


def test_fifty_turns_is_the_most_and_is_accepted(oip, openai_env, capsys):
    origin = origin_with_summary(oip, openai_env, capsys)
    res, out, err = run(oip, "%new --from-summary 50", capsys)  # 51 is refused (above); the origin has fewer
    assert res.error_in_exec is None, err
    s = ocw.current_session()
    assert s.id != origin.id and out.startswith("New session 'origin' continues")


def test_a_bad_name_is_one_line_and_changes_nothing(oip, openai_env, capsys):
    origin = origin_with_summary(oip, openai_env, capsys)
    count = len(origin.store.sessions())
    line = usage_line(oip, "%new --name a\u202eb --from-summary 1", capsys)
    assert "--name takes text without bidirectional controls" in line
    assert ocw.current_session().id == origin.id and len(origin.store.sessions()) == count


def test_pins_alone_are_enough_to_continue_from(oip, openai_env, capsys):
    oip.run_line_magic("new", "--name pinned")
    run(oip, "%pin Amounts are integer cents, never floats.", capsys)
    origin = ocw.current_session()
    res, out, err = run(oip, "%new --from-summary", capsys)
    assert res.error_in_exec is None, err
    s = ocw.current_session()
    from ocw.conversation.pinning import pins

    assert s.id != origin.id and [p["text"] for p in pins(s)] == ["Amounts are integer cents, never floats."]
    assert ", 1 pin;" in out, out
