"""Issue 17: steer, see, export, reference, prune, delete, the status line — through the
magics in a real IPython InteractiveShell (`ip`: offline model; `oip`: the loopback
OpenAI-compatible server, which records what the model was sent), on real DuckDB files.
The same flows in a real kernel are in test_parity_kernel.py.
"""
from __future__ import annotations

import json
import os
import re

from IPython.core.error import UsageError

import ocw
from ocw.context import compaction_log
from ocw.text import focus
from ocw.context.facts import FACTS_HEADER

STATUS = re.compile(r"^context (\d+) % · ([\d,]+) / ([\d,]+) · (auto-compact at (\d+) %|auto-compact off) · "
                    r"(\d+) compactions?$")
PATHS = [f"reports/q{i}/summary_{i}.csv" for i in range(40)]


def run(shell, cell, capsys):
    res = shell.run_cell(cell, store_history=True)
    cap = capsys.readouterr()
    return res, cap.out, cap.err


def ok(shell, cell, capsys) -> str:
    res, out, err = run(shell, cell, capsys)
    assert res.error_in_exec is None and res.error_before_exec is None, (out, err)
    return out


def usage_error(shell, cell, capsys) -> str:
    """The cell fails with one UsageError line (no traceback); returns that line."""
    res, out, err = run(shell, cell, capsys)
    assert isinstance(res.error_in_exec, UsageError), (res.error_in_exec, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: ") and "Traceback" not in err, err
    return lines[0]


def session():
    s = ocw.current_session()
    assert s is not None
    return s


def builds(shell, capsys, n: int = 40):
    """n turns, each naming a CI URL, a dashboard, a ticket, figures — and one file path,
    last: more identifiers than a summary has room for."""
    for i in range(n):
        ok(shell, f"%%chat\nBuild {i} failed with TimeoutError{i} on https://ci.example.com/jobs/{7000 + i}/console "
                  f"and https://grafana.example.com/d/build-{i}, ticket OPS-{4000 + i}, latency {300 + i} ms, "
                  f"memory {1 + i / 10:.1f} GB. Retry policy for build {i}: 3 tries with backoff. "
                  f"Its output goes to {PATHS[i]} as well.", capsys)


def summary_text(s) -> str:
    (summary,) = [m for m in s.rendered_history() if m.get("name") == "context/summary"]
    return summary["content"][0]["text"]


# -- 1. steer the summary ----------------------------------------------------------------


def test_compact_with_a_focus_keeps_the_file_paths_the_plain_one_loses(ip, capsys):
    """Acceptance: `%compact -- keep the list of file paths` on the offline model keeps
    every folded path; the same compaction without the focus loses some (the other
    identifiers crowd them out). The facts pass still runs."""
    kept = {}
    ok(ip, "%config Ocw.auto_compact = 0", capsys)  # one compaction, the one asked for
    for name, line in (("plain", "%compact 200"), ("focused", "%compact 200 -- keep the list of file paths")):
        ok(ip, "%config Ocw.context_window = 9000", capsys)
        ok(ip, f"%new --name {name}", capsys)
        builds(ip, capsys)
        out = ok(ip, line, capsys)
        m = re.match(r"Context compacted: covered (\d+) older messages", out)
        assert m, out
        folded = PATHS[: (int(m.group(1)) + 1) // 2]
        assert len(folded) == 39
        text = summary_text(session())
        kept[name] = [p for p in folded if re.search(re.escape(p) + r"(?![\w/])", text)]
        assert FACTS_HEADER in text  # the facts pass ran after the summarizer
    assert len(kept["focused"]) == 39
    assert len(kept["plain"]) <= 30, kept["plain"]  # measured: 25 of 39


def test_the_focus_goes_to_the_summarizer_with_the_turns(oip, openai_env, capsys):
    srv = openai_env
    srv.summary_text = "Short summary of the turns."

    def turns(first: int, n: int) -> None:
        for i in range(first, first + n):
            srv.script(text=f"Reply {i}: " + "noted " * 120)
            ok(oip, f"%%chat\nTurn {i}: the config lives in conf/prod_{i}.yaml. " + "words " * 60, capsys)

    turns(0, 6)
    before = len(srv.summary_requests())
    assert ok(oip, "%compact 100", capsys).startswith("Context compacted")
    (plain,) = srv.summary_requests()[before:]
    assert "<user-focus>" not in plain.system  # no focus, no focus section
    turns(6, 6)
    before = len(srv.summary_requests())
    assert ok(oip, "%compact 100 -- keep the list of file paths", capsys).startswith("Context compacted")
    (req,) = srv.summary_requests()[before:]
    assert req.system.startswith(plain.system)  # the rules, then the user's instructions
    assert req.system.endswith("<user-focus>keep the list of file paths</user-focus>")
    body = json.dumps(req.body)
    assert "conf/prod_6.yaml" in body and "Turn 6" in body  # the turns travel with it
    entries = compaction_log.entries(session().metadata)
    assert [e["focus"] for e in entries] == [None, "keep the list of file paths"]


def test_compact_arguments_are_checked_before_anything_runs(oip, openai_env, capsys):
    srv = openai_env
    for i in range(5):
        srv.script(text="reply " * 100)
        ok(oip, f"%%chat\nTurn {i} " + "words " * 100, capsys)
    sent = len(srv.requests)
    assert "Nothing after --" in usage_error(oip, "%compact --", capsys)
    assert "Nothing after --" in usage_error(oip, "%compact 500 --   ", capsys)
    line = usage_error(oip, "%compact keep the paths", capsys)
    assert "whole number" in line and "--" in line
    too_long = "k" * 2001
    line = usage_error(oip, f"%compact -- {too_long}", capsys)
    assert "2,001 characters; at most 2,000" in line
    assert len(srv.requests) == sent and session().compaction_count == 0  # no summarizer call, nothing written
    srv.summary_text = "ok summary"
    assert ok(oip, f"%compact -- {'k' * 2000}", capsys).startswith("Context compacted")  # at the limit: fine


def test_focus_rules_are_the_identity_without_a_focus():
    ids = ["https://x.org/a", "src/app.py", "KeyError", "OPS-12", "12 ms", "`run_it`"]
    for none in (None, "", "   "):
        assert focus.kinds(none) == set() and focus.terms(none) == set()
        assert focus.focused_first(ids, none) == ids
    assert focus.kinds("keep the list of file paths") == {"path"}
    assert focus.terms("keep the list of file paths") == {"file", "path"}
    assert focus.focused_first(ids, "the file paths") == ["src/app.py", "https://x.org/a", "KeyError", "OPS-12",
                                                          "12 ms", "`run_it`"]
    assert focus.focused_first(ids, "errors and urls") == ["https://x.org/a", "KeyError", "src/app.py", "OPS-12",
                                                           "12 ms", "`run_it`"]


# -- 2. see the summary --------------------------------------------------------------------


def test_summary_shows_what_it_covers_when_and_why_and_the_log_matches_the_messages(ip, capsys):
    ok(ip, "%config Ocw.context_window = 3000", capsys)
    assert ok(ip, "%summary", capsys).strip() == "Start a conversation first"
    compacted = []
    for i in range(12):
        out = ok(ip, turn(i), capsys)
        compacted += re.findall(r"Context compacted: covered (\d+) older messages?, ([\d,]+) → ([\d,]+) tokens", out)
    assert len(compacted) == 1  # the automatic one
    out = ok(ip, "%summary", capsys)
    first = session().active_summary()
    assert f"Summary {first.id} [active] covers {first.cover_count} messages, up to {first.parent_id} (" in out
    assert "by auto compaction" in out and "Compactions so far: 1" in out
    n, before, after = compacted[0]
    assert f"  1. " in out and f"auto, {before} → {after} tokens, folded {n} messages  → {first.id}" in out

    manual = ok(ip, "%compact 200 -- keep the file paths", capsys)
    n2, before2, after2 = re.match(r"Context compacted: covered (\d+) older messages?, ([\d,]+) → ([\d,]+)",
                                   manual).groups()
    out = ok(ip, "%summary", capsys)
    second = session().active_summary()
    assert f"Summary {second.id} [active]" in out and "by manual compaction; focus: “keep the file paths”" in out
    assert f"Summary {first.id}" not in out.split("Compactions so far")[0]  # superseded: only with --all
    assert f"  2. " in out and f"manual, {before2} → {after2} tokens, folded {n2} messages" in out
    assert "Compactions so far: 2" in out
    all_out = ok(ip, "%summary --all", capsys)
    assert all_out.index(f"Summary {second.id} [active]") < all_out.index(f"Summary {first.id} [superseded]")
    # The log's figures are the ones the messages said, and its entry has a time.
    entries = compaction_log.entries(session().metadata)
    assert [(e["trigger"], f"{e['before']:,}", f"{e['after']:,}") for e in entries] == [
        ("auto", before, after), ("manual", before2, after2)]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", e["at"]) for e in entries)


def test_the_log_is_written_with_the_summary_or_not_at_all(store, fake_summarizer):
    s = store.create_session(context_window=4000)
    for i in range(8):
        s.append("user", f"question {i} " + "alpha " * 150)
        s.append("assistant", f"answer {i} " + "beta " * 150)
    # A failing summarizer: no summary, no entry, no count.
    res = s.compact(provider=fake_summarizer(raises=RuntimeError("boom")))
    assert res.outcome == "failed" and compaction_log.entries(s.metadata) == [] and s.compaction_count == 0
    # A full log: the oldest entry goes, the new one is last, 50 kept.
    s.set_metadata(compactions=[{"summary": f"n_old{i}", "trigger": "auto"} for i in range(50)])
    res = s.compact(provider=fake_summarizer("A short summary."))
    entries = compaction_log.entries(s.metadata)
    assert res.outcome == "succeeded" and len(entries) == 50
    assert entries[0]["summary"] == "n_old1" and entries[-1]["summary"] == res.summary_id
    assert (entries[-1]["before"], entries[-1]["after"]) == (res.tokens_before, res.tokens_after)
    assert entries[-1]["covers"] == s.active_summary().cover_count


def test_summary_html_is_sanitized(store, fake_summarizer):
    from ocw.notebook import summary_view

    s = store.create_session(context_window=4000)
    for i in range(8):
        s.append("user", f"question {i} " + "alpha " * 150)
        s.append("assistant", f"answer {i} <img src=x onerror=alert(1)> " + "beta " * 150)
    s.compact(provider=fake_summarizer("Summary <script>alert(1)</script> and [x](javascript:alert(2))."))
    bundle = summary_view.summary_bundle(s)
    html = bundle["text/html"]
    assert "<script" not in html and "<img" not in html and "href" not in html  # inert: no tag runs or loads
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script>alert(1)</script>" in bundle["text/plain"]  # plain text: as written


# -- 3. references -----------------------------------------------------------------------------


def test_references_expand_before_the_model_is_called_and_are_stored_expanded(oip, openai_env, capsys):
    srv = openai_env
    ok(oip, "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo'] * 50, 'n': range(50)})\nname = 'Ada'", capsys)
    ok(oip, "41 + 1", capsys)
    n = oip.execution_count - 1  # the cell that returned 42
    res, out, err = run(oip, "1 / 0", capsys)
    assert isinstance(res.error_in_exec, ZeroDivisionError)
    srv.script(text="seen")
    cell = ("Hi {name}, {{name}} stays, `{name}` too, {\"a\": 1} and { name } as well.\n"
            f"{{df}}\nCell {{In[{n}]}} gave {{Out[{n}]}}; last error: {{Err}}\n```python\nprint(f'{{name}}')\n```")
    ok(oip, "%%chat\n" + cell, capsys)
    sent = srv.requests[-1].body["messages"][-1]["content"]
    sent = sent if isinstance(sent, str) else "".join(p.get("text", "") for p in sent)
    assert sent.startswith('Hi Ada, {name} stays, `{name}` too, {"a": 1} and { name } as well.\n')
    assert "[DataFrame: 50 rows × 2 columns; the first 5 shown]" in sent and "Oslo" in sent
    assert f"Cell 41 + 1 gave 42; last error: " in sent and "ZeroDivisionError: division by zero" in sent
    assert "print(f'{name}')" in sent  # code stays as written
    stored = session().node(session().branch()[-2])
    assert stored["role"] == "user" and stored["content"][0]["text"] == sent


def test_an_unknown_reference_is_one_line_and_nothing_is_sent(oip, openai_env, capsys):
    srv = openai_env
    srv.script(text="first")
    ok(oip, "%%chat\nhello", capsys)
    sent, head = len(srv.requests), session().head
    assert usage_error(oip, "%%chat\nWhat about {nope}?", capsys) == (
        "UsageError: {nope}: no variable 'nope' in this notebook — define it first, or write {{nope}} to send the "
        "braces as they are")
    assert "{Out[1]}: cell 1 returned no value" in usage_error(oip, "%%chat\n{Out[1]}", capsys)
    assert "{In[9999]}: cell 9999 has not run" in usage_error(oip, "%%chat\n{In[9999]}", capsys)
    assert len(srv.requests) == sent and session().head == head


def test_a_long_value_is_cut_to_its_budget_and_marked(ip, capsys):
    ok(ip, "big = ' '.join(f'w{i}' for i in range(6000))", capsys)
    out = ok(ip, "%%chat\nSummarize {big}", capsys)
    assert re.search(r"Note: big was cut to 2,000 tokens of its [\d,]+ characters in the message", out)
    text = session().node(session().branch()[-2])["content"][0]["text"]
    assert "w0 w1" in text and "w5999" not in text and re.search(r"\[… big cut here: [\d,]+ of [\d,]+ characters", text)


# -- 4. export ------------------------------------------------------------------------------------


def turn(i: int) -> str:
    """A %%chat cell of about 150 tokens: on a 3,000-token window the twelfth crosses 80 %."""
    return f"%%chat\n" + f"Turn {i}: let us look at src/mod_{i}.py and its TimeoutError. " * 8


def _chat_and_compact(shell, capsys, turns: int = 12):
    """An automatic compaction, then a manual one: two summaries, the first superseded."""
    ok(shell, "%config Ocw.context_window = 3000", capsys)
    for i in range(turns):
        ok(shell, turn(i), capsys)
    assert session().compaction_count == 1
    assert ok(shell, "%compact 200", capsys).startswith("Context compacted")


def test_export_md_beside_the_notebook_with_summaries_marked(ip, capsys, tmp_path, monkeypatch):
    nb = tmp_path / "work" / "analysis.ipynb"
    nb.parent.mkdir()
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    monkeypatch.chdir(tmp_path)
    _chat_and_compact(ip, capsys)
    s = session()
    assert s.name == str(nb)
    out = ok(ip, "%ocw export", capsys)
    target = tmp_path / "work" / "analysis.ocw.md"
    assert out == f"Exported session {s.name!r} (24 messages of this branch, 2 summaries) as Markdown to {target}\n"
    md = target.read_text(encoding="utf-8")
    for i in range(12):
        assert f"Turn {i}: let us look at src/mod_{i}.py and its TimeoutError." in md
    assert md.count("## ") == 24 + 1  # one heading per message, and the system prompt's
    active, old = s.active_summary(), [x for x in s.summaries() if x.id != s.active_summary().id][0]
    assert f"> **Summary {active.id}** (active; covers messages 1–{active.cover_count}; manual compaction" in md
    assert f"> **Summary {old.id}** (superseded; covers messages 1–{old.cover_count}; auto compaction" in md
    # The summary sits right after the last message it covers.
    heading = f"## {old.cover_count} · "
    assert md.index(heading) < md.index(f"**Summary {old.id}**") < md.index(f"## {old.cover_count + 1} · ")
    # Again: an earlier export is replaced.
    assert ok(ip, "%ocw export", capsys) == out


def test_export_json_holds_the_whole_dag(ip, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _chat_and_compact(ip, capsys)
    ok(ip, "%rewind 2", capsys)
    ok(ip, "%%chat\nA different direction.", capsys)
    out = ok(ip, "%ocw export --format json all.json", capsys)
    assert out.startswith(f"Exported session 'default' (the whole session: ") and out.endswith(f"{tmp_path}/all.json\n")
    doc = json.loads((tmp_path / "all.json").read_text(encoding="utf-8"))
    s = session()
    assert doc["ocw_export"] == 1 and doc["session"]["id"] == s.id
    assert len(doc["nodes"]) == s.backend.node_count(s.id)  # every node, summaries and the other branch included
    assert [n["id"] for n in doc["nodes"] if n["on_branch"]] == s.branch()
    assert {n["id"] for n in doc["nodes"] if n["summary"]} == {x.id for x in s.summaries()}
    assert doc["session"]["metadata"]["context_compaction_count"] == s.compaction_count


def test_export_never_replaces_a_file_it_did_not_write(ip, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "run a %%chat cell" in usage_error(ip, "%ocw export", capsys)  # no session yet
    ok(ip, "%%chat\nhello", capsys)
    mine = tmp_path / "notes.md"
    mine.write_text("my own notes\n")
    line = usage_error(ip, "%ocw export notes.md", capsys)
    assert "is not an ocw export; nothing was written" in line and "--force" in line
    assert mine.read_text() == "my own notes\n"
    assert "--format md or --format json" in usage_error(ip, "%ocw export --format xml", capsys)
    assert "at most one path" in usage_error(ip, "%ocw export a.md b.md", capsys)
    assert ok(ip, "%ocw export --force notes.md", capsys).endswith(f"{mine}\n")
    assert mine.read_text().startswith("<!-- ocw export")
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".ocw-export-")]  # no temp file left


# -- 5. delete ----------------------------------------------------------------------------------


def test_sessions_delete_says_what_then_deletes_everything_and_frees_the_name(ip, capsys, store_dump):
    _chat_and_compact(ip, capsys)
    s = session()
    assert s.compaction_count == 2
    st = s.store
    ok(ip, "%new --name other", capsys)
    ok(ip, "%%chat\nkeep me", capsys)
    other = session()
    before = store_dump(st)
    out = ok(ip, "%sessions --delete default", capsys)
    assert out == (f"Would delete session 'default' ({s.id}): 24 messages, 2 summaries, compaction count 2. "
                   "Nothing was deleted; to confirm: %sessions --delete default --yes\n")
    assert store_dump(st) == before
    out = ok(ip, "%sessions --delete default --yes", capsys)
    assert out.startswith(f"Deleted session 'default' ({s.id}): 24 messages, 2 summaries, compaction count 2")
    with st.db.connect() as con:
        for table, col in (("sessions", "id"), ("nodes", "session_id"), ("node_counts", "session_id")):
            assert con.execute(f"SELECT count(*) FROM {table} WHERE {col} = ?", [s.id]).fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM nodes WHERE session_id = ?", [other.id]).fetchone()[0] == 2
    assert session().id == other.id  # another session stayed current
    # The name is free: a session under it starts from nothing, its count at 0.
    ok(ip, "%new --name default", capsys)
    assert session().id != s.id and session().compaction_count == 0 and session().branch() == []


def test_deleting_the_current_session_leaves_none_current(ip, capsys):
    ok(ip, "%%chat\nhello", capsys)
    sid = session().id
    assert "Deleted session 'default'" in ok(ip, "%sessions --delete default --yes", capsys)
    assert ocw.current_session() is None
    assert ok(ip, "%context --text", capsys).strip() == "Start a conversation first"
    assert "no session 'default'" in usage_error(ip, "%sessions --delete default --yes", capsys)
    assert "--yes confirms a deletion" in usage_error(ip, "%sessions --yes", capsys)
    ok(ip, "%%chat\nfresh start", capsys)
    assert session().id != sid and len(session().branch()) == 2


# -- 7. the status line -------------------------------------------------------------------------


def test_a_status_line_follows_each_reply_in_english_and_chinese_and_can_be_turned_off(ip, capsys):
    ok(ip, "%config Ocw.context_window = 3000", capsys)
    seen = []
    for i in range(12):
        out = ok(ip, turn(i), capsys)
        last = out.rstrip("\n").splitlines()[-1]
        m = STATUS.match(last)
        assert m, last
        occ = session().occupancy()
        assert (int(m.group(1)), m.group(2), m.group(3)) == (round(100 * occ["ratio"]), f"{occ['total']:,}", "3,000")
        assert m.group(5) == "80" and int(m.group(6)) == session().compaction_count
        assert len([ln for ln in out.splitlines() if STATUS.match(ln)]) == 1
        seen.append(int(m.group(6)))
    assert seen[0] == 0 and seen[-1] == 1  # the automatic compaction shows in the next line
    assert out.rstrip().endswith("· 1 compaction")  # singular
    ok(ip, "%config Ocw.lang = 'zh'", capsys)
    ok(ip, "%config Ocw.auto_compact = 0", capsys)
    out = ok(ip, "%%chat\nhello", capsys)
    assert re.search(r"^上下文 \d+ % · [\d,]+ / 3,000 · 自动压缩已关闭 · 已压缩 1 次$", out, re.M), out
    ok(ip, "%config Ocw.status_line = False", capsys)
    out = ok(ip, "%%chat\nhello again", capsys)
    assert "上下文" not in out and "context " not in out


# -- commands -------------------------------------------------------------------------------------


def test_help_lists_the_new_commands_in_both_languages(ip, capsys):
    out = ok(ip, "%ocw help", capsys)
    for usage in ("%compact [keep_recent_tokens] [-- what to keep]", "%summary [--all]",
                  "%sessions [--delete NAME [--yes] | --share NAME ROLE | --unshare NAME ROLE]", "%ocw export [--format md|json] [PATH]"):
        assert len([ln for ln in out.splitlines() if ln.startswith(usage + " ")]) == 1, usage
    assert "{Err}" in out and "{{ }}" in out
    ok(ip, "%config Ocw.lang = 'zh'", capsys)
    out = ok(ip, "%ocw help", capsys)
    assert "当前摘要、覆盖范围" in out and "导出为 Markdown" in out and "-- 之后写明摘要必须保留的内容" in out


def test_bad_arguments_name_the_command(ip, capsys):
    ok(ip, "%%chat\nhello", capsys)
    assert usage_error(ip, "%summary everything", capsys) == (
        "UsageError: %summary: unrecognized arguments: everything (usage: %summary [--all])")
    assert usage_error(ip, "%sessions --remove x", capsys).startswith("UsageError: %sessions: ")
    assert "unknown option '--fmt'" in usage_error(ip, "%ocw export --fmt md", capsys)
