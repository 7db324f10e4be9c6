"""What a command returns: its words as plain text, as sanitized HTML where it has
more to show than text, and any widget it opens.

A command never prints. The surface that ran it shows the result its own way:
a cell displays the widget, else the HTML (with the text as its text/plain), else
prints the text; the chat widget puts text and HTML into the conversation; a
terminal prints the text. So no surface scrapes another's output, and a command
added to the table shows everywhere at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Result:
    text: str = ""  # plain text: a terminal, text/plain, the chat widget's note
    html: str | None = None  # sanitized HTML for rich surfaces; None: the text says it all
    widget: Any = None  # a widget the command opens (%context, %chat)
    # A user message the command asks its surface to send to the model as a normal turn
    # (stored, counted): `/doctor --send`. The surface sends it; the command never does.
    send: str | None = None
    data: dict | None = None  # rows the chat widget draws its own controls from (/memory's forget buttons)

    def bundle(self) -> dict[str, str] | None:
        """The MIME bundle of a result that has HTML (text/plain beside it)."""
        return {"text/plain": self.text, "text/html": self.html} if self.html is not None else None

    def show(self, rich: bool) -> None:
        """Show it in the running cell: `rich` is a notebook front end, else a terminal."""
        if rich and self.widget is not None:
            from IPython.display import display

            display(self.widget)
        elif rich and self.html is not None:
            from IPython.display import display

            display(self.bundle(), raw=True)
        elif self.text:
            print(self.text)


def text(*lines: str) -> Result:
    """A result that is plain text, its lines joined (empty lines left out)."""
    return Result("\n".join(line for line in lines if line))
