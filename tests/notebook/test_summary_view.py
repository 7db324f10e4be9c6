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
