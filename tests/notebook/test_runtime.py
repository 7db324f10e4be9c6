"""ocw.notebook.runtime: the kernel-side controller, in a real IPython shell on a real
DuckDB file (the offline model). What a user sees of it: which session a command or
a panel's button acts on."""
from __future__ import annotations

import pytest

import ocw
from ocw.notebook.magics import get_runtime
from ocw.widgets.ring import ContextWidget

TURN = "the loader reads events.parquet, joins the orders table and retries after 30 s timeouts. " * 12


def _chat(ip, text: str) -> None:
    res = ip.run_cell(f"%%chat\n{text}")
    assert res.error_in_exec is None, res.error_in_exec


def test_the_panels_compact_now_compacts_the_panels_own_session_not_the_current_one(ip, capsys):
    ip.run_line_magic("config", "Ocw.context_window = 6000")
    ip.run_line_magic("config", "Ocw.auto_compact = 0")
    for i in range(6):
        _chat(ip, f"Turn {i}: {TURN}")
    own = ocw.current_session()
    rt = get_runtime()
    panel = ContextWidget(session=own, compact=rt.compact_action)  # a panel showing `own`
    ip.run_line_magic("new", "--name elsewhere")
    for i in range(6):
        _chat(ip, f"Elsewhere {i}: {TURN}")
    current = ocw.current_session()
    assert current.id != own.id and panel.session_id == own.id
    before = current.occupancy()["total"]
    capsys.readouterr()

    panel._handle_msg({"content": {"data": {"method": "custom", "content": {
        "action": "compact", "session_id": own.id}}}, "buffers": []})

    assert own.compaction_count == 1 and panel.compaction_count == 1
    assert panel.message.startswith("Context compacted: covered ")
    assert current.compaction_count == 0 and current.occupancy()["total"] == before
    assert ocw.current_session().id == current.id  # the button does not switch sessions


def test_the_delete_confirmation_says_the_exact_line_to_type(ip, capsys):
    """Without --yes nothing is deleted, and the line to confirm quotes a name only when
    typing it bare would not work (a space in it)."""
    rt = get_runtime()
    for name in ("my notes", "plain"):
        rt.new_session(name)
        _chat(ip, f"hello {name}")
    text = rt.delete_session("my notes", confirmed=False)
    assert text.startswith("Would delete session 'my notes' (s_") and "Nothing was deleted" in text
    assert text.endswith("to confirm: %sessions --delete 'my notes' --yes")
    plain = rt.delete_session("plain", confirmed=False)
    assert plain.endswith(": 2 messages, 0 summaries, compaction count 0. Nothing was deleted; "
                          "to confirm: %sessions --delete plain --yes")
    rt.new_session("single")
    _chat(ip, "one")
    ocw.current_session().rewind(ocw.current_session().branch()[0])  # HEAD back on the question
    assert ": 2 messages, 0 summaries" in rt.delete_session("single", confirmed=False)  # nodes, not the branch
    s = get_runtime().store.create_session(name="lone")
    s.append("user", "just one")
    assert ": 1 message, 0 summaries," in rt.delete_session("lone", confirmed=False)
    assert {"my notes", "plain"} <= {r["name"] for r in rt.store.backend.list_sessions()}


def test_chat_continues_the_current_session_and_new_starts_one(ip, capsys):
    rt = get_runtime()
    rt.chat("first")
    s = ocw.current_session()
    rt.chat("second")
    assert ocw.current_session().id == s.id and len(s.branch()) == 4
    rt.chat("elsewhere", new=True)
    assert ocw.current_session().id != s.id


def test_a_language_switch_reaches_the_current_session_and_works_with_none(ip, capsys):
    ip.run_line_magic("config", "Ocw.lang = 'zh'")  # no session yet: nothing to tell, no error
    ip.run_line_magic("config", "Ocw.lang = 'en'")
    _chat(ip, "hello")
    ip.run_line_magic("config", "Ocw.lang = 'zh'")
    assert ocw.current_session().lang == "zh"
    ip.run_line_magic("config", "Ocw.lang = 'en'")
    assert ocw.current_session().lang == "en"


def test_an_empty_session_name_is_refused_naming_the_argument(ip, capsys):
    from ocw.text.errors import OcwError

    _chat(ip, "hello")
    rt = get_runtime()
    with pytest.raises(OcwError, match="--delete"):
        rt.delete_session("", confirmed=False)
    with pytest.raises(OcwError, match="the session name or id"):
        rt.switch_session("")
    assert len(ocw.current_session().branch()) == 2


def test_the_server_is_asked_its_window_once_and_again_after_a_cell_that_was_taken_back(oip, refserver, capsys):
    """A local server's window is probed once per session in this kernel — not every cell;
    a first cell that failed (and was taken back) took its probe back too: the next asks again."""
    refserver.reported_window = 2048
    refserver.script(status=401)
    oip.run_cell("%%chat\nfirst")
    failed = len(refserver.probes)
    assert failed > 0 and ocw.current_session() is None  # asked, then the cell was taken back
    assert oip.run_cell("%%chat\nsecond").error_in_exec is None
    asked = len(refserver.probes)
    assert asked > failed  # asked again for the session that now exists
    assert oip.run_cell("%%chat\nthird").error_in_exec is None
    assert len(refserver.probes) == asked  # and not again
    capsys.readouterr()


def test_a_runtime_without_a_widget_builder_says_widgets_are_not_available(ip, capsys):
    """A Runtime made by hand (no `make_widget`): asking for a widget is one OcwError that says
    what to do, not a TypeError."""
    from ocw.notebook.config import Ocw
    from ocw.notebook.runtime import Runtime
    from ocw.text.errors import OcwError

    rt = Runtime(ip, Ocw())
    try:
        for ask in (rt.chat_widget, rt.context_widget):
            with pytest.raises(OcwError) as e:
                ask()
            assert e.value.user_message() == "widgets are not available here — load ocw with %load_ext ocw"
    finally:
        rt.close()


def test_a_new_session_without_a_name_is_the_notebooks(ip, capsys):
    rt = get_runtime()
    _chat(ip, "first")
    first = ocw.current_session()
    s = rt.new_session()
    assert s.name == first.name == "default" and s.id != first.id and ocw.current_session().id == s.id


@pytest.mark.parametrize("kwargs, said", [
    ({"text": " \n\t "}, "the %%chat cell is empty — write your message below the %%chat line"),
    ({"text": "hi", "provider": "gemini"}, "--provider takes one of offline, openai, anthropic, not 'gemini'"),
])
def test_a_chat_the_runtime_refuses_changes_nothing(kwargs, said, ip, capsys):
    """The chat widget calls Runtime.chat directly (no magic checked the words first): an empty
    message or an unknown provider is one line, and no session is made."""
    from ocw.text.errors import OcwError

    rt = get_runtime()
    with pytest.raises(OcwError) as e:
        rt.chat(**kwargs)
    assert e.value.user_message().startswith(said)
    assert ocw.current_session() is None and rt.store.sessions() == []


def test_the_widgets_on_screen_follow_the_session_a_command_makes_current(ip, capsys):
    rt = get_runtime()
    _chat(ip, "hello")
    ring, chat = rt.context_widget(), rt.chat_widget()
    first = ocw.current_session().id
    assert ring.session_id == chat.session_id == first
    ip.run_line_magic("new", "--name elsewhere")
    now = ocw.current_session().id
    assert now != first and ring.session_id == chat.session_id == now
    ip.run_line_magic("session", first)
    assert ring.session_id == chat.session_id == first


def test_a_session_made_current_shows_its_compaction_progress_in_the_cell_once(ip, capsys):
    """The session a command makes current is watched: a compaction of several calls shows
    "Compacting… 1 of 2" in the running cell of a notebook (one display, updated in place) —
    once, however often the session is made current again (a second watcher would show it twice)."""
    from IPython.core.displaypub import CapturingDisplayPublisher

    from ocw.context import events as ev

    rt = get_runtime()
    rt.rich_cells = lambda: True  # a notebook's cells render display updates (set by the magics there)
    _chat(ip, "hello")
    s = ocw.current_session()
    ip.run_line_magic("session", s.id)  # made current again: still watched once
    old, ip.display_pub = ip.display_pub, CapturingDisplayPublisher(shell=ip)
    try:
        s.events.emit(ev.COMPACTION_PROGRESS, {"call": 1, "calls": 2, "elapsed": 1.0})
        s.events.emit(ev.COMPACTION_PROGRESS, {"call": 2, "calls": 2, "elapsed": 2.0})
        s.events.emit(ev.COMPACTION_FINISHED, {})
        shown = [(o["data"].get("text/plain"), bool(o["update"])) for o in ip.display_pub.outputs]
    finally:
        ip.display_pub = old
    assert shown == [("Compacting… 1 of 2 · 1.0 s", False), ("Compacting… 2 of 2 · 2.0 s", True), ("", True)]
