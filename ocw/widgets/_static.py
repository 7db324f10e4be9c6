"""Where the browser side of the widgets lives.

A source checkout (editable install) reads `widgets/` at the repository root so
an edit shows without reinstalling; a wheel carries a copy in `ocw/static/`,
made by hatch_build.py.
"""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # ocw/


def asset(name: str) -> Path:
    for folder in (_PKG.parent / "widgets", _PKG / "static"):
        p = folder / name
        if p.exists():
            return p
    raise FileNotFoundError(f"ocw widget asset {name!r} is missing; reinstall ocw")
