"""The one occupancy metric (DESIGN.md §3).

Everything that reports how full the window is — the ring, the panel,
`%context`, a compaction's tokens_before/after — goes through
`compute_breakdown` over the parts of rendered_history, and `estimate_total_used`
is its total. Chat-history views that unfold the whole branch never come here.
"""
from __future__ import annotations

CATEGORIES = ("system", "tools", "summary", "messages")


def estimate_total_used(parts: dict[str, int]) -> int:
    """Tokens the model reads next turn: the sum of the rendered categories."""
    return sum(int(parts.get(c, 0)) for c in CATEGORIES)


def measured_applies(sample: dict | None, head: str | None, generation: int) -> bool:
    """A provider-reported figure describes the context only while neither HEAD nor
    the occupancy generation moved since it was recorded (a compaction changes what
    renders without moving HEAD, so HEAD alone is not enough)."""
    return bool(
        sample
        and isinstance(sample.get("used"), int)
        and sample.get("head") == head
        and sample.get("generation") == generation
    )


def compute_breakdown(
    parts: dict[str, int],
    *,
    window: int,
    sample: dict | None = None,
    head: str | None = None,
    generation: int = 0,
    reserve_ratio: float = 0.8,
) -> dict:
    """Occupancy over rendered_history.

    `parts` holds the estimated tokens per category. When a provider sample applies,
    `total` is the measured figure and `calibration` is measured ÷ estimated; the
    categories stay estimates (the provider reports only a total) and `free` is what
    the window has left after `total`.
    """
    estimated = estimate_total_used(parts)
    basis = "estimated"
    total = estimated
    calibration = None
    if measured_applies(sample, head, generation):
        basis = "measured"
        total = int(sample["used"])  # type: ignore[index]
        calibration = round(total / estimated, 4) if estimated else None
    breakdown = {c: int(parts.get(c, 0)) for c in CATEGORIES}
    breakdown["free"] = max(0, window - total)
    return {
        "total": total,
        "estimated_total": estimated,
        "window": window,
        "ratio": (total / window) if window else 0.0,
        "breakdown": breakdown,
        "basis": basis,
        "calibration": calibration,
        "reserve": int(window * reserve_ratio),
        "reserve_ratio": reserve_ratio,
        "generation": generation,
        "head": head,
    }
