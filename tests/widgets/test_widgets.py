"""ocw.widgets.ring.ContextWidget: traitlets mirror the session's events; the browser's
only action ({action: "compact", session_id}) runs the notebook's compact path."""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

import ocw
from ocw.context import events as ev
from ocw.widgets._static import asset
from ocw.context.events import EventBus
from ocw.text.i18n import system_message
from ocw.widgets.ring import UI_LABELS, ContextWidget, ui_labels

ROOT = Path(__file__).resolve().parents[2]


# -- sessions -----------------------------------------------------------------------
class FakeSession:
    """Exactly the interface the widget relies on (see ocw/widgets/ring.py)."""

    def __init__(self, sid: str = "s_fake", name: str = "default", window: int = 8000):
        self.id = sid
        self.name = name
        self.events = EventBus()
        self.compaction_running = False
        self.occ = self._occ(total=1234, window=window)

    def _occ(self, total: int, window: int, **extra) -> dict:
        return {
            "total": total,
            "window": window,
            "ratio": total / window,
            "breakdown": {"system": 34, "tools": 0, "summary": 0, "messages": total - 34, "free": window - total},
            "basis": "estimated",
            "encoding": "o200k_base",
            "encoding_exact": True,
            "calibration": None,
            "generation": 0,
            "head": "n_1",
            "compaction_count": 0,
            "session_id": self.id,
            **extra,
        }

    def occupancy(self) -> dict:
        return dict(self.occ)

    def publish(self, **changes) -> None:
        if "total" in changes:  # keep ratio and breakdown consistent with the total
            fresh = self._occ(changes["total"], self.occ["window"])
            changes = {"ratio": fresh["ratio"], "breakdown": fresh["breakdown"], **changes}
        self.occ.update(changes)
        self.events.emit(ev.OCCUPANCY_CHANGED, self.occupancy())


def real_session(name: str = "default"):
    store = ocw.Store(":memory:")
    return store.create_session(model="gpt-4o", context_window=8000, system_prompt="x", name=name)


def grow(session, n: int = 3) -> None:
    """Add conversation text so the occupancy changes."""
    if isinstance(session, FakeSession):
        session.publish(total=session.occ["total"] + 100 * n)
    else:
        for i in range(n):
            session.append("user", f"question {i}: " + "tell me about compaction " * 10)
            session.append("assistant", f"answer {i}: " + "compaction folds old turns into a summary " * 10)


@pytest.fixture(params=["fake", "real"])
def session(request):
    return FakeSession() if request.param == "fake" else real_session()


def listeners(session) -> int:
    return len(session.events._listeners)


def browser_msg(widget, content) -> None:
    """Deliver a custom message the way the front end's model.send() does."""
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def browser_update(widget, **state) -> None:
    """Deliver a state change the way model.set + save_changes does."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                        "buffers": []})


FINISHED = {"summarised_count": 12, "tokens_before": 9800, "tokens_after": 2100}
FINISHED_TEXT = "Context compacted: covered 12 older messages, 9,800 → 2,100 tokens"


# -- traitlets follow the session ---------------------------------------------------------
def test_attach_fills_traitlets_from_occupancy(session):
    grow(session)
    w = ContextWidget(session)
    occ = session.occupancy()
    assert w.session_id == session.id
    assert w.session_name == session.name
    assert w.total == occ["total"] > 0
    assert w.window == 8000
    assert w.ratio == pytest.approx(occ["total"] / 8000)
    assert {"system", "tools", "summary", "messages", "free"} <= set(w.breakdown) <= {"system", "tools", "summary", "memory", "pins", "messages", "free"}
    assert w.breakdown["free"] == 8000 - occ["total"]
    assert all(isinstance(v, int) for v in w.breakdown.values())
    assert w.basis == "estimated"
    assert w.calibration is None
    assert w.encoding.startswith("o200k_base")
    assert w.compaction_count == 0
    assert w.busy is False
    assert w.reserve_ratio == 0.8
    assert listeners(session) == 1


def test_auto_compaction_off_reaches_the_panel_as_zero_not_the_default(ip):
    """With auto-compaction off the panel says "off" (widgets/context.js, for a ratio of 0):
    the 0 must reach it, not be taken for "no value" and left at 0.8."""
    ip.run_line_magic("config", "Ocw.auto_compact = 0")
    assert ip.run_cell("%%chat\nhello").error_in_exec is None
    w = ocw.chat().ring
    assert w.reserve_ratio == 0.0
    ip.run_line_magic("config", "Ocw.auto_compact = 0.75")
    assert ip.run_cell("%%chat\nagain").error_in_exec is None
    assert ocw.chat().ring.reserve_ratio == 0.75

def test_occupancy_changed_updates_traitlets(session):
    w = ContextWidget(session)
    before = w.total
    grow(session)
    assert w.total > before
    assert w.total == session.occupancy()["total"]
    assert w.ratio == pytest.approx(w.total / 8000)
    assert w.breakdown["messages"] == session.occupancy()["breakdown"]["messages"]


def test_occupancy_of_another_session_is_ignored():
    s = FakeSession()
    w = ContextWidget(s)
    s.events.emit(ev.OCCUPANCY_CHANGED, {**s.occupancy(), "session_id": "s_other", "total": 7777})
    assert w.total == 1234


def test_measured_basis_and_calibration():
    s = real_session()
    grow(s)
    w = ContextWidget(s)
    estimated = w.total
    s.record_usage(estimated + 50)
    assert w.basis == "measured"
    assert w.total == estimated + 50
    assert w.calibration == pytest.approx((estimated + 50) / estimated, rel=1e-3)


def test_measured_panel_rows_add_up_to_the_total_and_percents_to_100():
    """Issue 10: with a measured total the panel's rows are calibrated to add up to it
    (the ring said 586 while the rows said 596 before), and the percents to 100.0."""
    s = real_session()
    grow(s)
    w = ContextWidget(s)
    s.record_usage(int(w.total * 1.17) + 3)  # the server counts more than the estimate
    assert w.basis == "measured"
    rows = {k: v for k, v in w.breakdown.items() if k != "free"}
    assert sum(rows.values()) == w.total
    assert sum(w.breakdown.values()) == w.window  # free is the rest
    assert set(w.percents) == set(w.breakdown)
    assert round(sum(float(p) for p in w.percents.values()), 1) == 100.0
    assert w.percents == s.occupancy()["percents"]  # the panel shows the session's own figures


def test_unknown_tokenizer_is_labelled_an_estimate():
    """The widget sends the name and whether it is exact; the browser says "(estimate)"
    in the widget's language (the Chinese panel must not say it in English)."""
    s = FakeSession()
    s.occ.update(encoding="cl100k_base", encoding_exact=False)
    w = ContextWidget(s)
    assert (w.encoding, w.encoding_exact) == ("cl100k_base", False)
    s.publish(encoding="cl100k_base (estimate)")  # a session's label, English suffix included
    assert (w.encoding, w.encoding_exact) == ("cl100k_base", False)
    s.publish(encoding="o200k_base", encoding_exact=True)
    assert (w.encoding, w.encoding_exact) == ("o200k_base", True)
    assert (ui_labels("en")["estimate"], ui_labels("zh")["estimate"]) == ("estimate", "估算")


def test_compaction_events_drive_busy_and_message(session):
    w = ContextWidget(session)
    session.events.emit(ev.COMPACTION_STARTED, {})
    assert w.busy is True
    assert w.message == "Compacting context…"
    session.events.emit(ev.COMPACTION_FINISHED, FINISHED)
    assert w.busy is False
    assert w.message == FINISHED_TEXT

    session.events.emit(ev.COMPACTION_FINISHED, {"no_op": True})
    assert w.busy is False
    assert w.message == "Context is already compacted; no older messages to fold."

    session.events.emit(ev.COMPACTION_STARTED, {})
    session.events.emit(ev.COMPACTION_FAILED, {"error": "timeout"})
    assert w.busy is False
    assert w.message == "Context compaction failed: timeout"


def test_compaction_progress_is_shown_once_there_is_more_than_one_call(session):
    """"Compacting… 2 of 5 · 3.1 s" only when a compaction makes more than one summarizer
    call (calls 1, or none said, leaves "Compacting context…"); it also marks the ring busy,
    for a panel opened after the compaction started."""
    w = ContextWidget(session)
    session.events.emit(ev.COMPACTION_PROGRESS, {"call": 1, "calls": 1, "elapsed": 0.0})
    assert (w.busy, w.message) == (False, "")
    session.events.emit(ev.COMPACTION_STARTED, {})
    session.events.emit(ev.COMPACTION_PROGRESS, {"call": 1, "elapsed": 0.2})  # no count: one call
    assert (w.busy, w.message) == (True, "Compacting context…")
    session.events.emit(ev.COMPACTION_PROGRESS, {"call": 1, "calls": 2, "elapsed": 0.4})
    assert w.message == "Compacting… 1 of 2 · 0.4 s"
    session.events.emit(ev.COMPACTION_PROGRESS, {"call": 2, "calls": 5, "elapsed": 3.14})
    assert (w.busy, w.message) == (True, "Compacting… 2 of 5 · 3.1 s")
    w.lang = "zh"
    assert w.message == "正在压缩… 第 2 / 5 步 · 3.1 秒"
    session.events.emit(ev.COMPACTION_FINISHED, {"no_op": True})
    assert w.busy is False


def test_the_events_that_say_head_moved_or_a_turn_finished_re_read_the_occupancy():
    """The bus's HEAD_MOVED and TURN_FINISHED make the ring read the session again (a session
    may say HEAD moved before it publishes anything); any other event name does not."""
    s = FakeSession()
    w = ContextWidget(s)
    for i, name in enumerate((ev.HEAD_MOVED, ev.TURN_FINISHED)):
        s.occ.update(s._occ(total=2000 + i, window=8000))  # changed, not published
        assert w.total != 2000 + i
        s.events.emit(name, {"head": "n_2"})
        assert (w.total, w.ratio) == (2000 + i, (2000 + i) / 8000), name
    s.occ.update(s._occ(total=3000, window=8000))
    for other in ("pins_changed", ev.COMPACTION_PROGRESS):
        s.events.emit(other, {"call": 1, "calls": 1})
        assert w.total == 2001, other


def test_finished_refreshes_the_count():
    s = FakeSession()
    w = ContextWidget(s)
    s.occ.update(compaction_count=1, generation=1, total=300, ratio=300 / 8000)
    s.events.emit(ev.COMPACTION_FINISHED, FINISHED)
    assert (w.compaction_count, w.generation, w.total) == (1, 1, 300)


def test_head_moved_refreshes():
    s = real_session()
    grow(s, 3)
    w = ContextWidget(s)
    full = w.total
    s.rewind_turns(2)
    assert 0 < w.total < full
    assert w.total == s.occupancy()["total"]


def test_attach_while_a_compaction_runs_shows_busy():
    s = FakeSession()
    s.compaction_running = True
    assert ContextWidget(s).busy is True


def test_events_from_another_thread_update_traitlets():
    s = FakeSession()
    w = ContextWidget(s)
    th = threading.Thread(target=lambda: s.publish(total=4000, ratio=0.5))
    th.start()
    th.join()
    assert (w.total, w.ratio) == (4000, 0.5)


# -- browser -> Python ------------------------------------------------------------------------
class Compactor:
    """Stands in for the notebook's compact path: emits the events, returns the text."""

    def __init__(self, session, payload=None, seen=None):
        self.session = session
        self.payload = payload or FINISHED
        self.calls: list[str] = []
        self.seen = seen

    def __call__(self, session_id: str) -> str:
        self.calls.append(session_id)
        bus = self.session.events
        self.session.compaction_running = True
        bus.emit(ev.COMPACTION_STARTED, {})
        if self.seen is not None:
            self.seen()
        self.session.compaction_running = False
        bus.emit(ev.COMPACTION_FINISHED, self.payload)
        return system_message(ev.COMPACTION_FINISHED, self.payload)


def test_compact_message_calls_the_compact_path(session):
    states = []
    w = ContextWidget(session)
    compact = Compactor(session, seen=lambda: states.append((w.busy, w.message)))
    w._compact = compact
    browser_msg(w, {"action": "compact", "session_id": session.id})
    assert compact.calls == [session.id]
    assert states == [(True, "Compacting context…")]  # busy while it runs
    assert w.busy is False
    assert w.message == FINISHED_TEXT


def test_compact_message_for_another_session_is_ignored(session):
    compact = Compactor(session)
    w = ContextWidget(session, compact=compact)
    browser_msg(w, {"action": "compact", "session_id": "s_someone_else"})
    browser_msg(w, {"action": "compact", "session_id": ""})
    browser_msg(w, {"action": "compact"})
    browser_msg(w, {"action": "delete", "session_id": session.id})
    browser_msg(w, "compact")
    assert compact.calls == []
    assert w.message == ""


def test_compact_message_is_ignored_while_busy(session):
    compact = Compactor(session)
    w = ContextWidget(session, compact=compact)
    session.events.emit(ev.COMPACTION_STARTED, {})
    browser_msg(w, {"action": "compact", "session_id": session.id})
    assert compact.calls == []
    session.events.emit(ev.COMPACTION_FINISHED, {"no_op": True})
    session.compaction_running = True  # e.g. an automatic compaction in another thread
    browser_msg(w, {"action": "compact", "session_id": session.id})
    assert compact.calls == []
    session.compaction_running = False
    browser_msg(w, {"action": "compact", "session_id": session.id})
    assert compact.calls == [session.id]


def test_compact_returning_the_no_op_message():
    s = FakeSession()
    w = ContextWidget(s, compact=lambda sid: system_message(ev.COMPACTION_FINISHED, {"no_op": True}))
    browser_msg(w, {"action": "compact", "session_id": s.id})
    assert w.message == "Context is already compacted; no older messages to fold."
    assert w.busy is False


def test_compact_that_raises_reports_a_failure():
    s = FakeSession()

    def boom(sid):
        s.events.emit(ev.COMPACTION_STARTED, {})
        raise RuntimeError("provider down")

    w = ContextWidget(s, compact=boom)
    browser_msg(w, {"action": "compact", "session_id": s.id})
    assert w.busy is False
    assert w.message == "Context compaction failed: provider down"


def test_compact_without_a_callable_does_nothing():
    s = FakeSession()
    w = ContextWidget(s)
    browser_msg(w, {"action": "compact", "session_id": s.id})
    assert w.message == ""


def test_panel_open_comes_from_the_browser():
    w = ContextWidget(FakeSession())
    assert w.panel_open is False
    browser_update(w, panel_open=True)
    assert w.panel_open is True


# -- several widgets, one session -------------------------------------------------------------
def test_two_widgets_on_one_session_stay_in_sync(session):
    a = ContextWidget(session)
    compact = Compactor(session, seen=lambda: seen.append((a.busy, b.busy)))
    b = ContextWidget(session, compact=compact)
    seen: list = []
    grow(session)
    assert a.total == b.total == session.occupancy()["total"]
    browser_msg(b, {"action": "compact", "session_id": session.id})
    assert seen == [(True, True)]
    assert a.busy is b.busy is False
    assert a.message == b.message == FINISHED_TEXT
    assert listeners(session) == 2
    a.close()
    assert listeners(session) == 1
    grow(session)
    assert b.total == session.occupancy()["total"]


# -- empty state, detach, lifecycle --------------------------------------------------------------
def test_empty_state():
    w = ContextWidget()
    assert w.session_id == ""
    assert w.session is None
    assert (w.total, w.window, w.ratio, w.busy, w.message) == (0, 0, 0.0, False, "")
    assert w.labels["empty"] == "No session yet — start one with %%chat"
    assert repr(w) == "<ocw context: no session>"
    browser_msg(w, {"action": "compact", "session_id": ""})  # never an error
    w.refresh()
    w.detach()
    assert w.session_id == ""


def test_detach_unsubscribes_and_empties(session):
    grow(session)
    w = ContextWidget(session)
    w.message = "something"
    assert listeners(session) == 1
    w.detach()
    assert listeners(session) == 0
    assert (w.session_id, w.total, w.message, w.busy) == ("", 0, "", False)
    grow(session)
    session.events.emit(ev.COMPACTION_STARTED, {})
    assert (w.total, w.busy) == (0, False)


def test_attach_switches_sessions():
    s1, s2 = FakeSession("s_1", "one"), FakeSession("s_2", "two")
    s2.occ.update(total=2000, ratio=0.25)
    w = ContextWidget(s1)
    w.attach(s2)
    assert listeners(s1) == 0 and listeners(s2) == 1
    assert (w.session_id, w.session_name, w.total) == ("s_2", "two", 2000)
    w.attach(s2)  # idempotent
    assert listeners(s2) == 1
    s1.publish(total=10)
    assert w.total == 2000


def test_a_dropped_widget_does_not_break_the_bus():
    import gc

    s = FakeSession()
    w = ContextWidget(s)
    w.close()
    del w
    gc.collect()
    s.publish(total=5)  # no error, nobody listening
    assert listeners(s) == 0


# -- text, labels, language ----------------------------------------------------------------------
def test_repr_is_stable():
    s = FakeSession()
    w = ContextWidget(s)
    assert repr(w) == "<ocw context: default, 1,234 / 8,000 tokens (15.4%)>"
    data, _meta = w._repr_mimebundle_()
    assert data["text/plain"] == repr(w)
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "0x" not in repr(w)
    assert repr(ContextWidget(real_session("proj"))).startswith("<ocw context: proj, ")


def test_a_saved_notebook_shows_the_rings_figures_and_breakdown_in_its_words():
    """The text/html a saved or exported notebook shows where no widget runs."""
    w = ContextWidget(FakeSession())
    html = w._repr_mimebundle_()[0]["text/html"]
    assert "default · 1,234 / 8,000 tokens (15.4%)" in html
    assert "<td>System prompt</td><td style='text-align:right'>34</td>" in html
    assert "<td>Messages</td><td style='text-align:right'>1,200</td>" in html
    w.lang = "zh"
    assert "<td>消息</td>" in w._repr_mimebundle_()[0]["text/html"]
    empty = ContextWidget()
    assert "no session · 0 / 0 tokens" in empty._repr_mimebundle_()[0]["text/html"]
    assert (empty.total, empty.compaction_count, empty.compaction_inferred, empty.pruned_results) == (0, 0, 0, 0)

def test_a_panel_moved_to_another_session_drops_the_old_sessions_message():
    a, b = FakeSession("s_a", "first"), FakeSession("s_b", "second")
    w = ContextWidget(a, compact=lambda sid: system_message(ev.COMPACTION_FINISHED, {"no_op": True}))
    browser_msg(w, {"action": "compact", "session_id": a.id})
    assert w.message == "Context is already compacted; no older messages to fold."
    w.attach(b)
    assert (w.session_id, w.session_name, w.message) == ("s_b", "second", "")
    w.lang = "zh"  # a change of language says the current message again: there is none
    assert w.message == ""


def test_the_default_language_is_english():
    w = ContextWidget()
    assert w.lang == "en" and w.labels["compact_now"] == "Compact now"


def test_an_occupancy_that_cannot_be_read_keeps_the_figures_and_is_logged(caplog):
    s = FakeSession("s_broken")
    w = ContextWidget(s)
    before = (w.total, w.window)

    def broken():
        raise RuntimeError("the file is gone")

    s.occupancy = broken
    with caplog.at_level("ERROR", logger="ocw"):
        w.refresh()
    assert (w.total, w.window) == before
    assert "could not read the occupancy of session s_broken" in caplog.text

def test_labels_follow_lang():
    w = ContextWidget(lang="zh-CN")
    assert w.lang == "zh"
    assert w.labels["compact_now"] == "立即压缩"
    w.lang = "en"
    assert w.labels["compact_now"] == "Compact now"
    assert set(UI_LABELS["en"]) == set(UI_LABELS["zh"])
    for key in ("cat_system", "cat_tools", "cat_summary", "cat_messages", "cat_free", "estimated",
                "measured", "compact_now", "count", "count_info", "empty"):
        assert ui_labels("en")[key] and ui_labels("zh")[key]
    assert "approximate" in ui_labels("en")["count_info"]
    assert "provider-reported usage" in ui_labels("en")["count_info"]


def test_system_messages_in_chinese():
    s = FakeSession()
    w = ContextWidget(s, lang="zh")
    s.events.emit(ev.COMPACTION_STARTED, {})
    assert w.message == "正在压缩上下文…"
    s.events.emit(ev.COMPACTION_FINISHED, FINISHED)
    assert w.message == "上下文已压缩：覆盖了 12 条较早的消息，9,800 → 2,100 tokens"


def test_state_is_json_and_complete():
    w = ContextWidget(FakeSession())
    state = w.get_state()
    for key in ("session_id", "session_name", "total", "window", "ratio", "breakdown", "basis", "encoding",
                "calibration", "generation", "compaction_count", "busy", "message", "panel_open",
                "reserve_ratio", "lang", "labels", "_esm", "_css"):
        assert key in state, key
    json.dumps({k: v for k, v in state.items() if not k.startswith("_")})


# -- the browser side ------------------------------------------------------------------------------
def test_es_module_is_self_contained():
    src = asset("context.js").read_text(encoding="utf-8")
    assert re.search(r"^\s*import[\s{*'\"]", src, re.M) is None, "static import"
    assert re.search(r"\bimport\s*\(", src) is None, "dynamic import"
    assert re.search(r"\brequire\s*\(", src) is None
    assert not re.search(r"https?://", src), "no URLs: anywidget loads the module from a Blob, offline"
    assert re.search(r"^export default\b", src, re.M)
    assert "model.send({ action: \"compact\", session_id:" in src


def test_widget_ships_the_module_and_css():
    w = ContextWidget()
    assert w._esm == asset("context.js").read_text(encoding="utf-8")
    assert w._css == asset("context.css").read_text(encoding="utf-8")
    assert asset("context.js").parent.name in ("widgets", "static")


def test_css_follows_jupyterlab_themes():
    css = asset("context.css").read_text(encoding="utf-8")
    for var in ("--jp-layout-color0", "--jp-ui-font-color1", "--jp-border-color2", "--jp-brand-color1",
                "--jp-success-color1", "--jp-warn-color1", "--jp-error-color1"):
        assert f"var({var}," in css, var  # with a fallback
    selectors = re.findall(r"\.([a-zA-Z][\w-]*)", re.sub(r"/\*.*?\*/", "", css, flags=re.S))
    assert selectors and all(s.startswith("ocw-") for s in selectors if not re.fullmatch(r"\d+", s))
    assert not re.search(r"suggest", css, re.I)


# -- issue 12: one source of words, live language ---------------------------------------------
def test_the_js_tests_use_exactly_pythons_labels():
    """widgets/context.js has no word table; its tests read js/test/ui_labels.json, which
    must be Python's UI_LABELS exactly (regenerate it from ocw.widgets.ring.UI_LABELS)."""
    copy = json.loads((ROOT / "js" / "test" / "ui_labels.json").read_text(encoding="utf-8"))
    assert copy == UI_LABELS, (
        "js/test/ui_labels.json differs from ocw.widgets.ring.UI_LABELS; regenerate it with: .venv/bin/python -c "
        "\"import json, ocw.widgets.ring as w; print(json.dumps(w.UI_LABELS, ensure_ascii=False, indent=2))\" "
        "> js/test/ui_labels.json")
    src = asset("context.js").read_text(encoding="utf-8")
    assert "DEFAULT_LABELS" not in src and "Compact now" not in src
    assert set(UI_LABELS["en"]) == set(UI_LABELS["zh"])


def test_language_switch_says_the_message_again_in_the_new_language():
    s = FakeSession()
    w = ContextWidget(s, lang="en")
    s.events.emit(ev.COMPACTION_FINISHED, FINISHED)
    assert w.message == FINISHED_TEXT
    sent = []
    w.observe(lambda c: sent.append(c["name"]), names=["labels", "message"])
    w.lang = "zh"
    assert w.labels == UI_LABELS["zh"]
    assert w.message == "上下文已压缩：覆盖了 12 条较早的消息，9,800 → 2,100 tokens"
    assert sorted(sent) == ["labels", "message"]
    w.lang = "en"
    assert w.message == FINISHED_TEXT


@pytest.mark.parametrize("key, params, en, zh", [
    ("err_empty_summary", {}, "the summarizer returned an empty summary", "摘要模型返回了空摘要"),
    ("err_not_smaller", {"new": "900", "old": "800"},
     "the summary (900 tokens) is not smaller than what it replaces (800 tokens); nothing was saved",
     "摘要（900 tokens）不比它替代的内容（800 tokens）小；未保存任何内容"),
])
def test_ocw_own_failure_reason_follows_the_language(key, params, en, zh):
    s = FakeSession()
    w = ContextWidget(s, lang="en")
    payload = {"error": en, "error_key": key, "error_params": params}
    s.events.emit(ev.COMPACTION_FAILED, payload)
    assert w.message == f"Context compaction failed: {en}"
    w.lang = "zh"
    assert w.message == f"上下文压缩失败：{zh}"
    # A provider's own words carry no key: they stay as the provider said them.
    s.events.emit(ev.COMPACTION_FAILED, {"error": "openai: HTTP 503 upstream overloaded"})
    assert w.message == "上下文压缩失败：openai: HTTP 503 upstream overloaded"


def test_a_refusal_from_the_compact_path_is_not_replaced_by_an_old_event():
    s = FakeSession()
    w = ContextWidget(s, compact=lambda sid: "A compaction is already running for this session; wait.")
    s.events.emit(ev.COMPACTION_FINISHED, FINISHED)
    browser_msg(w, {"action": "compact", "session_id": s.id})
    assert w.message == "A compaction is already running for this session; wait."
    w.lang = "zh"  # the refusal is not re-said as the old compaction's message
    assert w.message == "A compaction is already running for this session; wait."


def test_inferred_compactions_reach_the_widget():
    s = FakeSession()
    s.occ.update(compaction_count=3, compaction_inferred=1)
    w = ContextWidget(s)
    assert (w.compaction_count, w.compaction_inferred) == (3, 1)
    s.publish(compaction_count=4, compaction_inferred=0)
    assert (w.compaction_count, w.compaction_inferred) == (4, 0)
