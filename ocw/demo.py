"""`make demo`: open the quickstart notebook in JupyterLab on the offline model,
or (`--headless`) execute it and print where the executed copy is."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01-quickstart.ipynb"


def run_headless(out_dir: Path) -> Path:
    import nbformat
    from nbclient import NotebookClient

    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "demo.duckdb"
    for f in (db, db.with_suffix(".duckdb.wal")):
        if f.exists():
            f.unlink()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    out = out_dir / "01-quickstart.executed.ipynb"
    try:
        # The kernel gets its own environment; this process's stays as it was
        # (main() may be called from a test or another tool).
        client.execute(env=demo_env(db))
    finally:
        nbformat.write(nb, out)  # a failed run still leaves the executed copy to look at
    return out


def demo_env(db: Path) -> dict:
    """The demo kernel's environment: the offline model, a throwaway database, and
    none of the caller's other OCW_* settings (a model or window from the shell
    would change what the quickstart shows); the language is kept."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("JPY_SESSION_NAME", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    if os.environ.get("OCW_LANG"):
        env["OCW_LANG"] = os.environ["OCW_LANG"]
    env.update(OCW_DB=str(db), OCW_PROVIDER="offline")
    return env


def lab_command(jupyter: str, port: int) -> list[str]:
    """The JupyterLab command line that opens the quickstart (run it in notebooks/)."""
    cmd = [jupyter, "lab", f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.root_dir={NOTEBOOK.parent}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI machines often run as root
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform in ("darwin", "win32")):
        cmd.append("--no-browser")  # no screen: open the URL JupyterLab prints
    return [*cmd, NOTEBOOK.name]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ocw.demo", description=__doc__)
    ap.add_argument("--headless", action="store_true", help="execute the notebook instead of opening JupyterLab")
    ap.add_argument("--port", type=int, default=8888)
    ap.add_argument("--out", default=str(ROOT / "build" / "demo"), help="where the executed copy goes (--headless)")
    args = ap.parse_args(argv)
    if not NOTEBOOK.exists():
        print(f"cannot find {NOTEBOOK}; run make demo from an ocw checkout", file=sys.stderr)
        return 2
    if args.headless:
        from nbclient.exceptions import CellExecutionError

        try:
            out = run_headless(Path(args.out))
        except CellExecutionError as e:
            print(f"{NOTEBOOK.name} failed on the offline model:\n{e}\n"
                  f"Executed copy (up to the failing cell): {Path(args.out) / '01-quickstart.executed.ipynb'}",
                  file=sys.stderr)
            return 1
        print(f"Executed {NOTEBOOK.name} on the offline model.\nExecuted copy: {out}")
        return 0
    env = {**os.environ, "OCW_PROVIDER": os.environ.get("OCW_PROVIDER", "offline")}
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    print(f"Opening {NOTEBOOK.relative_to(ROOT)} in JupyterLab (offline model; Ctrl-C to stop)…")
    # JupyterLab resolves the file argument against its working directory.
    return subprocess.call(lab_command(jupyter, args.port), env=env, cwd=NOTEBOOK.parent)


if __name__ == "__main__":
    sys.exit(main())
