"""Progress while compacting (issue 27): before each summarizer call the session says
which call of the chunked plan it is and the time so far ("Compacting… 2 of 5"), and a
stop (KeyboardInterrupt) midway saves nothing and says so."""
from __future__ import annotations

import pytest

import ocw
from ocw.text.i18n import system_message


@pytest.fixture
def sess(tmp_path):
    store = ocw.Store(str(tmp_path / "p.duckdb"))
    s = store.create_session(context_window=16_000)
    s.append_many([("user" if i % 2 == 0 else "assistant", f"turn {i} " + "words " * 400) for i in range(40)])
    yield s
    store.close()


def events(s):
    seen = []
    s.events.subscribe(lambda name, p: seen.append((name, dict(p))) if name.startswith("compaction_") else None)
    return seen


def test_each_call_of_the_chunked_plan_is_announced_with_the_time_so_far(sess, fake_summarizer):
    seen = events(sess)
    fake = fake_summarizer("Summary so far.", context_window=2_000)  # a small summarizer window: several calls
    result = sess.compact(provider=fake)
    assert result.outcome == "succeeded"
    calls = len(fake.calls)
    assert calls >= 3
    names = [n for n, _ in seen]
    assert names == ["compaction_started"] + ["compaction_progress"] * calls + ["compaction_finished"]
    planned = seen[0][1]["calls"]
    steps = [p for n, p in seen if n == "compaction_progress"]
    assert [p["call"] for p in steps] == list(range(1, calls + 1))
    assert steps[0]["calls"] == planned  # the chunked plan's count first …
    # … then the calls so far plus the lines left at the pace so far, which ends on the real count.
    assert steps[-1]["calls"] == calls
    assert all(p["call"] <= p["calls"] and abs(p["calls"] - calls) <= 0.3 * calls for p in steps[1:])
    elapsed = [p["elapsed"] for p in steps]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    assert system_message("compaction_progress", {"call": 2, "calls": 5, "elapsed": 3.14}) == \
        "Compacting… 2 of 5 · 3.1 s"
    assert system_message("compaction_progress", {"call": 2, "calls": 5, "elapsed": 3.14}, "zh") == \
        "正在压缩… 第 2 / 5 步 · 3.1 秒"


def test_a_stop_midway_saves_nothing_and_says_so(sess, fake_summarizer):
    seen = events(sess)
    state = (sess.head, sess.generation, sess.compaction_count, len(sess.summaries()), sess.occupancy()["total"],
             sess.backend.node_count(sess.id))

    def answer(record):
        if record["index"] == 1:  # the stop button while the second call runs
            raise KeyboardInterrupt
        return "Summary so far."

    with pytest.raises(KeyboardInterrupt):
        sess.compact(provider=fake_summarizer(answer, context_window=2_000))
    assert [n for n, _ in seen] == ["compaction_started", "compaction_progress", "compaction_progress",
                                    "compaction_failed"]
    assert system_message(*seen[-1]) == "Context compaction failed: interrupted; nothing was saved"
    assert (sess.head, sess.generation, sess.compaction_count, len(sess.summaries()), sess.occupancy()["total"],
            sess.backend.node_count(sess.id)) == state
    assert not sess.compaction_running and sess.compact_lock.acquire(blocking=False)
    sess.compact_lock.release()


def test_a_stop_counted_off_the_main_thread_stops_at_the_next_call(sess, fake_summarizer):
    """The chat widget runs in a kernel subshell: the stop button is counted (ocw/conversation/stop.py)
    and the compaction stops before its next call, or before saving, with nothing saved."""
    from ocw.conversation import stop

    stop.request()  # pressed before this compaction started: not for it
    state = (sess.generation, len(sess.summaries()), sess.compaction_count)

    def answer(record):
        if record["index"] == 1:
            stop.request()  # pressed during the second call
        return "Summary so far."

    fake = fake_summarizer(answer, context_window=2_000)
    with pytest.raises(KeyboardInterrupt):
        sess.compact(provider=fake)
    assert len(fake.calls) == 2  # the third call was never sent
    assert (sess.generation, len(sess.summaries()), sess.compaction_count) == state

    one_call = fake_summarizer(lambda record: stop.request() or "Summary.")  # pressed during the only call
    with pytest.raises(KeyboardInterrupt):
        sess.compact(provider=one_call)
    assert len(one_call.calls) == 1 and (sess.generation, len(sess.summaries())) == state[:2]
    assert sess.compact(provider=fake_summarizer("Summary.")).outcome == "succeeded"  # the next one runs


def test_the_idle_kernel_handler_counts_a_stop_and_is_given_back():
    import signal

    from ocw.conversation import stop
    from ocw.notebook import stop_button

    class Kernel:  # ipykernel's attribute: the SIGINT handler it puts back after each message
        saved_sigint_handler = signal.SIG_IGN

    class Shell:
        kernel = Kernel()

    shell = Shell()
    assert stop_button.install(shell) and stop_button.install(shell)  # twice: still the kernel's one saved
    before = stop.count()
    shell.kernel.saved_sigint_handler(signal.SIGINT, None)
    assert stop.count() == before + 1
    stop_button.uninstall(shell)
    assert shell.kernel.saved_sigint_handler is signal.SIG_IGN
    assert stop_button.install(object()) is False  # a terminal: nothing to do
