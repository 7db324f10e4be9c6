"""The one occupancy metric (DESIGN.md §3).

Everything that reports how full the window is — the ring, the panel,
`%context`, a compaction's tokens_before/after, the automatic-compaction
threshold — goes through `compute_breakdown` over the parts of rendered_history,
and `estimate_total_used` is its raw total. Chat-history views that unfold the
whole branch never come here.

Every figure a user reads agrees with every other, because all of them come
from the one dict built here:
- `total` is the provider's measured figure while it applies (same HEAD, same
  generation), else the estimate times the session's calibration (measured ÷
  estimated, learned from earlier samples; 1.0 with none), so a local model whose
  tokenizer counts twice the offline estimate is planned and shown in its own
  tokens;
- the category rows are scaled to add up to `total` exactly (largest
  remainder), and `percents` (tenths of a percent of the window, as strings)
  add up to 100.0 % whenever the total fits the window.
"""
from __future__ import annotations

CATEGORIES = ("system", "tools", "summary", "memory", "pins", "messages")  # memory: the session memory (DESIGN.md §4b); pins: context/pins.py
ROWS = CATEGORIES + ("free",)


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
        and not isinstance(sample.get("used"), bool)
        and sample.get("head") == head
        and sample.get("generation") == generation
    )


def largest_remainder(values: list[float], total: int) -> list[int]:
    """Integers that add up to `total`, each the floor or ceiling of its value
    (values are first scaled to sum to `total`); the largest remainders round up,
    earlier entries first on ties, so the result is deterministic."""
    s = sum(values)
    if total <= 0 or s <= 0 or not values:
        # Nothing to share out, or no weights to share it by: it all goes to the first row.
        return [max(0, total)] + [0] * (len(values) - 1) if values else []
    scaled = [v * total / s for v in values]
    floors = [int(x) for x in scaled]
    short = total - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(scaled[i] - floors[i]), i))
    for i in order[:short]:
        floors[i] += 1
    return floors


def percents(breakdown: dict[str, int], window: int) -> dict[str, str]:
    """Each row as a percent of the window with one decimal. When the rows fill the
    window exactly (total ≤ window, `free` the rest) they add up to 100.0 %."""
    if window <= 0:
        return {k: "0.0" for k in breakdown}
    keys = list(breakdown)
    used = sum(breakdown.values())
    tenths_total = round(1000 * used / window)
    tenths = largest_remainder([float(breakdown[k]) for k in keys], tenths_total)
    return {k: f"{t // 10}.{t % 10}" for k, t in zip(keys, tenths)}


def compute_breakdown(
    parts: dict[str, int],
    *,
    window: int,
    sample: dict | None = None,
    head: str | None = None,
    generation: int = 0,
    reserve_ratio: float = 0.8,
    calibration: float | None = None,
) -> dict:
    """Occupancy over rendered_history.

    `parts` holds the estimated tokens per category. `calibration` is the session's
    learned measured ÷ estimated (None: no sample yet). With a measured sample that
    applies, `total` is the measured figure and `calibration` this request's own
    ratio; otherwise `total` is the estimate times the learned calibration.
    """
    estimated = estimate_total_used(parts)
    if measured_applies(sample, head, generation):
        basis = "measured"
        total = int(sample["used"])  # type: ignore[index]
        factor = round(total / estimated, 4) if estimated else None
    else:
        basis = "estimated"
        factor = calibration if calibration and calibration > 0 and calibration != 1.0 else None
        total = round(estimated * factor) if factor else estimated
    raw = [float(parts.get(c, 0)) for c in CATEGORIES]
    rows = largest_remainder(raw, total) if total != estimated else [int(x) for x in raw]
    breakdown = dict(zip(CATEGORIES, rows))
    breakdown["free"] = max(0, window - total)
    return {
        "total": total,
        "estimated_total": estimated,
        "window": window,
        "ratio": (total / window) if window else 0.0,
        "breakdown": breakdown,
        "percents": percents(breakdown, window),
        "basis": basis,
        "calibration": factor,
        "calibrated": total != estimated,
        "reserve": int(window * reserve_ratio),
        "reserve_ratio": reserve_ratio,
        "generation": generation,
        "head": head,
    }


def sent_parts(parts: dict[str, int], left_out: dict | None, head: str | None, generation: int) -> tuple[dict, int]:
    """(the parts of what was SENT, how many messages were left out). A request that left
    older messages out (snip: compaction could not bring the branch under the line)
    sent less than the branch holds; while HEAD and the generation are those of that
    request's reply, the figures describe what was sent, not the branch — so a figure
    above 100 % means a refused request, never one the server accepted (issue 23).
    `left_out`: {"head", "generation", "messages", "tokens" (estimated)}."""
    if not (isinstance(left_out, dict) and left_out.get("head") == head and left_out.get("generation") == generation
            and int(left_out.get("messages") or 0) > 0):
        return parts, 0
    cut = min(int(left_out.get("tokens") or 0), int(parts.get("messages", 0)))
    return {**parts, "messages": int(parts.get("messages", 0)) - cut}, int(left_out["messages"])
