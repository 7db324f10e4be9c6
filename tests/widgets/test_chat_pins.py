"""The chat widget's pin button and /pin, /pins, /unpin, /memory (issues 22.6, 29.2), kernel
side: each request runs the command's one action, and the listing carries the rows the
browser draws its forget and unpin buttons from."""
from __future__ import annotations

import ocw
from ocw.context import pins as rules

from test_chat_widget import chat, invoke

PAD = " ".join(f"filler{i}" for i in range(200))


def test_the_pin_button_pins_the_stored_message_verbatim(ip):
    chat(ip, "The amounts are in cents, never dollars.")
    w = ocw.chat()
    user = next(m for m in w.messages if m["role"] == "user")
    answer = invoke(w, "chat_pin", {"node_id": user["id"]})
    assert answer["ok"] and answer["output"].startswith("Pinned as 1 (")
    s = ocw.current_session()
    assert [(p["text"], p["source"]) for p in rules.current(s.metadata)] == [
        ("The amounts are in cents, never dollars.", "message 1")]
    assert w.notes[-1]["text"].startswith("Pinned as 1 (")
    assert s.occupancy()["breakdown"]["pins"] > 0
    bad = invoke(w, "chat_pin", {"node_id": "n_nothere"})
    assert not bad["ok"] and "is not a message of this session" in bad["error"]
    assert invoke(w, "chat_pin", {"node_id": "<script>"})["ok"] is False
    assert len(rules.current(s.metadata)) == 1
    w.close()


def test_slash_pin_pins_unpin_and_memory_run_their_actions(ip):
    chat(ip, "hello")
    w = ocw.chat()
    assert invoke(w, "chat_run", {"name": "pin", "args": "keep the schema"})["ok"]
    listing = invoke(w, "chat_run", {"name": "pins", "args": ""})
    assert listing["ok"] and w.notes[-1]["data"]["pins"][0]["text"] == "keep the schema"
    refused = invoke(w, "chat_run", {"name": "unpin", "args": "7"})
    assert refused["ok"] is False and "there is no pin 7" in refused["error"]
    for t in ("Please set the batch size to 64.", "From now on answer in Chinese.", "more", "more", "more"):
        chat(ip, t + " " + PAD)
    assert ip.run_cell("%compact").error_in_exec is None
    assert invoke(w, "chat_run", {"name": "memory", "args": ""})["ok"]
    data = w.notes[-1]["data"]["memory"]
    assert [(i["n"], i["text"], i["turn"]) for i in data["items"]] == [(1, "batch_size = 64", 3)]
    assert data["pins"][0]["n"] == 1
    assert invoke(w, "chat_run", {"name": "memory", "args": "--forget 1"})["ok"]
    assert invoke(w, "chat_run", {"name": "memory", "args": "--all"})["ok"]
    data = w.notes[-1]["data"]["memory"]
    assert "batch_size = 64" not in [i["text"] for i in data["items"]]
    assert [f["text"] for f in data["forgotten"]] == ["64"]
    w.close()
