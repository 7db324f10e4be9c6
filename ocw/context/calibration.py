"""The window ocw plans with and the calibration of its estimates: pure rules over
session metadata (DESIGN.md §3).

- The window is the smallest ocw knows of: the configured one (or the model's
  known window) and the one the server reported (its own endpoint) or stated
  (an overflow error). A stated limit only ever lowers it; a report replaces an
  earlier figure (the server may have been restarted with another window). Both
  belong to the model they were learned for.
- The calibration is measured ÷ estimated: a local model's tokenizer may count
  twice what the offline estimate says, and the threshold, the kept tail, snip
  and summarizer sizes must be judged in the model's own tokens. Within ±3 % the
  estimate stands (no scaling, no noise); outside 0.25–8 a sample is a misreport.
- It is robust, because one wrong sample must not break a session (issue 23: a
  refused request's stated size moved it from 1.96 to 2.84, and every later
  summarizer call then had no room): the estimate is the median of the last
  CALIBRATION_RECENT samples, and it moves at most ×CALIBRATION_STEP per sample,
  so a lone outlier moves it by at most one bounded step and is outvoted by the
  next ones. Only samples of requests the server accepted and answered in full
  reach it (callers: a stored turn's usage, the summarizer's own usage) — never a
  refused, failed, snipped or interrupted request's.
"""
from __future__ import annotations

CALIBRATION_MIN, CALIBRATION_MAX = 0.25, 8.0
CALIBRATION_DEAD_ZONE = 0.03
CALIBRATION_RECENT = 9  # the estimate is the median of this many newest samples ...
CALIBRATION_STEP = 1.25  # ... and moves at most this factor per sample
MIN_LEARNED_WINDOW = 256  # a stated window below this is a misreading, not a model


def positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def learned_window(metadata: dict, model: str) -> dict | None:
    learned = metadata.get("learned_window")
    if isinstance(learned, dict) and learned.get("model") == model and positive_int(learned.get("tokens")):
        return learned
    return None


def effective_window(configured: int, metadata: dict, model: str) -> int:
    learned = learned_window(metadata, model)
    return min(configured, learned["tokens"]) if learned else configured


def window_source(configured: int, metadata: dict, model: str) -> str:
    learned = learned_window(metadata, model)
    return learned["source"] if learned and learned["tokens"] < configured else "configured"


def learn_window(metadata: dict, model: str, tokens, source: str, *, reported: bool) -> dict | None:
    """The metadata after learning a window, or None when nothing changes."""
    if not positive_int(tokens) or tokens < MIN_LEARNED_WINDOW:
        return None
    old = learned_window(metadata, model)
    if old is not None and (old["tokens"] == tokens or (not reported and tokens > old["tokens"])):
        return None
    return {**metadata, "learned_window": {"tokens": tokens, "source": source, "model": model}}


def calibration(metadata: dict, model: str) -> float:
    cal = metadata.get("calibration")
    if isinstance(cal, dict) and cal.get("model") == model:
        ratio = cal.get("ratio")
        if isinstance(ratio, (int, float)) and CALIBRATION_MIN <= ratio <= CALIBRATION_MAX \
                and abs(ratio - 1.0) > CALIBRATION_DEAD_ZONE:
            return float(ratio)
    return 1.0


def calibration_samples(metadata: dict, model: str) -> int:
    """How many samples the calibration in use was learned from (0: none; the panel says it)."""
    cal = metadata.get("calibration")
    if isinstance(cal, dict) and cal.get("model") == model and isinstance(cal.get("ratio"), (int, float)):
        n = cal.get("samples")
        return n if positive_int(n) else 1
    return 0


def _median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def blend(old: dict | None, ratio: float, model: str) -> dict | None:
    """The calibration after one more measured ÷ estimated sample (None: the sample is
    not plausible and changes nothing): the median of the recent samples, at most
    one step of ×CALIBRATION_STEP away from the ratio before."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (CALIBRATION_MIN <= ratio <= CALIBRATION_MAX):
        return None
    if isinstance(old, dict) and old.get("model") == model and isinstance(old.get("ratio"), (int, float)) \
            and not isinstance(old.get("ratio"), bool):
        recent = [r for r in old.get("recent") or [] if isinstance(r, (int, float)) and not isinstance(r, bool)
                  and CALIBRATION_MIN <= r <= CALIBRATION_MAX] or [float(old["ratio"])]
        recent = (recent + [float(ratio)])[-CALIBRATION_RECENT:]
        prev = float(old["ratio"])
        new = min(max(_median(recent), prev / CALIBRATION_STEP), prev * CALIBRATION_STEP)
        samples = int(old.get("samples") or 0) + 1 if positive_int(old.get("samples")) else 1
    else:
        recent, new, samples = [float(ratio)], float(ratio), 1
    return {"ratio": round(new, 4), "samples": samples, "recent": [round(r, 4) for r in recent], "model": model}


def with_samples(metadata: dict, samples, model: str) -> dict:
    """`metadata` with each (measured, estimated) sample blended into its calibration."""
    meta = metadata
    for measured, estimated in samples:
        if positive_int(measured) and positive_int(estimated):
            cal = blend(meta.get("calibration"), measured / estimated, model)
            if cal is not None:
                meta = {**meta, "calibration": cal}
    return meta


# -- usage that cannot be right (issue 23, deliverable 6) -----------------------------
# A gateway may count a prompt itself (LiteLLM reported 41 prompt tokens where the model
# counted 90), or a server may report nothing it measured. Such a figure is no sample of
# the model's tokenizer: taken as measured, it showed 11 % while the prompt was over the
# window. A usage report is unverified when it contradicts what the server said when it
# refused a request (its ratio below UNVERIFIED_SHARE of the refusal's, see
# `refusal_floor`), or, once the calibration rests on UNVERIFIED_MIN_SAMPLES samples,
# when it is below UNVERIFIED_SHARE of what the calibration says the request holds.
# Unverified usage is neither calibration nor the measured basis; it is counted, and the
# panel, %context and %ocw doctor say so.
UNVERIFIED_SHARE = 0.7
UNVERIFIED_MIN_SAMPLES = 3


def refusal_floor(metadata: dict, stated: int, estimated: int, model: str) -> dict | None:
    """The metadata after a refusal that stated the prompt's size (`stated`, the model's
    tokens) for a request ocw estimated at `estimated`: the lowest ratio a later usage
    report may show. None when the figures are not plausible."""
    if not (positive_int(stated) and positive_int(estimated)):
        return None
    ratio = stated / estimated
    if not CALIBRATION_MIN <= ratio <= CALIBRATION_MAX:
        return None
    return {**metadata, "usage_floor": {"ratio": round(ratio * UNVERIFIED_SHARE, 4), "model": model}}


def usage_verified(metadata: dict, model: str, measured: int, estimated: int) -> bool:
    """Whether a usage report of `measured` input tokens for a request estimated at
    `estimated` can be right (see the rules above)."""
    if not (positive_int(measured) and positive_int(estimated)):
        return True  # nothing to judge: the caller records nothing anyway
    ratio = measured / estimated
    floor = metadata.get("usage_floor")
    if isinstance(floor, dict) and floor.get("model") == model and isinstance(floor.get("ratio"), (int, float)) \
            and ratio < floor["ratio"]:
        return False
    if calibration_samples(metadata, model) >= UNVERIFIED_MIN_SAMPLES \
            and ratio < calibration(metadata, model) * UNVERIFIED_SHARE:
        return False
    return True


def with_unverified(metadata: dict, measured: int, estimated: int) -> dict:
    old = metadata.get("usage_unverified")
    n = old.get("count") if isinstance(old, dict) and positive_int(old.get("count")) else 0
    return {**metadata, "usage_unverified": {"count": n + 1, "last": [measured, estimated]}}


def unverified_count(metadata: dict) -> int:
    u = metadata.get("usage_unverified")
    return u["count"] if isinstance(u, dict) and positive_int(u.get("count")) else 0
