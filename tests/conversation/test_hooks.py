"""Compaction hooks (issue 27): ocw.on("pre_compact"/"post_compact", fn), ocw.off.
A pre_compact hook sees the plan before any summarizer call and may veto it (nothing
sent, nothing saved) or add to the focus the summarizer reads; a post_compact hook sees
the summary, the memory and the figures; a hook that raises is one line and the
compaction goes on."""
from __future__ import annotations

import pytest

import ocw
from ocw.context.engine import CompactionResult
from ocw.conversation import hooks
from ocw.text.errors import InvalidArgument
from ocw.text.i18n import system_message


@pytest.fixture(autouse=True)
def no_hooks_left():
    yield
    for event in hooks.EVENTS:
        hooks.off(event)


@pytest.fixture
def sess(tmp_path):
    store = ocw.Store(str(tmp_path / "h.duckdb"))
    s = store.create_session(context_window=16_000)
    s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} about conf/prod.yaml " + "words " * 300)
                   for i in range(20)])
    yield s
    store.close()


def test_pre_compact_sees_the_plan_and_a_veto_sends_and_saves_nothing(sess, fake_summarizer):
    seen = []

    def guard(plan):
        seen.append(plan)
        plan.veto("the demo is recording")

    assert ocw.on("pre_compact", guard) is guard
    summarizer = fake_summarizer("S")
    state = (sess.generation, sess.compaction_count, len(sess.summaries()), sess.occupancy()["total"])
    result = sess.compact(provider=summarizer, focus="the config paths")
    assert summarizer.calls == [] and result.outcome == "no_op"
    assert (sess.generation, sess.compaction_count, len(sess.summaries()), sess.occupancy()["total"]) == state
    (plan,) = seen
    assert (plan.trigger, plan.session_id, plan.focus) == ("manual", sess.id, "the config paths")
    assert len(plan.folded) == 8 and plan.folded[0]["id"] == sess.branch()[0] and plan.folded[0]["role"] == "user"
    assert plan.folded_tokens == sum(m["tokens"] for m in plan.folded) > 0
    assert result.message() == "Compaction skipped: a pre_compact hook vetoed it (the demo is recording)."
    assert result.message("zh") == "已跳过压缩：pre_compact 钩子否决了它（the demo is recording）。"

    assert ocw.off("pre_compact", guard) == 1 and ocw.off("pre_compact", guard) == 0
    assert sess.compact(provider=summarizer).outcome == "succeeded" and len(summarizer.calls) == 1


def test_returning_false_vetoes_and_add_focus_reaches_the_summarizer(sess, fake_summarizer):
    ocw.on("pre_compact", lambda plan: plan.add_focus("every   ticket id"))
    summarizer = fake_summarizer("S")
    assert sess.compact(provider=summarizer, focus="the config paths").outcome == "succeeded"
    request = str(summarizer.calls[0]["messages"]) + str(summarizer.calls[0]["system"])
    assert "the config paths; every ticket id" in request
    assert sess.metadata["compactions"][-1]["focus"] == "the config paths; every ticket id"
    hooks.off("pre_compact")
    ocw.on("pre_compact", lambda plan: False)
    sess.append_many([("user", "more " * 400), ("assistant", "more " * 400)] * 4)
    result = sess.compact(provider=summarizer)
    assert result.outcome == "no_op" and result.message().endswith("(no reason given).") and len(summarizer.calls) == 1


def test_post_compact_gets_the_summary_memory_and_figures(sess, fake_summarizer):
    got = []
    ocw.on("post_compact", got.append)
    result = sess.compact(provider=fake_summarizer("The user works on conf/prod.yaml."))
    (info,) = got
    assert info.summary_id == result.summary_id == sess.active_summary().id
    assert info.summary.startswith("The user works on conf/prod.yaml.")
    assert isinstance(info.memory, str)
    assert (info.tokens_before, info.tokens_after, info.folded) == (result.tokens_before, result.tokens_after, 8)
    assert info.tokens_after < info.tokens_before and info.trigger == "manual"


def test_a_hook_that_raises_is_one_line_and_never_breaks_the_compaction(sess, fake_summarizer):
    def broken(plan):
        raise ValueError("oops\nsecond line")

    ran = []
    ocw.on("pre_compact", broken)
    ocw.on("pre_compact", lambda plan: ran.append("next"))  # the hooks after it still run
    ocw.on("post_compact", lambda info: 1 / 0)
    result = sess.compact(provider=fake_summarizer("S"))
    assert result.outcome == "succeeded" and ran == ["next"] and sess.compaction_count == 1
    lines = result.message().splitlines()
    assert lines[0].startswith("Context compacted: covered 8 older messages")
    assert lines[1] == "pre_compact hook test_a_hook_that_raises_is_one_line_and_never_breaks_the_compaction." \
                       "<locals>.broken raised ValueError: oops second line; it was skipped"
    assert lines[2].startswith("post_compact hook ") and lines[2].endswith(
        " raised ZeroDivisionError: division by zero; it was skipped")
    assert len(lines) == 3
    assert result.message("zh").splitlines()[2].endswith("抛出了 ZeroDivisionError: division by zero；已跳过")


def test_bad_registrations_are_one_line_errors():
    with pytest.raises(InvalidArgument, match="ocw.on takes one of 'pre_compact', 'post_compact', not 'pre'"):
        ocw.on("pre", print)
    with pytest.raises(InvalidArgument, match="takes a function"):
        ocw.on("pre_compact", "print")
    ocw.on("post_compact", print)
    ocw.on("post_compact", print)  # once only
    assert hooks.registered("post_compact") == [print]
    plan = hooks.PreCompact("manual", "s", "id", [], 0, None)
    with pytest.raises(InvalidArgument, match="at most 500 characters"):
        plan.add_focus("x" * 501)
    assert plan.focus is None


def test_a_failed_compaction_still_reports_hook_errors():
    payload = {"error": "boom", "trigger": "manual",
               "hook_errors": [{"event": "pre_compact", "name": "f", "error": "ValueError: no"}]}
    assert system_message("compaction_failed", payload) == (
        "Context compaction failed: boom\npre_compact hook f raised ValueError: no; it was skipped")
    assert CompactionResult("failed", "manual", payload=payload).payload is payload


def test_focus_additions_stop_at_500_characters_and_a_bare_veto_says_no_reason():
    plan = hooks.PreCompact("manual", "s", "id", [], 0, "paths")
    plan.add_focus("x" * 400)
    plan.add_focus("  " + "y" * 50 + "   " + "y" * 49 + " \n")  # 100 characters once spaces are collapsed: 500 in all
    assert sum(map(len, plan.added)) == 500 and plan.focus == "paths; " + "x" * 400 + "; " + "y" * 50 + " " + "y" * 49
    with pytest.raises(InvalidArgument, match="at most 500 characters"):
        plan.add_focus("z")
    for bad in ("", "   ", None):
        with pytest.raises(InvalidArgument, match="add_focus takes the words"):
            plan.add_focus(bad)
    plan.veto()
    assert plan.vetoed == "no reason given"
    plan.veto("r" * 300)
    assert plan.vetoed == "r" * 200


def test_a_hooks_error_line_keeps_160_characters_of_its_message():
    def long_error(plan):
        raise RuntimeError("e" * 300)

    ocw.on("pre_compact", long_error)
    (err,) = hooks.run_pre(hooks.PreCompact("manual", "s", "id", [], 0, None))
    assert err["error"] == "RuntimeError: " + "e" * 160 and err["event"] == "pre_compact"
    assert err["name"].endswith("long_error")


def test_off_removes_the_one_named_or_every_hook_and_says_how_many():
    def a(plan):
        return None

    def b(plan):
        return None

    for fn in (a, b):
        ocw.on("pre_compact", fn)
    assert hooks.run_pre(hooks.PreCompact("manual", "s", "id", [], 0, None)) == []  # returning None is no veto
    assert hooks.off("pre_compact", a) == 1 and hooks.registered("pre_compact") == [b]
    assert hooks.off("pre_compact", a) == 0
    ocw.on("pre_compact", a)
    assert hooks.off("pre_compact") == 2 and hooks.registered("pre_compact") == []
