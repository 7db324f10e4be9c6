"""`make mutation-sample`: tier 2 of `make mutation` — a seeded, stratified sample of
realistic one-line bugs over every module of ocw/ outside the pure core (tier 1,
mutmut, tools/mutation.py) and over widgets/*.js, each caught by its module's OWN tests.

Usage: python tools/mutation_sample.py [--per-module N] [--seed S] [--jobs J] [--list] [PATH ...]

- Which modules: every ocw/**/*.py not in `[tool.mutmut] only_mutate` and not listed
  under `skip` in tools/mutation-mirrors.toml (with its reason), and widgets/*.js.
- Which tests: the module's mirror, `tests/<layer>/test_<module>.py` (layer: the first
  folder under ocw/), or for widgets/<x>.js `js/test/<x>.test.js` — plus, only where a
  module's tests live elsewhere by design, the files tools/mutation-mirrors.toml maps it
  to. A catch by any other test does not count: that is the point of this tier.
- Which mutants: the operators of tools/mutation_ops.py. Per module, N (default 15) drawn
  with random.Random(f"{seed}:{path}") round-robin over the operators (stratified: each
  operator the module offers is drawn before any is drawn twice), so a run repeats exactly
  and adding a module does not change another's sample.
- How: the repository's files are copied once into a temporary tree; each mutant is
  written into that copy, its mirror tests run (pytest -x, or vitest --bail 1) in a
  process forked from one that has already imported the heavy third-party packages
  (never ocw), with a per-mutant timeout of 3× the clean run + 20 s; then the file is
  restored. A module whose mirror fails unmutated is reported and not scored.
- Which of the mirror's tests per mutant: the clean run of a Python module's mirror is made
  under coverage with one context per test, so each line maps to the tests that executed it;
  a mutant runs only those first. A test that never ran the line in this process may still
  run it in a subprocess (a real kernel), so a mutant those tests miss runs the whole
  mirror before it counts as survived; a line run at import, or by no test in-process,
  runs the whole mirror at once. The verdicts are the whole mirror's; only kills come sooner.
- Verdicts: killed (the tests failed or timed out) or survived. A survivor listed in
  tools/mutation-sample-equivalents.txt is "explained" (with the reason given there).
  A mutant equivalent by construction — a `None` default made falsy where the function reads
  the parameter only for its truth (mutation_ops.truth_only_default) — is proved so from the
  source, not run, and left out of the score's denominator in its own column (the standard
  mutation score: killed / (sampled − equivalent)); the raw killed / sampled is printed beside.
  Exits 1 if the score is under 95 % or a survivor is unexplained.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_ops import Mutant, mutants, truth_only_default, valid  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIRRORS = ROOT / "tools" / "mutation-mirrors.toml"
EQUIVALENTS = ROOT / "tools" / "mutation-sample-equivalents.txt"
MIN_SCORE = 95.0
HEAVY = ("pytest", "IPython", "traitlets", "ipywidgets", "anywidget", "duckdb", "httpx", "tiktoken",
         "psycopg", "nbformat", "jupyter_client")


def config() -> dict:
    with open(MIRRORS, "rb") as f:
        return tomllib.load(f)


def core_scope() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["tool"]["mutmut"]["only_mutate"])


def modules(cfg: dict, bench: bool = False) -> list[str]:
    """Tier 2's modules. ocw/bench/ only with `bench`: its mirror tests run the benchmarks
    (test_bench.py alone takes over 2 minutes here), too slow for a sample per mutant."""
    core, skip = core_scope(), set(cfg.get("skip", {}))
    out = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "ocw").rglob("*.py"))]
    out = [p for p in out if p not in core and p not in skip and "/static/" not in p
           and (bench or not p.startswith("ocw/bench/"))]
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "widgets").glob("*.js"))] + out


def mirrors(path: str, cfg: dict) -> list[str]:
    """The module's own test files: the mirror by name, plus the mapping's (if any)."""
    if path.endswith(".js"):
        own = [f"js/test/{Path(path).stem}.test.js"]
    else:
        parts = Path(path).parts  # ("ocw", layer, ..., "x.py")
        own = [f"tests/{parts[1]}/test_{Path(path).stem}.py"] if len(parts) > 2 else []
    mapped = cfg.get("mirrors", {}).get(path, [])
    return [t for t in dict.fromkeys(own + mapped) if (ROOT / t).exists()]


def sample(path: str, n: int, seed: int) -> list[Mutant]:
    """Up to n mutants, round-robin over operators, each operator's list shuffled."""
    rng = random.Random(f"{seed}:{path}")
    text = (ROOT / path).read_text("utf-8")
    by_op: dict[str, list[Mutant]] = {}
    for m in mutants(path, text):
        by_op.setdefault(m.op, []).append(m)
    pools = [by_op[k] for k in sorted(by_op)]
    for p in pools:
        rng.shuffle(p)
    rng.shuffle(pools)
    out: list[Mutant] = []
    while len(out) < n and any(pools):
        for p in pools:
            while p and len(out) < n:
                m = p.pop()
                if valid(m, text):
                    out.append(m)
                    break
    return sorted(out, key=lambda m: (m.line, m.start))


def load_equivalents() -> dict[str, str]:
    """`path | op | old => new` line, then `why: …` line(s); blank line between entries."""
    out: dict[str, str] = {}
    if not EQUIVALENTS.exists():
        return out
    key = None
    for line in EQUIVALENTS.read_text("utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            key = None
        elif line.startswith("why:") and key:
            out[key] = (out.get(key, "") + " " + line[4:].strip()).strip()
        else:
            key = " ".join(line.split())
    return out


# -- running ----------------------------------------------------------------------------------
def make_tree() -> Path:
    """A copy of the working tree's files (tracked and new, not ignored): what the tests see."""
    tree = Path(tempfile.mkdtemp(prefix="ocw-mutation-"))
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, text=True,
                           capture_output=True, check=True).stdout.splitlines()
    for f in files:
        src = ROOT / f
        if src.is_file() and not f.startswith("js/node_modules"):
            dst = tree / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    if (ROOT / "js" / "node_modules").exists():
        os.symlink((ROOT / "js" / "node_modules").resolve(), tree / "js" / "node_modules")
    # a checkout of its own, so the tests that clone the repository or ask git what it
    # tracks (the demo's) see this tree's files, mutant included
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "tree"]):
        _git(tree, *args)
    return tree


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=mutation", "-c", "user.email=mutation@localhost", *args],
                   cwd=tree, capture_output=True, check=True)


_CHILDREN: set[int] = set()  # process groups of the tests running now (stopped with us)


def _stop(signum, _frame) -> None:
    for pgid in list(_CHILDREN):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)  # the `finally`s run: the tree is removed, the log closed


def run_tests(tree: Path, tests: list[str], timeout: float, cover: str = "",
              cover_out: str = "") -> tuple[bool, float]:
    """(passed, seconds) of the given test files (or pytest node ids) in the tree; a timeout is
    a failure. With `cover` (a module's path), the run also records which test ran each of that
    module's lines, written to `cover_out` as JSON {line: [node id, ...]} (see `_run_covered`)."""
    t0 = time.monotonic()
    if tests[0].endswith(".js"):
        cmd = ["npx", "vitest", "run", "--bail", "1", *[t.removeprefix("js/") for t in tests]]
        p = subprocess.Popen(cmd, cwd=tree / "js", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        _CHILDREN.add(p.pid)
        try:
            return p.wait(timeout=timeout) == 0, time.monotonic() - t0
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return False, time.monotonic() - t0
        finally:
            _CHILDREN.discard(p.pid)
    pid = os.fork()
    if pid == 0:  # the child: import ocw from the tree, run pytest, exit with its code
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.setsid()
            os.chdir(tree)
            os.environ["PYTHONPATH"] = f"{tree}:{tree / 'tests'}"
            sys.path[:0] = [str(tree), str(tree / "tests")]
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            import pytest

            args = ["-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *tests]
            code = _run_covered(args, tree / cover, cover_out) if cover else pytest.main(args)
        except BaseException:
            code = 99
        os._exit(int(code))
    _CHILDREN.add(pid)
    try:
        return _wait(pid, t0, timeout)
    finally:
        _CHILDREN.discard(pid)


def _run_covered(args: list[str], module: Path, out: str) -> int:
    """pytest.main(args) under coverage of one module, one coverage context per test (its node
    id), so each line maps to the tests that executed it in this process. Lines run at import
    (collection) get the context "". Why this is safe to select by: a mutant's line that a test
    never executed in-process cannot change that test's outcome — except through a subprocess
    (a real kernel), which coverage does not see; `select_tests` runs every mirror test for a
    line with no in-process test, for lines run at import, and for a mutant the selection missed."""
    import coverage
    import pytest

    cov = coverage.Coverage(data_file=out + ".cov", include=[str(module.resolve()), str(module)])

    class _PerTest:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cov.switch_context(item.nodeid)
            yield
            cov.switch_context("")

    cov.start()
    try:
        code = pytest.main(args, plugins=[_PerTest()])
    finally:
        cov.stop()
    data = cov.get_data()
    lines: dict[int, list[str]] = {}
    for f in data.measured_files():
        for line, ctxs in data.contexts_by_lineno(f).items():
            lines.setdefault(line, []).extend(ctxs)
    Path(out).write_text(json.dumps(lines), "utf-8")
    return int(code)


def select_tests(m: Mutant, text: str, lines: dict[int, list[str]], tests: list[str]) -> list[str]:
    """The mirror tests that executed the mutant's lines in the clean run, in file order (tried
    first: a kill there is a kill); all of `tests` when a line ran at import or no in-process
    test ran it (see `_run_covered`)."""
    last = m.line + text.count("\n", m.start, m.end)
    ran = [c for n in range(m.line, last + 1) for c in lines.get(n, [])]
    if not ran or "" in ran:
        return tests
    return list(dict.fromkeys(sorted(ran, key=lambda c: (tests.index(c.split("::")[0])
                                                         if c.split("::")[0] in tests else 0))))


def _wait(pid: int, t0: float, timeout: float) -> tuple[bool, float]:
    deadline = t0 + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0, time.monotonic() - t0
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return False, time.monotonic() - t0
        time.sleep(0.05)  # polling a child's exit; not a wait on a condition under test


def table(logs: list[str]) -> int:
    """README's per-module table from verdict logs (a module's verdicts from the last log
    that has it: a re-run of one module after its tests changed replaces the first run's)."""
    equivalents = load_equivalents()
    verdicts: dict[str, list[dict]] = {}
    for log in logs:
        mine: dict[str, list[dict]] = {}
        for line in Path(log).read_text("utf-8").splitlines():
            v = json.loads(line)
            mine.setdefault(v["path"], []).append(v)
        for path, vs in mine.items():
            if vs and all(v.get("retry") for v in vs) and path in verdicts:  # a --retry: its verdicts replace those
                again: dict[tuple, list[dict]] = {}  # of the same mutants. Two mutants of one line can
                for v in vs:  # share a key (`0 => 1` twice); a retry runs every mutant of a survivor's key,
                    again.setdefault((v["line"], v["key"]), []).append(v)
                for queue in again.values():  # so which verdict is whose is unknown: survivors' go first
                    queue.sort(key=lambda v: v["killed"])  # (never a kill credited to the wrong mutant)
                verdicts[path] = [_take(again, v) for v in verdicts[path]]
            else:
                verdicts[path] = vs
    rows: dict[str, list[int]] = {}
    for v in (v for vs in verdicts.values() for v in vs):
        r = rows.setdefault(v["path"], [0, 0, 0, 0])  # killed, sampled, explained, proved equivalent
        r[1] += 1
        if v["killed"]:
            r[0] += 1
        elif v.get("equivalent") or _proved(v):
            r[3] += 1
        else:
            r[2] += " ".join(v["key"].split()) in equivalents
    print("| module | sampled | proved equivalent | killed | score | survivors explained |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for path, (k, n, e, q) in rows.items():
        print(f"| `{path}` | {n} | {q} | {k} | {100.0 * k / (n - q) if n > q else 100.0:.0f} % | {e} of {n - q - k} |")
    k, n, e, q = (sum(r[i] for r in rows.values()) for i in range(4))
    print(f"| all {len(rows)} modules | {n} | {q} | {k} | {100.0 * k / (n - q) if n > q else 0:.1f} % | "
          f"{e} of {n - q - k} |")
    print(f"\nscore = killed / (sampled − proved equivalent); raw killed / sampled = "
          f"{100.0 * k / n if n else 0:.1f} %")
    return 0


def _take(again: dict[tuple, list[dict]], v: dict) -> dict:
    """The retry's verdict for the earlier verdict v (the next one of its line and key), or v.
    A killed v keeps its verdict (a kill stays a kill: only the tests were added to)."""
    if v["killed"]:
        return v
    queue = again.get((v["line"], v["key"]))
    if queue and "start" in v:  # logs that say where each mutant is match exactly
        exact = [w for w in queue if w.get("start") == v["start"]]
        if exact:
            queue.remove(exact[0])
            return exact[0]
    return queue.pop(0) if queue else v


_SOURCES: dict[str, tuple[str, dict]] = {}


def _proved(v: dict) -> bool:
    """A logged survivor that truth_only_default proves equivalent in today's source (the
    log names it by line and key; an older log than the mark in the run loop has no flag)."""
    path = v["path"]
    if path not in _SOURCES:
        text = (ROOT / path).read_text("utf-8") if (ROOT / path).exists() else ""
        _SOURCES[path] = (text, {(m.line, " ".join(m.key().split())): m for m in mutants(path, text)} if text else {})
    text, by_key = _SOURCES[path]
    m = by_key.get((v["line"], " ".join(v["key"].split())))
    return m is not None and truth_only_default(m, text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="modules (ocw/… .py or widgets/… .js) to sample; default all")
    ap.add_argument("--per-module", type=int, default=15)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--list", action="store_true", help="print the plan (modules, mirrors, mutants) and stop")
    ap.add_argument("--bench", action="store_true", help="also ocw/bench/ (its tests take minutes per run)")
    ap.add_argument("--table", nargs="*", metavar="LOG",
                    help="print the per-module Markdown table of these verdict logs (default --log; a run's, even "
                         "unfinished; a later log's module replaces an earlier one's) and stop")
    ap.add_argument("--retry", metavar="LOG",
                    help="run again only the mutants that survived in LOG (after adding tests); --table LOG "
                         "THIS_LOG then shows the modules with these verdicts in place of the earlier ones")
    ap.add_argument("--log", default=str(ROOT / "test-artifacts" / "mutation-sample.jsonl"),
                    help="each verdict appended here as it comes (a long run read while it runs)")
    args = ap.parse_args()
    if args.table is not None:
        return table(args.table or [args.log])
    cfg = config()
    mods = modules(cfg, args.bench)
    if args.paths:
        unknown = [p for p in args.paths if p not in mods]
        if unknown:
            sys.exit(f"mutation-sample: {', '.join(unknown)} not in tier 2 (see tools/mutation-mirrors.toml)")
        mods = args.paths
    plan = [(p, mirrors(p, cfg), sample(p, args.per_module, args.seed)) for p in mods]
    plan = [row for row in plan if row[2]]  # nothing to mutate (constants, re-exports): nothing to score
    if args.retry:  # only the survivors of an earlier run (same seed and size), against the tests as they are now
        alive: set[tuple[str, int, str]] = set()
        for line in Path(args.retry).read_text("utf-8").splitlines():
            v = json.loads(line)
            if not v["killed"]:
                alive.add((v["path"], v["line"], v["key"]))
        plan = [(p, t, [m for m in ms if (m.path, m.line, m.key()) in alive]) for p, t, ms in plan]
        plan = [row for row in plan if row[2]]
    if args.list:
        for p, tests, ms in plan:
            print(f"{p:40} {len(ms):3} mutants  {' '.join(tests) or 'NO MIRROR TESTS'}")
            for m in ms:
                print(f"    {m.line:5} {m.op:8} {m.key().split(' | ', 2)[2][:110]}")
        print(f"{sum(len(ms) for _, _, ms in plan)} mutants over {len(plan)} modules")
        return 0

    for mod in HEAVY:  # imported once here; each forked child reuses them
        try:
            __import__(mod)
        except ImportError:
            pass
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    equivalents = load_equivalents()
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    log = open(args.log, "w", encoding="utf-8")
    tree = make_tree()
    started = time.monotonic()
    rows, survivors = [], []
    try:
        for path, tests, ms in plan:
            if not tests:
                rows.append((path, len(ms), 0, "no mirror tests"))
                survivors += [(m, None) for m in ms]
                print(f"{path}: no mirror tests — {len(ms)} mutants count as survived", flush=True)
                continue
            lines: dict[int, list[str]] = {}
            if path.endswith(".py"):
                cover_out = str(tree / ".mutation-lines.json")
                ok, clean = run_tests(tree, tests, 900, cover=path, cover_out=cover_out)
                if ok:
                    lines = {int(k): v for k, v in json.loads(Path(cover_out).read_text("utf-8")).items()}
            else:
                ok, clean = run_tests(tree, tests, 900)
            if not ok:
                rows.append((path, len(ms), 0, "mirror red unmutated"))
                print(f"{path}: its mirror tests fail unmutated; not scored", flush=True)
                continue
            target = tree / path
            original = target.read_text("utf-8")
            killed = proved = 0
            for m in ms:
                if truth_only_default(m, original):
                    proved += 1
                    log.write(json.dumps({"path": m.path, "line": m.line, "start": m.start, "key": m.key(), "killed": False,
                                          "retry": bool(args.retry), "tests": 0, "equivalent": True}) + "\n")
                    continue
                target.write_text(m.apply(original), "utf-8")
                _git(tree, "commit", "-q", "-a", "--no-verify", "-m", "mutant")  # a clone carries it too
                try:
                    chosen = select_tests(m, original, lines, tests) if lines else tests
                    failed = not run_tests(tree, chosen, 3 * clean + 20)[0]
                    if not failed and chosen != tests:  # a survivor of the selection: the whole mirror decides
                        chosen = tests
                        failed = not run_tests(tree, tests, 3 * clean + 20)[0]
                finally:
                    target.write_text(original, "utf-8")
                    _git(tree, "reset", "-q", "HEAD~1")
                killed += failed
                log.write(json.dumps({"path": m.path, "line": m.line, "start": m.start, "key": m.key(), "killed": failed,
                                      "retry": bool(args.retry), "tests": len(chosen)}) + "\n")
                log.flush()
                if not failed:
                    survivors.append((m, equivalents.get(" ".join(m.key().split()))))
            rows.append((path, len(ms) - proved, killed, f"{clean:.0f} s clean, {proved} proved equivalent"))
            print(f"{path}: {killed} of {len(ms) - proved} killed, {proved} proved equivalent "
                  f"({clean:.1f} s per clean run)", flush=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
        log.close()

    unexplained = [m for m, why in survivors if why is None]
    print(f"\nSurvivors ({len(survivors)}):")
    for m, why in survivors:
        print(f"  {'explained' if why else 'NOT EXPLAINED'}: {m.path}:{m.line}")
        print(f"      {m.key()}")
        print(f"      why: {why}" if why else f"      add a test to its mirror, or explain it in "
              f"{EQUIVALENTS.relative_to(ROOT)}")
    print("\nPer module (killed of sampled, score):")
    for path, n, k, note in rows:
        print(f"  {path:40} {k:3} of {n:3}  {100.0 * k / n if n else 0.0:5.1f} %  ({note})")
    total = sum(n for _, n, _, note in rows if note != "mirror red unmutated")  # proved equivalents left out
    killed = sum(k for _, _, k, _ in rows)
    score = 100.0 * killed / total if total else 0.0
    print(f"\nTier-2 mutation score: {score:.1f} % ({killed} of {total} killed) over {len(rows)} modules, "
          f"seed {args.seed}, {args.per_module} per module; {len(survivors) - len(unexplained)} survivors "
          f"explained, {len(unexplained)} not; {time.monotonic() - started:.0f} s")
    return 0 if score >= MIN_SCORE and not unexplained else 1


if __name__ == "__main__":
    sys.exit(main())
