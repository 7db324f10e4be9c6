"""A reply as it streams into a cell, and the one rule for how often it is re-rendered.

The reply is model text, so it goes out only as `safe_html.display_bundle` (never
as `text/markdown`, which JupyterLab would render with its HTML live).
Re-rendering the whole reply costs time on the kernel's thread (about 14 ms for
20 kB here), so a view waits at least 50 ms, and at least four times the last
render, between updates: rendering stays under a fifth of the stream's time
however long the reply grows. The chat widget reads the same two numbers
(`StreamView.MIN_INTERVAL`, `RENDER_SHARE`), so the two surfaces cost the same.
"""
from __future__ import annotations

import sys
import time


def interrupted_message(tool_steps: int) -> str:
    """What an interrupted turn kept, in one line (the cell and the chat widget say it)."""
    if tool_steps:  # finished tool steps are stored in call + result pairs
        kept = ("the finished step is saved" if tool_steps == 1
                else f"the {tool_steps} finished steps are saved")
        return (f"Interrupted after {tool_steps} tool step{'s' if tool_steps != 1 else ''}: {kept} (calls with "
                "their results), the interrupted one is not; the next %%chat continues from there.")
    return "Interrupted: nothing of this turn was saved; run the cell again to resend it."


class StreamView:
    """Streams a reply: sanitized HTML updated in place in a notebook, text in a terminal."""

    MIN_INTERVAL = 0.05  # seconds between in-place updates
    RENDER_SHARE = 4  # wait at least this many times the last render's cost

    def __init__(self, rich: bool):
        self.rich = rich
        self.text = ""
        self.handle = None
        self._last = 0.0
        self._interval = self.MIN_INTERVAL

    def on_text(self, delta: str) -> None:
        self.text += delta
        if not self.rich:
            from ocw.text.safe_html import plain_text

            sys.stdout.write(plain_text(delta))
            sys.stdout.flush()
            return
        from IPython.display import display

        if self.handle is None:
            self.handle = display(self._bundle(self.text), raw=True, display_id=True)
        elif time.monotonic() - self._last > self._interval:
            started = time.monotonic()
            self.handle.update(self._bundle(self.text), raw=True)
            self._last = time.monotonic()
            self._interval = max(self.MIN_INTERVAL, self.RENDER_SHARE * (self._last - started))

    @staticmethod
    def _bundle(text: str) -> dict:
        # text/plain carries the reply too: a plain-text front end (jupyter console,
        # nbconvert --to markdown/script, nbval) shows it instead of the HTML.
        from ocw.text.safe_html import display_bundle  # lazy: %load_ext stays light

        return display_bundle(text)

    def on_system(self, message: str) -> None:
        print(message, flush=True)

    def on_tool(self, call: dict, result: dict) -> None:
        # The text so far stays above the call; the next step's text starts below it.
        from ocw.notebook import report

        if self.rich and self.handle is not None:
            self.handle.update(self._bundle(self.text), raw=True)
        elif not self.rich and self.text and not self.text.endswith("\n"):
            sys.stdout.write("\n")
        self.handle, self.text = None, ""
        report.show_tool_call(call, result, rich=self.rich)

    def finish(self, note: str | None = None) -> None:
        if self.rich and self.handle is not None:
            self.handle.update(self._bundle(self.text + (f"\n\n*{note}*" if note else "")), raw=True)
        elif self.rich and note:
            print(note)
        elif not self.rich:
            if self.text:
                sys.stdout.write("\n")
            if note:
                print(note)
