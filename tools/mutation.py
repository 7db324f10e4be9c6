"""`make mutation`: plant small bugs in the pure core with mutmut, report the ones no test notices.

Usage: python tools/mutation.py [--jobs N] [PATH ...]

PATH (default: the whole scope, `[tool.mutmut] only_mutate` in pyproject.toml) is a
module or folder inside that scope, e.g. `ocw/context/facts.py` or `ocw/context/`.
Every run starts from an empty `mutants/` folder, so the verdicts always come from the
tests as they are now, never from a cache. The score is mutmut's own: (killed + timed
out) / (all mutants − skipped). Each survivor is printed with its file, line and
change; one listed in tools/mutation-equivalents.txt (an equivalent mutant: no
behaviour can tell it apart) is marked with the reason given there. Exits 1 when the
score is under 90 % or a survivor is unexplained.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.txt"
MIN_SCORE = 90.0
KILLED = {"killed", "timeout", "caught by type check"}


def load_scope() -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: mutmut itself depends on `toml` there
        import toml as tomllib  # type: ignore[no-redef]
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    return tomllib.loads(text)["tool"]["mutmut"]["only_mutate"]


def globs_for(paths: list[str], scope: list[str]) -> list[str]:
    """Mutant-name patterns (`ocw.context.facts.*`) for paths inside the scope."""
    out = []
    for raw in paths:
        p = raw.rstrip("/")
        inside = any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(f"{p}/x.py", pat) for pat in scope)
        if not inside or not (ROOT / p).exists():
            sys.exit(f"mutation: {raw!r} is not a module or folder in [tool.mutmut] only_mutate "
                     f"({', '.join(scope)}); pass one of those")
        out.append(p[:-3].replace("/", ".") + ".*" if p.endswith(".py") else p.replace("/", ".") + ".*")
    return out


def mutmut(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=ROOT, text=True,
                          capture_output=capture, check=False)


def read_results(globs: list[str]) -> dict[str, str]:
    out = mutmut("results", "--all", "true", capture=True).stdout
    results = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and any(fnmatch.fnmatch(name, g) for g in globs):
            results[name] = status
    return results


def describe(name: str) -> dict:
    """File, line, function and the changed lines of one mutant (from `mutmut show`)."""
    diff = mutmut("show", name, capture=True).stdout.splitlines()
    module, _, mangled = name.partition("__mutmut_")[0].rpartition(".")
    if "ǁ" in mangled:  # a method: xǁClassǁname
        _, cls, func = mangled.split("ǁ")
    else:
        cls, func = None, mangled[2:]
    path = module.replace(".", "/") + ".py"
    removed = [x[1:] for x in diff if x.startswith("-") and not x.startswith("---")]
    added = [x[1:] for x in diff if x.startswith("+") and not x.startswith("+++")]
    line = None
    source = (ROOT / path).read_text("utf-8")
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls or cls is None and isinstance(node, ast.Module):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == func and removed:
                    # the first changed line, found in the function's own lines
                    hits = [i + 1 for i in range(item.lineno - 1, item.end_lineno)
                            if lines[i].strip() == removed[0].strip()]
                    # the same text twice: take the one nearest to where the diff's hunk puts it
                    # (the hunk counts from the function's leading comments, so it may be a little off)
                    hunk = next((x for x in diff if x.startswith("@@")), "@@ -1")
                    body = diff[diff.index(hunk) + 1:] if hunk in diff else []
                    guess = item.lineno + int(re.match(r"@@ -(\d+)", hunk).group(1)) - 1 + next(
                        (i for i, x in enumerate(body) if x.startswith("-")), 0)
                    line = min(hits, key=lambda h: abs(h - guess)) if hits else item.lineno
    return {"name": name, "path": path, "line": line, "function": f"{cls}.{func}" if cls else func,
            "removed": removed, "added": added}


def load_equivalents() -> list[dict]:
    """Blocks of: `path function`, `-original line`, `+mutated line`, `why: ...`."""
    out = []
    if not EQUIVALENTS.exists():
        return out
    for block in re.split(r"\n\s*\n", EQUIVALENTS.read_text("utf-8")):
        lines = [x for x in block.splitlines() if x.strip() and not x.startswith("#")]
        if not lines:
            continue
        path, func = lines[0].split()
        out.append({"path": path, "function": func,
                    "removed": [x[1:].strip() for x in lines if x.startswith("-")],
                    "added": [x[1:].strip() for x in lines if x.startswith("+")],
                    "why": " ".join(x[4:].strip() for x in lines if x.startswith("why:"))})
    return out


def explained(m: dict, equivalents: list[dict]) -> str | None:
    for e in equivalents:
        if ((e["path"], e["function"]) == (m["path"], m["function"])
                and e["removed"] == [x.strip() for x in m["removed"]]
                and e["added"] == [x.strip() for x in m["added"]]):
            return e["why"]
    return None


def per_module(results: dict[str, str]) -> dict[str, tuple[int, int]]:
    """{path: (killed, tested)}: the score of each module on its own."""
    out: dict[str, tuple[int, int]] = {}
    for name, status in results.items():
        if status == "skipped":
            continue
        path = name.partition("__mutmut_")[0].rpartition(".")[0].replace(".", "/") + ".py"
        k, t = out.get(path, (0, 0))
        out[path] = (k + (status in KILLED), t + 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--jobs", type=int, default=1, help="mutants tested in parallel (default 1)")
    args = ap.parse_args()
    scope = load_scope()
    globs = globs_for(args.paths or [p.rstrip("*") for p in scope], scope)

    shutil.rmtree(ROOT / "mutants", ignore_errors=True)  # verdicts from the tests as they are now
    print(f"mutation: mutmut run over {', '.join(globs)} ({args.jobs} at a time); this takes minutes", flush=True)
    tty = sys.stdout.isatty()  # a terminal shows mutmut's progress; a log gets only its last lines
    run = mutmut("run", "--max-children", str(args.jobs), *globs, capture=not tty)
    if run.returncode < 0:
        # mutmut runs the selected tests in its own process to learn which tests reach which
        # function; once in a few runs here that process died of a signal (SIGSEGV in a C
        # extension under its tracer). Its results so far are kept: run it once more.
        print(f"mutation: mutmut died of signal {-run.returncode}; running it once more", flush=True)
        run = mutmut("run", "--max-children", str(args.jobs), *globs, capture=not tty)
    if not tty:
        tail = [x.rsplit("\r", 1)[-1] for x in (run.stdout + run.stderr).splitlines()]
        print("\n".join(x for x in tail[-200:] if x and not x.startswith(("🎉", "🙁", "⏰", "🫥", "🤔")))[-3000:])
    if run.returncode != 0:
        print(f"mutation: mutmut run failed (exit {run.returncode})", file=sys.stderr)
        return run.returncode

    results = read_results(globs)
    counts: dict[str, int] = {}
    for status in results.values():
        counts[status] = counts.get(status, 0) + 1
    tested = len(results) - counts.get("skipped", 0)
    killed = sum(n for s, n in counts.items() if s in KILLED)
    score = 100.0 * killed / tested if tested else 0.0

    equivalents = load_equivalents()
    survivors = sorted((describe(n) for n, s in results.items() if s not in KILLED | {"skipped"}),
                       key=lambda m: (m["path"], m["line"] or 0, m["name"]))
    unexplained = 0
    print(f"\nSurvivors ({len(survivors)}):")
    for m in survivors:
        why = explained(m, equivalents)
        unexplained += why is None
        verdict = "equivalent" if why else "NOT EXPLAINED"
        print(f"  {verdict}: {m['path']}:{m['line']}  {m['function']}  [{results[m['name']]}]  {m['name']}")
        for x in m["removed"]:
            print(f"      - {x.strip()}")
        for x in m["added"]:
            print(f"      + {x.strip()}")
        print(f"      why: {why}" if why else "      add a test that kills it, "
              f"or explain it in {EQUIVALENTS.relative_to(ROOT)}")
    print("\nPer module (killed of tested, score):")
    for path, (k, t) in sorted(per_module(results).items()):
        print(f"  {path:32} {k:5} of {t:5}  {100.0 * k / t if t else 0.0:5.1f} %")
    print("\n" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print(f"Mutation score: {score:.1f} % ({killed} of {tested} killed) over {', '.join(globs)}; "
          f"{len(survivors) - unexplained} survivors explained as equivalent, {unexplained} not explained")
    return 0 if score >= MIN_SCORE and unexplained == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
