"""ocw/notebook/summary_view.py (mirror): what %summary says of a real session's summaries —
the active one by default, all with --all (newest first, each with its status), where the
covered range ends (a 60-character preview of that message), and in a notebook the
headers escaped with each summary as sanitized HTML. (Through %summary: test_magics.py.)"""
from __future__ import annotations

import ocw
from ocw.notebook.summary_view import summary_bundle, summary_text


def compacted_twice(tmp_path, fake_summarizer, boundary_text: str):
    store = ocw.Store(str(tmp_path / "sv.duckdb"))
    s = store.create_session(context_window=8_000)
    for n in (1, 2):
        turns = [(r, f"{r} {n}.{i}: " + "the nightly load finished " * 20) for i in range(4)
                 for r in ("user", "assistant")]
        s.append_many(turns[:-1] + [("assistant", boundary_text)] + [("user", "and then?"), ("assistant", "ok.")])
        answer = f"Summary {n}: the <b>nightly</b> load."
        assert s.compact(keep_recent_tokens=20, provider=fake_summarizer(answer)).outcome == "succeeded"
    return store, s


def test_the_active_summary_by_default_and_all_of_them_with_all(tmp_path, fake_summarizer):
    store, s = compacted_twice(tmp_path, fake_summarizer, "Done.")
    one = summary_text(s)
    assert one.count("[active]") == 1 and "[superseded]" not in one and "Summary 2: the <b>nightly</b> load." in one
    both = summary_text(s, True)
    assert both.index("[active]") < both.index("[superseded]") and "Summary 1: the <b>nightly</b> load." in both
    assert "Compactions so far: 2" in both
    store.close()


def test_the_boundary_is_previewed_in_60_characters(tmp_path, fake_summarizer):
    for text, shown in (("x" * 60, "x" * 60), ("y" * 61, "y" * 59 + "…")):
        store, s = compacted_twice(tmp_path / text[0], fake_summarizer, text)
        head = summary_text(s).splitlines()[0]
        assert f"(assistant: \u201c{shown}\u201d)" in head, head
        store.close()


def test_the_notebook_view_escapes_headers_and_sanitizes_summaries(tmp_path, fake_summarizer):
    store, s = compacted_twice(tmp_path, fake_summarizer, "<script>alert(1)</script>")
    html = summary_bundle(s, True)["text/html"]
    assert html.count("<p><strong>Summary ") == 2 and html.count("<blockquote>") == 2
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "<p>Compactions so far: 2</p>" in html  # a plain line: no summary under it
    assert "<blockquote><p>Summary 2: the " in html
    store.close()


def test_a_summary_whose_log_entry_fell_off_is_shown_from_its_node_and_the_log_keeps_its_figures(
        tmp_path, fake_summarizer):
    import re

    store, s = compacted_twice(tmp_path, fake_summarizer, "Done.")
    first, second = s.metadata["compactions"]
    s.set_metadata(compactions=[first])  # the active summary's entry is gone (a bounded log)
    text = summary_text(s, True)
    head = text.splitlines()[0]
    assert head.startswith(f"Summary {second['summary']} [active] covers ")
    assert re.search(r"; made \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", head), head  # the node's own time, no trigger
    log = [ln for ln in text.splitlines() if ln.startswith("  1. ")]
    assert log == [f"  1. {first['at'].replace('T', ' ').replace('+00:00', ' UTC')}  {first['trigger']}, "
                   f"{first['before']:,} → {first['after']:,} tokens, folded {first['folded']:,} messages"
                   f"  → {first['summary']}"]
    store.close()


def test_without_an_active_summary_it_says_so_and_points_at_all_only_when_there_are_others(
        tmp_path, fake_summarizer):
    store, s = compacted_twice(tmp_path, fake_summarizer, "Done.")
    s.rewind(s.branch()[0])  # back to the first message: before both summaries' boundaries
    assert summary_text(s).splitlines()[0] == (
        "No summary is active on this branch: nothing has been compacted here yet (%summary --all lists the others).")
    both = summary_text(s, True)
    assert "[not on this branch]" in both and "[superseded]" in both and "No summary is active" not in both
    fresh = store.create_session(context_window=8_000)
    assert summary_text(fresh) == "No summary is active on this branch: nothing has been compacted here yet.\n" \
                                  "Compactions so far: 0"
    store.close()


def test_the_log_names_the_summarizer_only_when_it_was_one_of_its_own(tmp_path, fake_summarizer):
    store, s = compacted_twice(tmp_path, fake_summarizer, "Done.")
    first, second = s.metadata["compactions"]
    own = {**second, "summarizer": "openai/gpt-4o-mini", "own_summarizer": True}
    s.set_metadata(compactions=[{**first, "summarizer": "openai/gpt-4o", "own_summarizer": False}, own])
    log = [ln for ln in summary_text(s, True).splitlines() if ln.startswith(("  1. ", "  2. "))]
    assert "  by " not in log[0]  # the chat model's own compaction reads as it always did
    assert log[1].endswith(f"  → {second['summary']}  by openai/gpt-4o-mini")
    head = summary_text(s).splitlines()[0]
    assert head.endswith(", summarized by openai/gpt-4o-mini (a summarizer of its own)")
    store.close()


def test_a_continued_session_says_where_and_when_it_came_from(tmp_path, fake_summarizer):
    from ocw.conversation import continue_from

    store, s = compacted_twice(tmp_path, fake_summarizer, "Done.")
    messages, link = continue_from.seed(s, 1)  # what %new --from-summary carries
    new = store.create_session(context_window=8_000)
    new.set_metadata(origin=link)
    when = link["at"].replace("T", " ").replace("+00:00", " UTC")
    assert summary_text(new).splitlines()[-1] == (
        f"Continued from session {s.name!r} ({s.id}) on {when}: its summary {link['summary']} and the last 1 turn.")
    new.set_metadata(origin={**link, "at": None, "summary": None, "turns": 2})
    assert summary_text(new).splitlines()[-1] == (
        f"Continued from session {s.name!r} ({s.id}) on ?: no summary and the last 2 turns.")
    store.close()


def test_the_notebook_view_shows_only_the_active_summary_unless_asked_for_all(tmp_path, fake_summarizer):
    store, s = compacted_twice(tmp_path, fake_summarizer, "Done.")
    one = summary_bundle(s)
    assert one["text/html"].count("<blockquote>") == 1 and "[active]" in one["text/html"]
    assert "[superseded]" not in one["text/html"] and "[superseded]" not in one["text/plain"]
    assert summary_bundle(s, True)["text/html"].count("<blockquote>") == 2
    store.close()
