"""The chat widget's requests: what the browser asks for and how every ask is answered.

`ChatRequests` is the browser → Python half of `ChatWidget` (ocw/widgets/chat.py, which
owns the state these change and the notes they add). Each request is an anywidget
command named chat_* (a command named like a Widget method — send! — would shadow
it, and anywidget answers through widget.send), and each runs what the notebook's
own commands run: a message the `%%chat` path (`Runtime.chat`), a slash command its
magic's action (`actions.run`, from the one command table), a click in the graph
`%rewind`/`%branch`, the pin button `%pin`. Every request is answered, `{"ok": True,
...}` or `{"ok": False, "error"}`, whatever went wrong (`_answer`), so a promise in the
browser rejects with a message instead of hanging on a kernel-side exception.
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Any

from anywidget.experimental import command

from ocw.conversation.history import PAGE
from ocw.notebook import actions, references, user_commands
from ocw.notebook.commands import BY_NAME
from ocw.notebook.items import message_items, tool_step
from ocw.notebook.streaming import StreamView, interrupted_message
from ocw.text.errors import OcwError
from ocw.text.i18n import text as i18n_text
from ocw.text.ui_text import ui_labels

log = logging.getLogger("ocw")
ANYWIDGET_COMMANDS = "_anywidget_commands"  # where anywidget keeps a class's commands (its experimental API)


def _answer(fn):
    """An anywidget command that always answers: an error becomes {"ok": False, "error"}."""

    @functools.wraps(fn)
    def wrapper(self, msg, buffers):
        try:
            return {"ok": True, **(fn(self, msg if isinstance(msg, dict) else {}) or {})}, []
        except OcwError as e:
            return {"ok": False, "error": e.user_message(), **getattr(e, "answer", {})}, []
        except KeyboardInterrupt:
            return {"ok": False, "error": interrupted_message(self._tool_steps)}, []
        except Exception as e:  # noqa: BLE001 - reported to the browser, logged here
            log.exception("ocw: the chat widget's %s failed", fn.__name__)
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}, []

    return command(wrapper)


class _Stream:
    """A reply as it arrives, re-rendered as sanitized HTML no more often than `%%chat`
    re-renders its output (ocw.notebook.streaming.StreamView's rule: 50 ms, and at least
    four times the last render's cost), so rendering stays a small share of the stream."""

    def __init__(self, widget: "ChatWidget"):
        from ocw.text.safe_html import markdown_html

        self.w, self.text, self.render = widget, "", markdown_html
        self.min_interval, self.share = StreamView.MIN_INTERVAL, StreamView.RENDER_SHARE
        self._last, self._interval = 0.0, 0.0  # the first piece shows at once

    def on_text(self, delta: str) -> None:
        self.text += delta
        if time.monotonic() - self._last > self._interval:
            started = time.monotonic()
            self.w.streaming = self.render(self.text)
            self._last = time.monotonic()
            self._interval = max(self.min_interval, self.share * (self._last - started))

    def finish(self) -> None:
        """The whole reply shown once more if the last piece came between renders: the
        stored reply then repeats what the browser holds (ocw/widgets/changes.py)."""
        if self.text and self._last:
            self.w.streaming = self.render(self.text)

    def on_tool(self, call: dict, result: dict) -> None:
        # The text so far stays above the call; the next step's text starts below it.
        steps = list(self.w.stream_steps)
        if self.text:
            steps.append({"html": self.render(self.text)})
        steps.append({"tool": tool_step(call, result)})
        self.text = ""
        with self.w.hold_sync():
            self.w.stream_steps, self.w.streaming = steps, ""
        self.w._tool_steps += 1

    def on_system(self, text: str) -> None:
        self.w._note("info", text)


class ChatRequests:
    """The chat widget's commands (a mixin of `ChatWidget`, whose state they read and write:
    `_runtime`, `_session`, `_rows`, `_lock`, the busy flags, `_note`, `_turn_over`)."""

    def _handle_custom_msg(self, content, buffers):
        """Every request is answered: a command name this widget does not have (or a
        request without one) gets {"ok": False} instead of no answer, which would
        leave the browser's promise waiting forever."""
        if isinstance(content, dict) and content.get("kind") == "anywidget-command" and "id" in content:
            name = content.get("name")
            if not isinstance(name, str) or name not in getattr(type(self), ANYWIDGET_COMMANDS, {}):
                self.send({"id": content["id"], "kind": "anywidget-command-response",
                           "response": {"ok": False, "error": f"the chat widget has no command {str(name)[:80]!r}"}},
                          [])
                return
        super()._handle_custom_msg(content, buffers)

    # -- browser -> Python ------------------------------------------------------------
    # Commands are named chat_*: a command named like a Widget method (send!) would
    # shadow it, and anywidget answers through widget.send.
    @_answer
    def chat_send(self, msg: dict) -> dict:
        """Send a message: the `%%chat` path (Runtime.chat), the reply streamed in."""
        text = msg.get("text")
        if not isinstance(text, str) or not text.strip():
            L = ui_labels(self.lang)
            raise OcwError(L["chat_err_empty"], hint=L["chat_err_empty_hint"])
        if self._in_turn or self._running:
            raise OcwError(ui_labels(self.lang)["chat_busy_refused"])
        self._runtime.config.check_environment()
        return self._turn(text, self._with_references(text))

    def _turn(self, text: str, sent: str) -> dict:
        """One turn: `text` shown as the pending message, `sent` sent; the reply streamed in."""
        stream = _Stream(self)
        with self.hold_sync():
            self._in_turn, self._tool_steps, self._event_texts = True, 0, []
            self._running = "send"
            self.pending, self.streaming, self.stream_steps, self.busy = text, "", [], "send"
        try:
            self._runtime.chat(sent, on_text=stream.on_text, on_system=stream.on_system, on_tool=stream.on_tool)
            stream.finish()
        finally:
            self._turn_over()
        return {"head": self.head}

    @_answer
    def chat_run(self, msg: dict) -> dict:
        """Run a slash command of the table: its action, its result a note."""
        name, args = msg.get("name"), msg.get("args") or ""
        cmd = BY_NAME.get(name) if isinstance(name, str) else None
        if cmd is None and isinstance(name, str) and isinstance(args, str) and user_commands.get(name):
            return self._added(name, args)  # a name a built-in has never gets here: the built-in runs
        if cmd is None or not cmd.slash or not isinstance(args, str):
            L = ui_labels(self.lang)
            raise OcwError(L["chat_err_not_command"].format(name=name), hint=L["chat_err_not_command_hint"])
        if self._in_turn or self._running:
            raise OcwError(ui_labels(self.lang)["chat_busy_refused"])
        if cmd.needs_session and self._runtime.current_session() is None:
            err = OcwError(i18n_text("no_session", self.lang))
            err.answer = {"no_session": True}
            raise err
        if cmd.name == "context" and not args.strip():  # the ring beside the composer opens its panel
            # (with --text the table goes into the conversation, as in a terminal)
            if self.ring is not None:
                self.ring.panel_open = True
            return {}
        result = self._result(cmd.name, args)
        if result.send is not None:  # /doctor --send: the report is the user's message, a normal turn
            self._note("info", i18n_text("doctor_sent", self.lang))
            return self._turn(result.send, result.send)
        return {"output": self._shown(result)}

    def _added(self, name: str, args: str) -> dict:
        """An added command: its output into the conversation; one that raises is one line there."""
        try:
            return {"output": self._command(name, args)}
        except user_commands.CommandFailed as e:
            return {"output": self._note("failed", str(e)), "failed": True}

    @_answer
    def chat_rewind(self, msg: dict) -> dict:
        """A click on a message in the graph (confirmed in the browser): `%rewind <id>`."""
        return {"output": self._command("rewind", self._node_id(msg))}

    @_answer
    def chat_branch(self, msg: dict) -> dict:
        """A click on a branch in the graph: `%branch <id>`."""
        return {"output": self._command("branch", self._node_id(msg))}

    @_answer
    def chat_pin(self, msg: dict) -> dict:
        """The pin button on a message: `%pin` of that stored message, verbatim."""
        if self._in_turn or self._running:
            raise OcwError(ui_labels(self.lang)["chat_busy_refused"])
        return {"output": self._command("pin", "--message " + self._node_id(msg))}

    @_answer
    def chat_older(self, msg: dict) -> dict:
        """Load the page of messages above the oldest loaded one."""
        with self._lock:
            s = self._session
            if s is None or not self._rows:
                return {"count": 0}
            rows, has_older = s.page(before=self._rows[0]["id"], limit=PAGE)
            items = list(self.messages)
            # The page's items and the first loaded one's again (its tool results may join the
            # page's last reply); every later item stays as it is (what is sent is the page).
            first = [r["id"] for r in self._rows].index(items[0]["end_id"]) + 1 if items else 0
            self._rows = rows + self._rows
            with self.hold_sync():
                self.messages = message_items(self._rows[:len(rows) + first]) + items[1:]
                self.has_older = has_older
            return {"count": len(rows)}

    @_answer
    def chat_snapshot(self, msg: dict) -> dict:
        """{rev}, and the whole conversation state if the view's `rev` is not the current
        one (it missed a change, or its model's state predates the latest changes)."""
        with self._lock:
            return self.snapshot(msg.get("rev"))

    def _with_references(self, text: str) -> str:
        """{name}, {In[n]}, {Out[n]}, {Err} expanded as a `%%chat` cell expands them (the
        same function), before anything is sent; a reference to nothing fails the send."""
        text, notes = references.expand_message(self._runtime, text)
        for line in notes:
            self._note("info", line)
        return text

    def _node_id(self, msg: dict) -> str:
        node = msg.get("node_id")
        if not isinstance(node, str) or not node.startswith("n_") or not node[2:].isalnum():
            raise OcwError(ui_labels(self.lang)["chat_err_node"].format(node=repr(node)[:60]))
        return node

    def _command(self, name: str, line: str) -> str:
        """Run command `name` of the table as its magic would and put its result into
        the conversation as a note (unless a compaction event already said it)."""
        return self._shown(self._result(name, line))

    def _result(self, name: str, line: str) -> Any:
        """Run command `name` as its magic would: its Result (`busy` shows its name meanwhile)."""
        self._runtime.config.check_environment()  # as a magic's `friendly` does first
        self._event_texts, self._running = [], name
        self.busy = name
        try:
            return actions.run(self._runtime, name, line)
        finally:
            self._running = ""
            self.busy = ""

    def _shown(self, result: Any) -> str:
        """A command's result into the conversation as a note (unless a compaction event said it)."""
        text = result.text.strip()
        if (text or result.html) and text not in self._event_texts:
            self._note("output", text, html=result.html, data=result.data)
        return text
