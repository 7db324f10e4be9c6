"""The context ring and its breakdown panel: traitlets that mirror a session's state.

`ContextWidget` is one anywidget with two parts, the occupancy ring and the
breakdown panel (browser side: widgets/context.js and widgets/context.css).
Data flows one way (DESIGN.md §1): the session publishes events on its bus,
the widget copies them into synced traitlets, the browser displays them. The
browser never computes occupancy; its only action is
``{"action": "compact", "session_id": ...}``, which runs the same `compact`
callable as ``%compact``.

The session interface the widget relies on::

    session.id, session.name
    session.events.subscribe(fn) -> unsubscribe      # fn(name, payload)
    session.occupancy() -> {total, window, ratio, breakdown, basis, encoding,
                            encoding_exact, calibration, generation, head,
                            compaction_count, session_id, ...}
    session.compaction_running: bool
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import anywidget
import traitlets as t

from ocw.context import events as ev
from ocw.widgets import snapshot
from ocw.widgets._static import asset
from ocw.widgets.base import Localized, weak_listener
from ocw.text.i18n import normalize_lang, system_message
from ocw.text.checks import shown

log = logging.getLogger("ocw")

CATEGORIES = ("system", "tools", "summary", "memory", "pins", "messages", "free")

from ocw.text.ui_text import UI_LABELS, ui_labels  # noqa: E402  (the one source of UI text)


def _tokens(value: Any) -> int:
    if isinstance(value, dict):
        value = value.get("tokens", 0)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class ContextWidget(Localized, anywidget.AnyWidget):
    """Occupancy ring + breakdown panel for one ocw session.

    ``ContextWidget(session=None, compact=None, lang="en")``: `compact` is
    ``compact(session_id) -> str`` (the system message to show) — the same code
    path as ``%compact``. With no session the widget shows an empty state.
    """

    _esm = asset("context.js")
    _css = asset("context.css")

    session_id = t.Unicode("", help='The attached session\'s id; "" = no session.').tag(sync=True)
    session_name = t.Unicode("").tag(sync=True)
    total = t.Int(0, help="Tokens the model reads next turn (the one occupancy metric).").tag(sync=True)
    window = t.Int(0, help="The model's context window in tokens.").tag(sync=True)
    ratio = t.Float(0.0, help="total / window; may exceed 1.").tag(sync=True)
    breakdown = t.Dict(help="category -> tokens: system, tools, summary, messages, free.").tag(sync=True)
    percents = t.Dict(help="category -> percent of the window, one decimal, as the session computed it "
                           "(they add up to 100.0 when the total fits the window).").tag(sync=True)
    window_source = t.Unicode("configured", help='Where the window comes from: "configured" or what the '
                                                 "server reported or stated.").tag(sync=True)
    basis = t.Enum(("estimated", "measured"), "estimated").tag(sync=True)
    encoding = t.Unicode("", help='Tokenizer of the figures, e.g. "cl100k_base".').tag(sync=True)
    encoding_exact = t.Bool(True, help="False: the model's tokenizer is unknown; the figures are estimates.").tag(sync=True)
    calibration = t.Float(None, allow_none=True, help="measured ÷ estimated, when the figures are calibrated.").tag(sync=True)
    generation = t.Int(0).tag(sync=True)
    compaction_count = t.Int(0).tag(sync=True)
    compaction_inferred = t.Int(0, help="How many of compaction_count were inferred from usage drops.").tag(sync=True)
    pruned_results = t.Int(0, help="Old tool results shown to the model as one-line stubs.").tag(sync=True)
    pruned_tokens = t.Int(0, help="Tokens those stubs save (in the ring's tokens).").tag(sync=True)
    busy = t.Bool(False, help="A compaction is running.").tag(sync=True)
    message = t.Unicode("", help="The last system message.").tag(sync=True)
    panel_open = t.Bool(False).tag(sync=True)
    reserve_ratio = t.Float(0.8, help="The auto-compaction line (0: automatic compaction is off).").tag(sync=True)
    auto_paused = t.Bool(False, help="Automatic compaction paused after three failures in a row.").tag(sync=True)
    left_out = t.Int(0, help="Older messages the last request left out; the figures are what it sent.").tag(sync=True)
    usage_unverified = t.Int(0, help="Usage reports that cannot be right, not used.").tag(sync=True)
    summarizer = t.Dict(help="A summarizer of its own (Ocw.summary_model): name, window, calibration, samples; "
                             "{} when the chat model summarizes.").tag(sync=True)

    # The compaction event `message` tells of, to say it again in another language.
    _message_event: tuple[str, dict] | None = None

    def __init__(
        self,
        session: Any = None,
        compact: Callable[[str], str] | None = None,
        lang: str | None = "en",
        **kwargs: Any,
    ) -> None:
        super().__init__(lang=normalize_lang(lang), **kwargs)
        self._session: Any = None
        self._unsubscribe: Callable[[], None] | None = None
        self._compact = compact
        self.on_msg(self._on_custom_msg)
        if session is not None:
            self.attach(session)

    def _relabel(self, lang: str) -> None:
        if self._message_event is not None:
            self.message = system_message(*self._message_event, lang)

    # -- session ------------------------------------------------------------------
    @property
    def session(self) -> Any:
        return self._session

    def attach(self, session: Any) -> "ContextWidget":
        """Follow `session`: subscribe to its event bus and fill the traitlets."""
        if session is self._session and self._unsubscribe is not None:
            self.refresh()
            return self
        self.detach()
        self._session = session
        self._unsubscribe = session.events.subscribe(weak_listener(self))
        with self.hold_sync():
            self.session_id = str(session.id)
            self.session_name = shown(str(getattr(session, "name", "") or ""))
            self.busy = bool(getattr(session, "compaction_running", False))
            self._say(None)
            self.refresh()
        return self

    def detach(self) -> None:
        """Stop following the session; the widget shows its empty state."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        if self._session is None:
            return
        self._session = None
        with self.hold_sync():
            self.session_id = ""
            self.session_name = ""
            self.total = 0
            self.window = 0
            self.ratio = 0.0
            self.breakdown = {}
            self.percents = {}
            self.window_source = "configured"
            self.basis = "estimated"
            self.encoding = ""
            self.encoding_exact = True
            self.calibration = None
            self.generation = 0
            self.compaction_count = 0
            self.compaction_inferred = 0
            self.auto_paused = False
            self.left_out = 0
            self.usage_unverified = 0
            self.summarizer = {}
            self.busy = False
            self._say(None)

    def refresh(self) -> None:
        """Re-read the session's occupancy (what the session publishes; nothing is computed here)."""
        session = self._session
        if session is None:
            return
        try:
            occ = session.occupancy()
        except Exception:
            log.exception("ocw: could not read the occupancy of session %s", getattr(session, "id", "?"))
            return
        self._apply_occupancy(occ)

    def close(self) -> None:
        """Unsubscribe from the session and close the comm (no state is sent)."""
        unsubscribe, self._unsubscribe = getattr(self, "_unsubscribe", None), None
        if unsubscribe is not None:
            unsubscribe()
        self._session = None
        super().close()

    def _apply_occupancy(self, occ: dict) -> None:
        sid = occ.get("session_id")
        if sid is not None and self.session_id and str(sid) != self.session_id:
            return  # not ours
        # The name alone; the browser adds "(estimate)" in the widget's language.
        encoding = str(occ.get("encoding") or "")
        exact = occ.get("encoding_exact") is not False and not encoding.endswith(" (estimate)")
        encoding = encoding.removesuffix(" (estimate)")
        calibration = occ.get("calibration")
        basis = "measured" if occ.get("basis") == "measured" else "estimated"
        breakdown = occ.get("breakdown") or {}
        with self.hold_sync():
            self.total = int(occ.get("total") or 0)
            self.window = int(occ.get("window") or 0)
            self.ratio = float(occ.get("ratio") or 0.0)
            self.breakdown = {str(k): _tokens(v) for k, v in breakdown.items()}
            self.percents = {str(k): str(v) for k, v in (occ.get("percents") or {}).items()}
            self.window_source = str(occ.get("window_source") or "configured")
            self.basis = basis
            self.encoding = encoding
            self.encoding_exact = exact
            self.calibration = float(calibration) if calibration is not None else None
            self.generation = int(occ.get("generation") or 0)
            self.compaction_count = int(occ.get("compaction_count") or 0)
            self.compaction_inferred = int(occ.get("compaction_inferred") or 0)
            self.auto_paused = bool(occ.get("auto_paused"))
            self.left_out = int(occ.get("left_out") or 0)
            self.usage_unverified = int(occ.get("usage_unverified") or 0)
            self.summarizer = dict(occ.get("summarizer") or {})
            pruned = occ.get("pruned") or {}
            self.pruned_results = int(pruned.get("results") or 0)
            self.pruned_tokens = int(pruned.get("tokens") or 0)
            if occ.get("reserve_ratio") is not None:
                self.reserve_ratio = float(occ["reserve_ratio"])
            name = occ.get("session_name")
            if name is None and self._session is not None:
                name = getattr(self._session, "name", "")
            self.session_name = shown(str(name or ""))

    def _on_event(self, name: str, payload: dict) -> None:
        if self._session is None:
            return
        if name == ev.OCCUPANCY_CHANGED:
            self._apply_occupancy(payload)
        elif name == ev.COMPACTION_STARTED or (name == ev.COMPACTION_PROGRESS and (payload.get("calls") or 1) > 1):
            # "Compacting… 2 of 5 · 3.1 s" once there is more than one call to count
            with self.hold_sync():
                self.busy = True
                self._say((name, payload))
        elif name in (ev.COMPACTION_FINISHED, ev.COMPACTION_FAILED):
            with self.hold_sync():
                self.busy = False
                self._say((name, payload))
                self.refresh()
        elif name in (ev.HEAD_MOVED, ev.TURN_FINISHED):
            self.refresh()

    # -- browser -> Python --------------------------------------------------------
    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any = None) -> None:
        if not isinstance(content, dict) or content.get("action") != "compact":
            return
        session = self._session
        sid = content.get("session_id")
        if session is None or not sid or str(sid) != str(session.id):
            return  # a stale view, or a different session
        if self.busy or getattr(session, "compaction_running", False):
            return  # one compaction at a time; the button is disabled meanwhile
        if self._compact is None:
            log.warning("ocw: this context widget has no compact callable; use %%compact")
            return
        try:
            text = self._compact(str(sid))
        except Exception as exc:  # the compaction path reports its own failures; this is a guard
            log.exception("ocw: compaction from the panel failed")
            self._say((ev.COMPACTION_FAILED, {"error": str(exc)}))
            self.busy = bool(getattr(session, "compaction_running", False))
            return
        if text and str(text) != self.message:  # e.g. a refusal; an event's message is already shown
            self._message_event = None
            self.message = str(text)

    def _say(self, event: tuple[str, dict] | None) -> None:
        """Show a compaction event's system message (None: no message), and keep the
        event so a change of language says it again in the new one."""
        self._message_event = event
        self.message = system_message(*event, self.lang) if event is not None else ""

    # -- text ---------------------------------------------------------------------
    def __repr__(self) -> str:
        if not self.session_id:
            return "<ocw context: no session>"
        name = self.session_name or self.session_id
        return f"<ocw context: {name}, {self.total:,} / {self.window:,} tokens ({self.ratio * 100:.1f}%)>"

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        data["text/plain"] = repr(self)
        data["text/html"] = self._snapshot()  # what a saved or exported notebook shows
        return data, metadata

    def _snapshot(self) -> str:
        """The ring's state as static HTML, from the figures it shows (ocw/widgets/snapshot.py)."""
        if not self.session_id:
            return snapshot.ring_html("no session", 0, 0)
        L = ui_labels(self.lang)
        rows = [(L.get(f"cat_{cat}", cat), int(n), self.percents.get(cat)) for cat, n in self.breakdown.items()]
        return snapshot.ring_html(self.session_name or self.session_id, self.total, self.window, rows)

__all__ = ["ContextWidget", "UI_LABELS", "ui_labels"]
