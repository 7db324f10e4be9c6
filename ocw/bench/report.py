"""The benchmark's tables: figures per size, and issue 14's targets, met or not.

Pure formatting of the results dict `ocw.bench.cli` builds; nothing here
measures. Targets are printed beside the figures, never asserted (a timing on
a shared machine is a measurement, not a test).
"""
from __future__ import annotations

TURN_COLUMNS = ("messages", "tokens", "b2b p50", "b2b p99", "b2b max", "b2b >50ms", "paced p50", "paced p99",
                "paced max", "paced >50ms", "naive ms", "naive÷b2b", "naive÷paced", "exact", "naive timing")
TARGET_COLUMNS = ("figure", "measured", "target", "verdict")


def _table(columns, rows) -> list[str]:
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    line = lambda cells: " | ".join(c.rjust(w) if i else c.ljust(w)  # noqa: E731
                                    for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(columns), "-+-".join("-" * w for w in widths)] + [line(r) for r in rows]


def _ms(x) -> str:
    return "-" if x is None or x != x else f"{x:,.2f}"


def turn_rows(res: dict) -> list[list[str]]:
    rows = []
    for n in res["sizes"]:
        t = res["turns"][n]
        b, p, nv = t["b2b"], t["paced"], t["naive"]
        exact = "-" if t["exact"] is None else ("yes" if t["exact"] else "NO")
        rows.append([f"{n:,}", f"{t['tokens']:,}", _ms(b["p50"]), _ms(b["p99"]), _ms(b["max"]), str(b["over_50"]),
                     _ms(p["p50"]), _ms(p["p99"]), _ms(p["max"]), str(p["over_50"]), f"{nv['ms']:,.0f}",
                     f"{nv['ms'] / b['p50']:,.0f}×", f"{nv['ms'] / p['p50']:,.0f}×", exact, nv["method"]])
    f = res["floor"]
    rows.append(["floor", "-", _ms(f["b2b"]["p50"]), _ms(f["b2b"]["p99"]), _ms(f["b2b"]["max"]),
                 str(f["b2b"]["over_50"]), _ms(f["paced"]["p50"]), _ms(f["paced"]["p99"]), _ms(f["paced"]["max"]),
                 str(f["paced"]["over_50"]), "-", "-", "-", "-", "raw durable DuckDB transaction"])
    return rows


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def targets(res: dict) -> list[list[str]]:
    """Issue 14's acceptance figures: (figure, measured, target, verdict) rows."""
    out = []
    if "turns" in res:
        small, mid, large = res["sizes"][0], res["sizes"][len(res["sizes"]) // 2], res["sizes"][-1]
        t, floor = res["turns"], res["floor"]
        for n in sorted({mid, large}):
            k = t[n]["paced"]["p50"] / floor["paced"]["p50"]
            out.append([f"human-paced per turn at {n:,} ÷ floor", f"{k:.2f}× ({t[n]['paced']['p50']:.2f} / "
                        f"{floor['paced']['p50']:.2f} ms)", "≤ 3×", _verdict(k <= 3)])
        nv = t[mid]["naive"]["ms"]
        for mode, need in (("paced", 500), ("b2b", 1000)):
            k = nv / t[mid][mode]["p50"]
            what = "human-paced" if mode == "paced" else "back-to-back"
            out.append([f"naive ÷ {what} per turn at {mid:,}", f"{k:,.0f}×", f"≥ {need}×", _verdict(k >= need)])
        for mode in ("b2b", "paced"):
            k = t[large][mode]["p50"] / t[small][mode]["p50"]
            what = "human-paced" if mode == "paced" else "back-to-back"
            out.append([f"per turn {large:,} ÷ {small:,}, {what}", f"{k:.2f}", "≤ 1.3", _verdict(k <= 1.3)])
        for mode in ("b2b", "paced"):
            s = t[mid][mode]
            what = "human-paced" if mode == "paced" else "back-to-back"
            out.append([f"turns over 50 ms at {mid:,}, {what}", f"{s['over_50']} of {s['n']:,} (max {s['max']:.1f} ms)",
                        "0", _verdict(s["over_50"] == 0)])
    if "open" in res:
        o = res["open"]
        a, b = o["small"], o["large"]
        k = b["open_ms"] / a["open_ms"]
        out.append([f"fresh-process open, compacted {o['large_n']:,} ÷ {o['small_n']:,}",
                    f"{k:.2f}× ({b['open_ms']:.1f} / {a['open_ms']:.1f} ms)", "≤ 3×", _verdict(k <= 3)])
        d = b["rss_mib"] - a["rss_mib"]
        out.append([f"memory held, compacted {o['large_n']:,} − {o['small_n']:,}",
                    f"{d:+.1f} MB ({b['rss_mib']:.1f} vs {a['rss_mib']:.1f})", "≤ +25 MB", _verdict(d <= 25)])
    if "growth" in res:
        g = res["growth"]
        out.append([f"file growth per compaction (of {g['compactions']}, vs the twin)",
                    f"{g['growth_bytes'] / 1024:,.1f} KB (± {g['resolution'] / 1024:,.1f})",
                    f"≤ text + 4 KB = {g['limit_bytes'] / 1024:,.1f} KB",
                    _verdict(g["compactions"] > 0 and g["growth_bytes"] <= g["limit_bytes"])])
    if "kernels" in res:
        k = res["kernels"]
        for what in ("two_sessions", "one_session"):
            label = "two sessions" if what == "two_sessions" else "one session"
            out.append([f"two kernels, {label}: throughput ÷ one kernel's",
                        f"{k[what + '_ratio']:.2f}× (worst wait {k[what + '_worst_ms']:.0f} ms)", "(no target)",
                        "all turns landed" if k["all_landed"] else "TURNS LOST"])
    return out


def slow_lines(res: dict, most: int = 6) -> list[str]:
    """Turns over 50 ms, slowest first: wall / the process's CPU time / garbage collection.
    CPU well under wall means the turn waited (the disk's sync, or a core on a loaded
    machine); the floor's own slow turns show how much of that is the machine."""
    out = []
    for key in [*res["sizes"], "floor"]:
        t = res["turns"][key] if key != "floor" else res["floor"]
        for mode in ("b2b", "paced"):
            slow = t[mode]["slow"]
            if slow:
                what = "back-to-back" if mode == "b2b" else "human-paced"
                label = f"{key:,}" if key != "floor" else "floor"
                shown = ", ".join(f"{x['ms']:.0f} ({x['cpu_ms']:.0f} cpu, {x['gc_ms']:.0f} gc)" for x in slow[:most])
                more = f", … {len(slow) - most} more" if len(slow) > most else ""
                out.append(f"  slow turns, {label} {what} (ms): {shown}{more}")
    return (["turns over 50 ms — wall (process CPU, garbage collection):"] + out) if out else []


def render(res: dict) -> str:
    lines = []
    if "turns" in res:
        lines += ["", f"per turn (ms): count + append + occupancy(); back to back ({res['b2b_turns']:,} turns) and "
                  f"human-paced ({res['paced_turns']:,} turns, {res['pause']:.2f} s apart); GC on"]
        lines += _table(TURN_COLUMNS, turn_rows(res))
        lines += [f"floor = insert a ~300-byte row + update one row + commit, held connection, its own file; "
                  f"paced runs overlapped {res['paced_overlaps']} time(s)"]
        lines += ["memory a human-paced process gained over its turns (VmRSS): " + ", ".join(
            f"{n:,}: {res['turns'][n]['paced_rss_gain_mib']:+.1f} MB" for n in res["sizes"])]
        lines += slow_lines(res)
    if "open" in res:
        o = res["open"]
        lines += ["", f"fresh-process open (median of {o['small']['runs']}): store + session + occupancy() + "
                  "rendered_history(), imports and tokenizer excluded"]
        rows = [[f"{o[k + '_n']:,}", f"{o[k]['history_messages']:,}", f"{o[k]['open_ms']:.1f}",
                 f"{o[k]['rss_mib']:.1f}", f"{o[k]['peak_mib']:.1f}"] for k in ("small", "large")]
        lines += _table(("messages", "rendered", "open ms", "held MB", "peak MB"), rows)
    if "growth" in res:
        g = res["growth"]
        lines += ["", f"file growth: {g['compactions']} rolling compactions ({g['failed']} failed), summary text "
                  f"{g['text_bytes']:,.0f} B each (± {g['resolution'] / 1024:,.1f} KB: a block ÷ the compactions)",
                  f"  vs the twin without compactions, per compaction: file {g['file_vs_twin'] / 1024:+,.1f} KB, "
                  f"used blocks {g['used_vs_twin'] / 1024:+,.1f} KB (files {g['file_bytes'] / 1e6:,.1f} / "
                  f"{g['twin_bytes'] / 1e6:,.1f} MB)",
                  f"  just before/after each compaction, mean (not the verdict: each checkpoint rewrites the last "
                  f"row group, turns included): file {g['per_compaction'] / 1024:+,.1f} KB, used blocks "
                  f"{g['per_compaction_used'] / 1024:+,.1f} KB"]
    if "kernels" in res:
        k = res["kernels"]
        lines += ["", f"two kernels: {k['turns']} turns each back to back; one kernel alone {k['solo_tps']:.0f} "
                  f"turns/s; {k['handoffs']} hand-overs"]
    lines += ["", "targets (issue 14)"] + _table(TARGET_COLUMNS, targets(res))
    return "\n".join(lines)
