"""Issue 23's scenarios, through `%%chat` in a real IPython shell, measured the same way
for the tests and for the closing note's before/after table.

Each scenario returns plain figures (no assertion here), so the same code measures a
checkout of an earlier ocw (PYTHONPATH to it) and this one; the tests assert on them.
With ``$SCENARIO23_OUT`` set, every run appends one JSON line of its figures there.
"""
from __future__ import annotations

import json
import os
import re

import ocw

COMPACTED = re.compile(r"^Context compacted: covered (\d+) older messages?", re.M)
STATUS = re.compile(r"^context ([\d.]+) % · ([\d,]+) / ([\d,]+) · (.*)$", re.M)
WORDS = ("we looked at the logs, the metrics and the configuration of the nightly job, and it still slows down "
         "around two in the morning; ")


def turn_text(i: int, words: int) -> str:
    """A user message of about `words` words (~1.3 estimated tokens each)."""
    base = f"Turn {i}: " + WORDS * max(1, words // 24)
    return base


def configure(monkeypatch, provider: str, base_url: str, key: str = "x") -> None:
    monkeypatch.setenv("OCW_PROVIDER", provider)
    monkeypatch.setenv("OCW_BASE_URL", base_url)
    monkeypatch.setenv("OCW_MODEL", "tiny")
    monkeypatch.setenv("OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY", key)


def record(name: str, figures: dict) -> dict:
    out = os.environ.get("SCENARIO23_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"scenario": name, **figures}) + "\n")
    return figures


def converse(ip, capsys, texts: list[str], max_output_tokens: int = 24) -> list[dict]:
    """Each text as one %%chat cell; per turn: ok, error line, compactions, the status
    line's percent and its auto-compact words, the occupancy, the calibration."""
    ip.run_line_magic("config", f"Ocw.max_output_tokens = {max_output_tokens}")
    turns = []
    for text in texts:
        capsys.readouterr()
        res = ip.run_cell(f"%%chat\n{text}")
        o, e = capsys.readouterr()
        s = ocw.current_session()
        status = STATUS.findall(o)
        occ = s.occupancy() if s else None
        turns.append({
            "ok": res.error_in_exec is None,
            "empty": "the provider returned an empty reply" in e,
            "error": e.strip().splitlines()[-1][:200] if res.error_in_exec is not None and e.strip() else "",
            "compactions": len(COMPACTED.findall(o)),
            "compaction_failed": "Compaction failed" in o or "compaction failed" in o.lower(),
            "status_pct": float(status[-1][0]) if status else None,
            "status_auto": status[-1][3] if status else "",
            "ratio": occ["ratio"] if occ else None,
            "calibration": s.calibration if s else None,
            "window": s.context_window if s else None,
            "count": s.compaction_count if s else 0,
            "unverified": (occ or {}).get("usage_unverified", 0),
            "left_out": (occ or {}).get("left_out", 0),
            "refused": "This message alone is about" in e or "too long" in e or "exceeds" in e,
        })
    return turns


def consecutive_compactions(turns: list[dict]) -> int:
    """How many turns compacted right after a turn that compacted."""
    return sum(1 for a, b in zip(turns, turns[1:]) if a["compactions"] and b["compactions"])


def summarize_run(turns: list[dict], threshold_pct: float = 80.0) -> dict:
    after = [t for t, prev in zip(turns[1:], turns) if prev["compactions"]]
    return {
        "turns": len(turns),
        "ok": sum(t["ok"] for t in turns),
        "empty": sum(t["empty"] for t in turns),
        "errors": [t["error"] for t in turns if not t["ok"] and not t["empty"]][:5],
        "compactions": sum(t["compactions"] for t in turns),
        "consecutive": consecutive_compactions(turns),
        "status_after_compaction_max": max((t["status_pct"] for t in turns if t["compactions"] and t["status_pct"]
                                            is not None), default=None),
        "over_line_after_compaction": sum(1 for t in turns if t["compactions"] and t["ok"]
                                          and (t["status_pct"] or 0) >= threshold_pct),
        "max_status_pct": max((t["status_pct"] for t in turns if t["status_pct"] is not None), default=None),
        "next_after_compaction": len(after),
        "final_calibration": turns[-1]["calibration"] if turns else None,
        "final_window": turns[-1]["window"] if turns else None,
        "unverified_final": turns[-1].get("unverified", 0) if turns else 0,
    }


def oversized_run(ip, capsys, turns: int = 40, words: int = 60, at: int | None = None, big_words: int = 3_000) -> dict:
    """`turns` short turns with one message of ~`big_words` words (far over a 2k window)
    in the middle: what happened to the others, to compaction and to the calibration."""
    at = turns // 2 if at is None else at
    texts = [turn_text(i, words) for i in range(turns)]
    texts[at] = "Please read all of this. " + turn_text(at, big_words)
    run = converse(ip, capsys, texts, max_output_tokens=16)
    big, before = run[at], run[at - 1]
    others = [t for i, t in enumerate(run) if i != at]
    return {
        **summarize_run(others),
        "big_refused": not big["ok"],
        "big_error": big["error"][:160],
        "calibration_before_big": before["calibration"],
        "calibration_after_big": big["calibration"],
        "compactions_after_big": run[-1]["count"] - big["count"],
        "consecutive": consecutive_compactions(run),
        "max_ratio_ok": max((t["ratio"] for t in others if t["ok"] and t["ratio"] is not None), default=0.0),
        "unverified": run[-1]["unverified"],
        "left_out_turns": sum(1 for t in run if t["left_out"]),
    }
