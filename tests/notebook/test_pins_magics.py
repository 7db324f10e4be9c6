"""%pin, %pins, %unpin, %memory through the magics in an IPython shell, against the
loopback OpenAI-compatible server: what the server receives is counted; bad input is
one line; the text is the UI text's, in English and in Chinese."""
from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

import ocw
from ocw.context import pins as rules
from ocw.conversation import pinning

PAD = " ".join(f"filler{i}" for i in range(120))
RULE = "Amounts in orders.amount_cents are cents, never dollars."


def run(ip, line: str, capsys) -> str:
    capsys.readouterr()
    ip.run_line_magic(*line[1:].split(" ", 1)) if " " in line else ip.run_line_magic(line[1:], "")
    return capsys.readouterr().out


def chat(ip, text):
    ip.run_cell_magic("chat", "", text)


def last_sent(srv) -> str:
    return srv.requests[-1].text


def test_pin_text_and_a_variable_go_to_the_model_verbatim_after_compactions(oip, refserver, capsys):
    srv = refserver
    out = run(oip, f"%pin {RULE}", capsys)
    assert out.startswith("Pinned as 1 (") and "%unpin 1 takes it out" in out
    oip.user_ns["limits"] = {"p95_ms": 741, "batch": 64}
    out = run(oip, "%pin {limits}", capsys)
    assert out.startswith("Pinned as 2 (")
    for i in range(6):
        chat(oip, f"question {i} " + PAD)
    sent = last_sent(srv)
    assert sent.count(RULE) == 1 and sent.count("{'p95_ms': 741, 'batch': 64}") == 1
    # a small kept tail: automatic compactions on this 2,000-token window may have folded
    # everything older than the default tail already (issue 23 lands well under the line)
    assert run(oip, "%compact 100", capsys).startswith("Context compacted")
    oip.user_ns["limits"] = "changed later"  # the pin holds the value as it was
    chat(oip, "after the compaction")
    sent = last_sent(srv)
    assert sent.count(RULE) == 1 and sent.count("{'p95_ms': 741, 'batch': 64}") == 1
    assert "changed later" not in sent
    s = ocw.current_session()
    assert s.compaction_count >= 1 and s.occupancy()["breakdown"]["pins"] > 0
    table = run(oip, "%context --text", capsys)
    assert f"{'Pinned':<18} {s.occupancy()['breakdown']['pins']:>9,}" in table
    listing = run(oip, "%pins", capsys)
    assert listing.splitlines()[0] == "Pinned (the model reads these verbatim after every compaction):"
    assert listing.splitlines()[1].startswith(f"  1. {RULE}  (") and listing.splitlines()[2].startswith("  2. {'p95_ms'")
    assert run(oip, "%unpin 1", capsys).startswith("Unpinned 1: “Amounts in orders")
    chat(oip, "and now")
    assert RULE not in last_sent(srv) and "'p95_ms': 741" in last_sent(srv)
    assert [e["op"] for e in rules.events(s.metadata)] == ["pin", "pin", "unpin"]


@pytest.mark.parametrize("line, message", [
    ("%unpin 99", "there is no pin 99"),
    ("%unpin", "%unpin takes the number %pins shows"),
    ("%unpin two", "%unpin takes the number %pins shows, e.g. %unpin 1 (got 'two')"),
    ("%pin", "%pin takes what to pin"),
    ("%pin   ", "%pin takes what to pin"),
    ("%pin {nope}", "{nope}: no variable 'nope' in this notebook"),
    ("%memory --forget 3", "there is no memory item 3"),
    ("%memory --forget x", "%memory --forget takes the number %memory shows"),
    ("%pins extra", "%pins takes no arguments"),
])
def test_bad_input_is_one_line_and_writes_nothing(oip, capsys, line, message):
    chat(oip, "hello")
    s = ocw.current_session()
    before = (s.generation, dict(s.metadata).get("pins"))
    name, _, rest = line[1:].partition(" ")
    with pytest.raises(UsageError) as e:
        oip.run_line_magic(name, rest)
    assert message in str(e.value) and "\n" not in str(e.value).strip()
    s.sync()
    assert (s.generation, dict(s.metadata).get("pins")) == before


def test_memory_says_what_will_go_there_then_lists_and_forgets(oip, refserver, capsys):
    out = run(oip, "%memory", capsys)  # no session yet: what will go there
    assert "No session memory yet. At the first compaction ocw keeps here what stays true" in out
    chat(oip, "hello")
    out = run(oip, "%memory", capsys)
    assert "No session memory yet. At the first compaction ocw keeps here what stays true" in out
    assert "Nothing pinned yet: %pin TEXT, or %pin {name}" in out
    for t in ("Please set the batch size to 64.", "From now on answer in Chinese.",
              "Load data/raw/events.parquet first.", "more", "more", "more"):
        chat(oip, t + " " + PAD)
    assert run(oip, "%compact 100", capsys).startswith("Context compacted")  # a small tail: see above
    out = run(oip, "%memory", capsys)
    assert "  Standing instructions and preferences:\n    1. From now on answer in Chinese. (turn " in out
    n = next(ln.split(".")[0].strip() for ln in out.splitlines() if "data/raw/events.parquet" in ln)
    assert run(oip, f"%memory --forget {n}", capsys).startswith("Forgotten: “file: data/raw/events.parquet”. The model no longer reads it")
    assert "data/raw/events.parquet" not in run(oip, "%memory", capsys)
    everything = run(oip, "%memory --all", capsys)
    assert "  Forgotten (no longer sent to the model):\n    - data/raw/events.parquet (turn " in everything
    chat(oip, "next")
    assert "data/raw/events.parquet" not in last_sent(refserver)


def test_the_texts_are_chinese_with_ocw_lang_zh(oip, capsys):
    oip.run_line_magic("config", "Ocw.lang = 'zh'")
    out = run(oip, "%pin 金额以分为单位", capsys)
    assert out.startswith("已固定为第 1 项（")
    assert run(oip, "%pins", capsys).startswith("已固定（每次压缩之后模型仍会逐字读取）:")
    assert run(oip, "%unpin 1", capsys).startswith("已取消固定第 1 项")
    assert "还没有会话记忆" in run(oip, "%memory", capsys)


def test_pins_are_exported_with_the_session(oip, capsys, tmp_path):
    import json

    chat(oip, "hello")
    run(oip, f"%pin {RULE}", capsys)
    run(oip, "%pin gone soon", capsys)
    run(oip, "%unpin 2", capsys)
    md, js = tmp_path / "s.md", tmp_path / "s.json"
    run(oip, f"%ocw export --format md {md}", capsys)
    run(oip, f"%ocw export --format json {js}", capsys)
    text = md.read_text(encoding="utf-8")
    assert "## Pinned\n\n### Pin 1 · " in text and f"\n\n{RULE}\n" in text and "gone soon" not in text
    assert text.index("## Pinned") < text.index("## 1 · user")
    doc = json.loads(js.read_text(encoding="utf-8"))
    assert [(p["n"], p["text"]) for p in doc["pins"]] == [(1, RULE)]
    assert [e["op"] for e in doc["session"]["metadata"]["pins"]] == ["pin", "pin", "unpin"]


def test_pins_and_a_forget_hold_through_automatic_compactions(oip, refserver, capsys):
    """%%chat with automatic compaction (2,000-token window, 80 %): every request after
    each compaction carries the pin once; a forgotten item never comes back."""
    for t in ("Please set the batch size to 64.", "Load data/raw/events.parquet first."):
        refserver.script(text="Noted.")
        chat(oip, t + " " + PAD)
    run(oip, f"%pin {RULE}", capsys)
    s = ocw.current_session()
    counts = []
    for i in range(24):  # compactions land well under the line (issue 23): ~1 in 6 turns here
        refserver.script(text="Noted.")
        chat(oip, f"note {i} " + PAD)
        counts.append(last_sent(refserver).count(RULE))
        if s.compaction_count == 1 and not rules.forgets(s.metadata):
            n = next(k for k, _, it in rules.listed(pinning.memory(s)) if it.value == "data/raw/events.parquet")
            run(oip, f"%memory --forget {n}", capsys)
    assert s.compaction_count >= 3
    assert counts == [1] * 24
    assert rules.forgets(s.metadata) and "data/raw/events.parquet" not in last_sent(refserver)


def test_unpin_quotes_the_pins_first_60_characters(oip, capsys):
    sixty, sixty_one = "a" * 59 + "Z", "b" * 60 + "Y"
    run(oip, f"%pin {sixty}", capsys)
    run(oip, f"%pin {sixty_one}", capsys)
    assert run(oip, "%unpin 1", capsys).startswith(f"Unpinned 1: “{sixty}” (the record is kept")
    assert run(oip, "%unpin 2", capsys).startswith(f"Unpinned 2: “{'b' * 59}…” (the record is kept")


def test_the_hint_shows_with_pins_alone_and_not_with_nothing(oip, capsys):
    hint = "%memory --forget N takes item N out of what the model reads"
    chat(oip, "hello")
    assert hint not in run(oip, "%memory", capsys)
    run(oip, f"%pin {RULE}", capsys)
    assert hint in run(oip, "%memory", capsys)
    from ocw.notebook import actions, magics

    html = actions.run(magics.get_runtime(), "memory", "", rich=True).html
    assert hint in html and f"<li>1. {RULE} <em>(" in html
    assert "<p>No session memory yet. At the first compaction" in html  # no items: what will go there


def test_memory_html_numbers_each_section_as_the_text_does(oip, refserver, capsys):
    """The rich %memory: one <ol> per section, starting at the number %memory --forget takes."""
    from ocw.notebook import actions, magics

    for t in ("Please set the batch size to 64.", "From now on answer in Chinese.",
              "Load data/raw/events.parquet first.", "more", "more", "more"):
        chat(oip, t + " " + PAD)
    assert run(oip, "%compact 100", capsys).startswith("Context compacted")
    res = actions.run(magics.get_runtime(), "memory", "", rich=True)
    sections = [(ln.strip()[:-1], int(nxt.split(".")[0]))
                for ln, nxt in zip(res.text.splitlines(), res.text.splitlines()[1:])
                if ln.startswith("  ") and not ln.startswith("    ") and ln.endswith(":") and nxt.startswith("    ")]
    assert len(sections) >= 2, res.text
    html = res.html
    for title, first in sections:
        assert f"<p>{title}</p><ol start=\"{first}\">" in html
    assert html.count("<ol ") == html.count("</ol>") == len(sections)
    assert re.fullmatch(r"(?:[^<]|<(?!/?ol\b))*(?:<ol [^>]*>(?:[^<]|<(?!/?ol\b))*</ol>(?:[^<]|<(?!/?ol\b))*)+", html), \
        html  # each list closed before the next opens
    assert "<li>From now on answer in Chinese. <em>(turn " in html
    assert "Nothing pinned yet" in html and "%memory --forget N takes item N out" in html
    assert "No session memory yet" not in html and "Nothing current" not in html
