"""The compaction count (DESIGN.md §5, seed 002): pure rules over session metadata.

metadata["context_window"] is the last persisted provider sample
({size, used, remaining, source, head, generation}); its `used` is the baseline.
metadata["context_compaction_count"] is the lifetime count (absent reads as 0).
metadata["context_compaction_inferred"] is how many of those were inferred from a
usage drop (absent reads as 0): only they make the count approximate, so a view
says so only when it is not 0.

Callers persist the returned metadata and only then adopt it, so a sample that
cannot be persisted changes nothing — neither the baseline nor the count.
"""
from __future__ import annotations


def compaction_count(metadata: dict) -> int:
    value = metadata.get("context_compaction_count", 0)
    return value if isinstance(value, int) and value >= 0 else 0


def inferred_count(metadata: dict) -> int:
    value = metadata.get("context_compaction_inferred", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def valid_sample(used, size=None) -> bool:
    """A usage figure ocw can trust: a whole number ≥ 0 and, when the window it was
    measured against is known, not larger than that window (a sample above it is
    a misreport or a window ocw has wrong; either way it says nothing about drops)."""
    if not (isinstance(used, int) and not isinstance(used, bool) and used >= 0):
        return False
    return not (isinstance(size, int) and not isinstance(size, bool) and size > 0 and used > size)


def apply_sample(metadata: dict, sample: dict) -> tuple[dict, bool]:
    """Record a provider-reported usage sample. Returns (new metadata, inferred).

    First sample (no baseline): baseline only. Lower than the baseline: the
    provider shed context on its own — count one inferred compaction. Equal or
    higher: nothing. The same decreased sample delivered twice counts once,
    because the second delivery equals the baseline the first one left.
    """
    if not valid_sample(sample.get("used"), sample.get("size")):
        return metadata, False
    new = dict(metadata)
    baseline = metadata.get("context_window")
    inferred = bool(
        isinstance(baseline, dict)
        and valid_sample(baseline.get("used"))
        and sample["used"] < baseline["used"]
    )
    if inferred:
        new["context_compaction_count"] = compaction_count(metadata) + 1
        new["context_compaction_inferred"] = inferred_count(metadata) + 1
    else:
        new["context_compaction_count"] = compaction_count(metadata)
    new["context_window"] = dict(sample)
    return new, inferred


def clear_baseline(metadata: dict) -> dict:
    """A context reset, model change, rewind or branch switch: the next sample is
    legitimately smaller, so forget the baseline; the lifetime count stays."""
    new = dict(metadata)
    new["context_window"] = None
    new["context_compaction_count"] = compaction_count(metadata)
    return new


def count_own_compaction(metadata: dict) -> dict:
    """ocw compacted: count it exactly and reset the baseline (the next, smaller
    sample must not be inferred as a second compaction)."""
    new = clear_baseline(metadata)
    new["context_compaction_count"] = compaction_count(metadata) + 1
    return new
