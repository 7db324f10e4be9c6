"""A real summarizer's structured memory (issue 22, deliverables 2 and 3): the request
asks for it with the current memory and the new turns; a good answer is merged latest
wins; an invented value is dropped; an answer that does not parse falls back to the
deterministic memory, said in one line, never stored. Through Session.compact and
through %%chat with automatic compaction, against the loopback OpenAI server."""
from __future__ import annotations

import json

import pytest

from ocw.context.memory import Memory, from_blocks, render
from ocw.context.memory_model import events_of, parse, split_answer
from ocw.context.memory_rules import update
from ocw.providers.openai import OpenAIProvider
from ocw.text.i18n import MESSAGES
from ocw.text.prompts import CURRENT_MEMORY_OPEN, MEMORY_REQUEST

PAD = " ".join(f"filler{i}" for i in range(120))
SAID = ["Please set the batch size to 64.", "Reply tersely, bullet points only.",
        "Let's bump batch_size to 128 now.", "The raw dump is data/raw/events_7q.parquet."]
FALLBACK_EN = MESSAGES["en"]["memory_fallback"]


def answer(**sections) -> str:
    return "Summary: the user tunes a training run.\n<memory>" + json.dumps(sections) + "</memory>"


@pytest.fixture
def provider(refserver):
    p = OpenAIProvider("gpt-4o-mini", base_url=refserver.openai_url, api_key="k-test", max_retries=0,
                       context_window=4000)
    yield p
    p.close()


def session_with_turns(store):
    s = store.create_session(model="gpt-4o-mini", provider="openai", context_window=4000)
    for t in SAID:
        s.append("user", f"{t} {PAD}")
        s.append("assistant", f"ok {PAD}")
    return s


def memory_of(s):
    node = s.active_summary()
    blocks = s._contents([node])[node.id]
    return from_blocks(blocks), blocks[0]["text"]


def test_the_request_carries_the_structured_ask_and_the_current_memory(store, provider, refserver):
    s = session_with_turns(store)
    refserver.script_summary(text=answer(settings=[{"name": "batch size", "value": "128"}]))
    assert s.compact(keep_recent_tokens=200, provider=provider).outcome == "succeeded"
    (req,) = refserver.summary_requests()
    assert MEMORY_REQUEST.splitlines()[0] in req.system
    body = req.messages[-1]["content"]
    body = body if isinstance(body, str) else "".join(b.get("text", "") for b in body)
    assert CURRENT_MEMORY_OPEN in body and "<new-turns>" in body
    # The second compaction's request carries the first one's memory as current.
    for t in ["Change the batch size to 256.", "More chat."]:
        s.append("user", f"{t} {PAD}")
        s.append("assistant", f"ok {PAD}")
    refserver.script_summary(text=answer(settings=[{"name": "batch size", "value": "256"}]))
    assert s.compact(keep_recent_tokens=200, provider=provider).outcome == "succeeded"
    body2 = refserver.summary_requests()[-1].messages[-1]["content"]
    body2 = body2 if isinstance(body2, str) else "".join(b.get("text", "") for b in body2)
    current = json.loads(body2.split(CURRENT_MEMORY_OPEN, 1)[1].split("</current-memory>")[0])
    assert {"name": "batch_size", "value": "128"} in current["settings"]


def test_a_good_structured_answer_is_merged_latest_wins(store, provider, refserver):
    s = session_with_turns(store)
    refserver.script_summary(text=answer(
        instructions=["Reply tersely, bullet points only."],  # no cue the deterministic pass knows
        settings=[{"name": "batch size", "value": "64"}],  # stale: the turns changed it to 128 later
        working_set=[{"kind": "file", "value": "data/raw/events_7q.parquet"}]))
    r = s.compact(keep_recent_tokens=200, provider=provider)
    assert r.outcome == "succeeded" and "memory_fallback" not in r.payload
    assert FALLBACK_EN not in r.message("en")
    m, prose = memory_of(s)
    assert [(i.value, i.turn) for i in m.current("instruction")] == [("Reply tersely, bullet points only.", 3)]
    assert {i.key: i.value for i in m.current("setting")} == {"batch_size": "128"}  # latest wins
    assert "<memory>" not in prose and "instructions" not in prose
    assert "Reply tersely" in render(m)


def test_an_invented_value_is_dropped(store, provider, refserver):
    s = session_with_turns(store)
    refserver.script_summary(text=answer(
        settings=[{"name": "deadline", "value": "2027-03-14"}, {"name": "batch size", "value": "128"}],
        working_set=[{"kind": "columns", "value": "ghost_col_zz"}], decisions=[{"chosen": "polars", "over": "pandas"}],
        retracted=["data/never_said.csv"]))
    r = s.compact(keep_recent_tokens=200, provider=provider)
    assert r.outcome == "succeeded" and "memory_fallback" not in r.payload
    m, prose = memory_of(s)
    values = {i.value for i in m.items}
    assert "2027-03-14" not in values and "ghost_col_zz" not in values and "polars" not in values
    assert {i.key: i.value for i in m.current("setting")} == {"batch_size": "128"}  # the grounded one stays
    assert "2027-03-14" not in render(m) and "ghost_col_zz" not in render(m)


@pytest.mark.parametrize("garbage", ["Summary.\n<memory>{\"settings\": [ {oops</memory>",
                                     "Summary.\n<memory>{\"settings\": [{\"name\": \"x\"",  # never closed
                                     "Summary only, no memory block at all.",
                                     "Summary.\n<memory>[\"a list, not an object\"]</memory>"])
def test_an_unparsable_structured_answer_falls_back_in_one_line(store, provider, refserver, garbage):
    s = session_with_turns(store)
    refserver.script_summary(text=garbage)
    r = s.compact(keep_recent_tokens=200, provider=provider)
    assert r.outcome == "succeeded" and r.payload.get("memory_fallback") is True
    msg = r.message("en")
    assert msg.count(FALLBACK_EN) == 1 and "\n" not in msg
    assert MESSAGES["zh"]["memory_fallback"] in r.message("zh")
    m, prose = memory_of(s)
    assert "oops" not in prose and "<memory>" not in prose and "a list, not an object" not in prose
    assert "oops" not in json.dumps(m.to_json()) and "a list" not in json.dumps(m.to_json())
    # The deterministic memory, exactly: what the pass alone makes of the same turns.
    turns = [(k + 1, "user" if k % 2 == 0 else "assistant", msg_)
             for k, msg_ in enumerate(x for t in SAID for x in (f"{t} {PAD}", f"ok {PAD}"))]
    covered = s.active_summary().cover_count
    alone = update(Memory(), turns[:covered], budget=10_000, encoding=s.encoding.name)
    assert [(i.kind, i.value, i.status) for i in m.items] == [(i.kind, i.value, i.status) for i in alone.items]
    assert {i.key: i.value for i in m.current("setting")} == {"batch_size": "128"}


def test_split_and_parse_keep_the_block_out_of_the_prose():
    prose, mem = split_answer("Prose.\n<memory>{\"todos\": [\"rerun x\"]}</memory>\ntrailing")
    assert prose == "Prose.\n\ntrailing" and mem == {"todos": ["rerun x"]}
    assert split_answer("Prose <memory>{\"todos\": [") == ("Prose", None)
    assert parse("```json\n{\"settings\": []}\n```") == {"settings": []}
    assert parse("{\"unknown\": []}") is None and parse("not json") is None
    # Events take their turn from where the value occurs, never from the model.
    evs = events_of({"settings": [{"name": "lr", "value": "3e-4", "turn": 99}]},
                    [(4, "user", "use lr 1e-3"), (7, "user", "lr now 3e-4")], Memory())
    assert [(e.turn, e.item.value) for e in evs] == [(7, "3e-4")]


# -- through %%chat with automatic compaction ---------------------------------------------------
def chat_until_compacted(ip, refserver, capsys, summary_text: str) -> tuple[object, str]:
    import ocw

    refserver.script_summary(times=20, text=summary_text)
    out = ""
    for i, t in enumerate(SAID + [f"Go on with part {k}." for k in range(8)]):
        refserver.script(text=f"Noted {i}. " + "ok " * 60)
        res = ip.run_cell(f"%%chat\n{t} {PAD}")
        assert res.error_in_exec is None
        out += capsys.readouterr().out
        s = ocw.current_session()
        if s.compaction_count >= 1 and i >= len(SAID):
            break
    s.sync()
    assert s.compaction_count >= 1 and refserver.summary_requests()
    return s, out


def test_chat_auto_compaction_merges_a_good_answer(oip, refserver, capsys):
    good = answer(instructions=["Reply tersely, bullet points only."], settings=[{"name": "batch size", "value": "128"}],
                  working_set=[{"kind": "columns", "value": "ghost_col_zz"}])
    s, out = chat_until_compacted(oip, refserver, capsys, good)
    m, _ = memory_of(s)
    assert "Reply tersely, bullet points only." in {i.value for i in m.current("instruction")}
    assert "ghost_col_zz" not in {i.value for i in m.items}  # invented: dropped
    assert FALLBACK_EN not in out
    refserver.script(text="fine")
    oip.run_cell("%%chat\nWhere are we?")
    last = refserver.requests[-1]
    sent = json.dumps(last.body)
    assert "Reply tersely, bullet points only." in sent and "[Session memory:" in sent


def test_chat_auto_compaction_falls_back_on_garbage(oip, refserver, capsys):
    s, out = chat_until_compacted(oip, refserver, capsys, "Summary.\n<memory>}{ not json at all</memory>")
    assert out.count(FALLBACK_EN) == s.compaction_count
    m, prose = memory_of(s)
    assert "not json" not in prose and "not json" not in json.dumps(m.to_json())
    assert {i.key: i.value for i in m.current("setting")}.get("batch_size") == "128"  # the deterministic pass
