"""The chat widget: the conversation, the graph, a composer with slash commands, the ring.

Python owns the state (DESIGN.md §1); widgets/chat.js shows it and asks for
actions through anywidget's request/response commands (ocw/widgets/chat_requests.py,
the browser → Python half). What holds, and why:
- The widget does nothing the notebook's commands don't: a message goes through
  `Runtime.chat` (the `%%chat` path), a slash command runs the same action as its
  magic (`ocw.notebook.actions.run`, from the one command table), a click in the
  graph runs `%rewind <id>` or `%branch <id>`'s action, a message's pin button
  `%pin`'s (of that stored message). So they say and do the
  same thing, and what a command returns (text, and sanitized HTML where it has
  more to show) is put into the conversation as it is: nothing is scraped.
- Every command answers: `{"ok": True, ...}` or `{"ok": False, "error": ...}`,
  whatever went wrong, so a promise in the browser rejects with a message instead
  of hanging on a kernel-side exception.
- Model text reaches the browser only as `safe_html.markdown_html` output (the
  `html` fields of ocw/notebook/items.py, and `streaming`); the rest is plain text.
- Reads cost what is shown: the tail page, one more page per "load older", the
  branch tree only when HEAD moved by other means than an append (ocw/conversation/history.py).
- A turn costs the comm what it added: the conversation's traitlets (`_CHANGES`) travel
  as changes with a revision (ocw/widgets/changes.py), never whole; a view that is behind
  asks `chat_snapshot`. A turn builds the items of its new rows only (`extend_items`).
- The ring is the ContextWidget `%context` shows, held in `ring` and rendered by
  the browser beside the composer (anywidget's host.getWidget): reused, not copied.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

import anywidget
import traitlets as t

from ocw.context import events as ev
from ocw.widgets import snapshot
from ocw.widgets.changes import Changes
from ocw.widgets._static import asset
from ocw.conversation import continue_from
from ocw.notebook.items import branch_items, extend_items, summary_items
from ocw.notebook import user_commands
from ocw.notebook.commands import slash_menu
from ocw.text.checks import shown
from ocw.conversation.history import PAGE
from ocw.text.i18n import normalize_lang, system_message
from ocw.widgets.base import Localized, weak_listener
from ocw.widgets.chat_requests import ChatRequests

log = logging.getLogger("ocw")

NOTES_KEPT = 50  # system messages kept per session in the widget (they are not stored)
NOTE_KINDS = {ev.COMPACTION_STARTED: "started", ev.COMPACTION_FAILED: "failed"}


class ChatWidget(ChatRequests, Localized, Changes, anywidget.AnyWidget):
    """`ChatWidget(runtime, ring, session=None, lang="en")`: see the module docstring."""

    # Sent as changes, not state (ocw/widgets/changes.py): a turn costs what is new.
    _CHANGES = ("messages", "has_older", "summary", "capsules", "branches", "notes", "head", "pending",
                "streaming", "stream_steps", "busy")
    _HELD = ("pending", "streaming")  # the stored messages a turn ends with repeat them: not sent twice

    _esm = asset("chat.js")
    _css = asset("chat.css")

    session_id = t.Unicode("", help='The attached session\'s id; "" = no session.').tag(sync=True)
    session_name = t.Unicode("").tag(sync=True)
    progress = t.Dict(help="A running compaction's step: {call, calls, elapsed} (the browser counts the time on), "
                           "or {}.").tag(sync=True)
    origin = t.Unicode("", help="The session this one continues (%new --from-summary), or \"\".").tag(sync=True)
    head = t.Unicode("", help="HEAD's node id.").tag(sync=True)
    messages = t.List(help="The loaded messages of the branch, oldest first (ocw.notebook.items).").tag(sync=True)
    has_older = t.Bool(False, help="Older messages can be loaded.").tag(sync=True)
    summary = t.Dict(help="The active summary's capsule (sanitized html, cover_count, time), or {}.").tag(sync=True)
    capsules = t.List(help="Summaries over the branch for the graph (active or superseded).").tag(sync=True)
    branches = t.List(help="Every branch: length, time, fork point, first differing message.").tag(sync=True)
    notes = t.List(help="System messages: {id, kind, text, after} (after: HEAD then).").tag(sync=True)
    pending = t.Unicode("", help="The user's message while its turn runs (not stored yet).").tag(sync=True)
    streaming = t.Unicode("", help="The reply so far, as sanitized HTML.").tag(sync=True)
    stream_steps = t.List(help="Finished steps of the running turn: {html} or {tool}.").tag(sync=True)
    busy = t.Unicode("", help='What runs: "" (nothing), "send", or a command name.').tag(sync=True)
    commands = t.List(help="The slash menu (ocw.notebook.commands.slash_menu).").tag(sync=True)
    ring = anywidget.WidgetTrait().tag(sync=True)

    def __init__(self, runtime: Any, ring: Any = None, session: Any = None, lang: str | None = "en",
                 **kwargs: Any) -> None:
        self._runtime = runtime
        self._session: Any = None
        self._unsubscribe = None
        self._rows: list[dict] = []  # the loaded stored messages, oldest first
        self._key = None  # (head, generation, summaries, epoch) the traitlets show
        self._notes: list[tuple[dict, tuple | None]] = []  # every note, with the event it tells of
        self._event_texts: list[str] = []  # compaction notes of the running command (said once)
        self._in_turn = False
        self._running = ""  # what runs, as the kernel knows it: `busy` is its synced copy
        self._dirty = False
        self._tool_steps = 0
        self._next_note = 0
        # A PostgreSQL store refreshes sessions from its listener thread (another kernel
        # wrote): the widget's reads and notes are serialised with the kernel thread's.
        self._lock = threading.RLock()
        super().__init__(lang=normalize_lang(lang), ring=ring, **kwargs)
        if session is not None:
            self.attach(session)
        # Commands users add come and go while the widget is shown (held weakly: a widget
        # that is gone listens no more); what the user was not told yet is said here, once.
        user_commands.subscribe(self._on_added_commands)
        self._sync_commands()

    def _on_added_commands(self) -> None:
        # Only a widget of the kernel's live runtime: one whose runtime closed (ocw unloaded,
        # the widget left behind) must not take the notice the user has yet to see.
        from ocw.notebook.magics import get_runtime

        rt = get_runtime()
        if rt is not None and rt is self._runtime and self in rt.widgets:
            self._sync_commands()

    def _sync_commands(self) -> None:
        self.commands = slash_menu(self.lang, user_commands.added())
        for line in user_commands.take_notices(self.lang):
            self._note("info", line)

    def _relabel(self, lang: str) -> None:
        self.commands = slash_menu(lang, user_commands.added())
        self._notes = [(dict(n, text=system_message(*src, lang)) if src else n, src) for n, src in self._notes]
        self._show_notes()

    # -- session ----------------------------------------------------------------------
    @property
    def session(self) -> Any:
        return self._session

    def attach(self, session: Any) -> "ChatWidget":
        """Follow `session`: its events, its branch (a new session starts a fresh view)."""
        if session is self._session and self._unsubscribe is not None:
            self._refresh()
            return self
        self.detach()
        self._session = session
        self._unsubscribe = session.events.subscribe(weak_listener(self))
        with self.hold_sync():
            self.session_id, self.session_name = str(session.id), shown(str(session.name or ""))
            self.origin = shown(continue_from.origin_name(session) or "")
            self._refresh(force=True)
        return self

    def detach(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        self._session, self._rows, self._key, self._notes = None, [], None, []
        with self.hold_sync():
            self.session_id = self.session_name = self.head = self.origin = ""
            self.messages, self.capsules, self.branches, self.notes = [], [], [], []
            self.summary, self.has_older = {}, False

    def say(self, text: str) -> None:
        """A system message with no session behind it (the current one was deleted):
        shown until a session is attached again."""
        self._note("info", text)

    def close(self) -> None:
        unsubscribe, self._unsubscribe = getattr(self, "_unsubscribe", None), None
        if unsubscribe is not None:
            unsubscribe()
        ring = self.ring
        if ring is not None:
            ring.close()
        super().close()

    def _on_event(self, name: str, payload: dict) -> None:
        if self._session is None:
            return
        if name == ev.COMPACTION_PROGRESS:  # "Compacting… 2 of 5" in the status line
            self.progress = {k: payload.get(k) for k in ("call", "calls", "elapsed")}
            return
        if name in (ev.COMPACTION_FINISHED, ev.COMPACTION_FAILED):
            self.progress = {}
        if name in (ev.COMPACTION_STARTED, ev.COMPACTION_FINISHED, ev.COMPACTION_FAILED):
            kind = NOTE_KINDS.get(name) or ("no_op" if payload.get("no_op") else "finished")
            text = self._note(kind, system_message(name, payload, self.lang), (name, payload))
            self._event_texts.append(text)
        elif name in (ev.OCCUPANCY_CHANGED, ev.HEAD_MOVED):
            self._refresh()

    def _note(self, kind: str, text: str, src: tuple | None = None, html: str | None = None,
              data: dict | None = None) -> str:
        """Add a system message after the current HEAD (a relayed compaction event the
        widget already showed is said once)."""
        if src is None and text in self._event_texts:
            return text
        with self._lock:
            self._next_note += 1
            note = {"id": self._next_note, "kind": kind, "text": text, "after": self.head}
            if html is not None:  # a command's result with more than text: sanitized HTML (results.py)
                note["html"] = html
            if data:  # rows the browser draws controls from (/memory's forget and unpin buttons)
                note["data"] = data
            self._notes = (self._notes + [(note, src)])[-NOTES_KEPT:]
            self._show_notes()
        return text

    def _show_notes(self) -> None:
        """The notes of the current branch: each was said after a message (HEAD then);
        one said on another branch (before a rewind or a switch) is not shown here."""
        s = self._session
        shown = []
        for note, _src in self._notes:
            after = note["after"]
            node = s._rows.get(after) if s is not None and after else None
            if not after or (node is not None and s._on_branch(node)):
                shown.append(note)
        if shown != self.notes:
            self.notes = shown

    # -- reading the session ----------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        """Show the branch as the session holds it now. It runs inside a turn's, a
        magic's or a session switch's call chain: a failure to read is logged, never
        raised into them (the widget shows its last state)."""
        try:
            with self._lock:
                self._read(force)
        except Exception:  # noqa: BLE001
            log.exception("ocw: the chat widget could not read session %s", getattr(self._session, "id", "?"))

    def _read(self, force: bool) -> None:
        """The tail page (spliced onto what is loaded), the summaries if they changed,
        the branch tree if HEAD moved other than by an append."""
        s = self._session
        if s is None:
            return
        if self._in_turn:  # the turn's end refreshes once, with its reply stored
            self._dirty = True
            return
        key = (s.head, s.generation, len(s._summaries), s.epoch)
        if key == self._key and not force:
            return
        old, old_head = self._key, self.head
        rows, has_older = s.page(limit=PAGE)
        ids = [r["id"] for r in self._rows]
        if rows and rows[0]["id"] in ids:
            rows, has_older = self._rows[:ids.index(rows[0]["id"])] + rows, (self._rows[0]["depth"] or 0) > 1
        appended = old is not None and old[1:] == key[1:] and any(r["id"] == old_head for r in rows)
        loaded, self._rows, self._key = self._rows, rows, key
        with self.hold_sync():
            self.head = s.head or ""
            self.messages = extend_items(loaded, self.messages, rows)
            self.has_older = has_older
            current = next((b for b in self.branches if b["current"]), None)
            if appended and current is not None and current["leaf"] and current["id"] == old_head:
                # Chatting on at a leaf: only the current branch grew (every fork point stays).
                last = self.messages[-1] if self.messages else {}
                self.branches = [dict(b, id=self.head, length=last.get("depth", 0), time=last.get("time", ""))
                                 if b is current else b for b in self.branches]
            else:
                self.branches = branch_items(s.branch_tree())
            if not appended or force:
                self.summary, self.capsules = summary_items(s.branch_summaries())
                self._show_notes()

    def _turn_over(self) -> None:
        with self.hold_sync():
            self._in_turn, self._running = False, ""
            self.pending, self.streaming, self.stream_steps, self.busy = "", "", [], ""
            self._dirty = False
            self._refresh()

    @t.observe("busy")
    def _busy_is_the_kernels(self, change) -> None:
        """`busy` is shown by the browser and written by the kernel only: a front end
        that writes it (any can) is put back, and no guard reads it."""
        if change["new"] != self._running:
            self.busy = self._running

    # -- text -------------------------------------------------------------------------
    def __repr__(self) -> str:
        if not self.session_id:
            return "<ocw chat: no session>"
        depth = self.messages[-1]["depth"] if self.messages else 0
        return f"<ocw chat: {self.session_name or self.session_id}, {depth} messages on the branch>"

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        data["text/plain"] = repr(self)
        # A saved or exported notebook (nbconvert --to html) shows this where no widget runs.
        data["text/html"] = snapshot.chat_html(self.session_name or self.session_id or "no session",
                                               list(self.messages), dict(self.summary or {}))
        return data, metadata


__all__ = ["ChatWidget"]
