"""What both widgets share: the UI language they show their text in, and a bus
listener that does not keep a closed widget alive."""
from __future__ import annotations

import weakref
from typing import Any, Callable

import traitlets as t

from ocw.text.i18n import normalize_lang
from ocw.text.ui_text import ui_labels


def weak_listener(widget: Any) -> Callable[[str, dict], None]:
    """A bus listener that does not keep the widget alive: once the widget is
    garbage-collected the listener does nothing (and detach() removes it)."""
    ref = weakref.ref(widget)

    def listener(name: str, payload: dict) -> None:
        w = ref()
        if w is not None:
            w._on_event(name, payload)

    return listener


class Localized(t.HasTraits):
    """The `lang` / `labels` pair both widgets show their UI text by: `lang` is
    normalized ("zh-CN" -> "zh"), `labels` follows it from ui_text's one table, and a
    change of `lang` calls `_relabel(lang)` inside one hold_sync, so the browser
    gets the new language in one message."""

    lang = t.Unicode("en").tag(sync=True)
    labels = t.Dict(help="UI strings in `lang`.").tag(sync=True)

    @t.validate("lang")
    def _validate_lang(self, proposal):
        return normalize_lang(proposal["value"])

    @t.default("labels")
    def _default_labels(self):
        return ui_labels(self.lang)

    @t.observe("lang")
    def _lang_changed(self, change):
        with self.hold_sync():
            self.labels = ui_labels(change["new"])
            self._relabel(change["new"])

    def _relabel(self, lang: str) -> None:
        """Say again in `lang` what is shown (subclasses)."""
