"""Benchmark: a pasted focus — `python -m ocw.bench.focus [--quick] [--sizes N ...]`.

`%compact 10 -- <focus>` with a focus of N characters (a pasted list: paths,
URLs and words), timed the two ways a user reaches it: the magic as IPython
calls it (`run_line_magic`, after the cell's input transformation) and the chat
widget's `/compact` (`actions.run`, what the widget's request calls). A focus
longer than `MAX_FOCUS_CHARS` is refused in one line; the point is that the
refusal (and the run at the limit) costs time linear in N — IPython's `$var`
expansion of a magic's line was quadratic (20,000 characters took 16 s), so
`%compact` opts out of it. IPython's own tokenizing of a cell, before any
magic runs, is linear and not ocw's; it is reported apart ("cell" column).

Timings are printed, never asserted; a row records whether each call ended as
it should (a compaction at or under the limit, one refusal line above it).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

FULL_SIZES = (2_000, 20_000, 100_000, 1_000_000)
QUICK_SIZES = (2_000, 20_000)


def focus_text(n: int) -> str:
    """N characters of a pasted list (paths, URLs, words, braces and dollars)."""
    unit = "keep src/app_{i}.py, https://x.org/$a and {b} "
    out, i = [], 0
    while sum(map(len, out)) < n:
        out.append(unit.replace("{i}", str(i)))
        i += 1
    return "".join(out)[:n]


def _shell(path: str):
    from IPython.core.interactiveshell import InteractiveShell

    os.environ["OCW_DB"] = path
    os.environ["OCW_PROVIDER"] = "offline"
    sh = InteractiveShell.instance()
    if "ocw" not in sh.extension_manager.loaded:
        sh.run_line_magic("load_ext", "ocw")
    return sh


def _turns(sh, k: int) -> None:
    for i in range(k):
        sh.run_cell_magic("chat", "", f"turn {i}: src/a{i}.py " + "words " * 150)


def run(sizes=FULL_SIZES, *, out=sys.stdout, tmpdir: str | None = None) -> list[dict]:
    from IPython.core.error import UsageError

    from ocw.notebook import actions
    from ocw.notebook.magics import get_runtime
    from ocw.text.errors import OcwError
    from ocw.text.focus import MAX_FOCUS_CHARS

    d = tmpdir or tempfile.mkdtemp(prefix="ocw-bench-focus-")
    sh = _shell(os.path.join(d, "focus.duckdb"))
    rt = get_runtime()
    rows = []
    for n in sizes:
        text = focus_text(n)
        row = {"chars": n}
        for how in ("magic", "widget", "cell"):
            sh.run_line_magic("new", f"--name focus-{n}-{how}")
            _turns(sh, 6)
            t0 = time.perf_counter()
            try:
                if how == "magic":
                    sh.run_line_magic("compact", "10 -- " + text)
                elif how == "widget":
                    actions.run(rt, "compact", "10 -- " + text, rich=False)
                else:
                    sh.transform_cell("%compact 10 -- " + text)
                outcome = "done"
            except (UsageError, OcwError) as e:
                outcome = "refused" if "at most" in str(e) and "\n" not in str(e) else f"error: {e}"
            row[f"{how}_s"] = time.perf_counter() - t0
            if how != "cell":
                row[f"{how}_ok"] = outcome == ("done" if n <= MAX_FOCUS_CHARS else "refused")
        rows.append(row)
    print(format_table(rows), file=out)
    return rows


def format_table(rows: list[dict]) -> str:
    lines = ["ocw bench focus: %compact 10 -- <N characters> (seconds; cell = IPython's own tokenizing)",
             f"{'chars':>10} {'magic':>8} {'widget':>8} {'cell':>8}  ok"]
    for r in rows:
        ok = "yes" if r["magic_ok"] and r["widget_ok"] else "NO"
        lines.append(f"{r['chars']:>10,} {r['magic_s']:>8.3f} {r['widget_s']:>8.3f} {r['cell_s']:>8.3f}  {ok}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench.focus", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} only")
    p.add_argument("--sizes", type=int, nargs="+", help="focus lengths in characters")
    args = p.parse_args(argv)
    rows = run(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    return 0 if all(r["magic_ok"] and r["widget_ok"] for r in rows) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
