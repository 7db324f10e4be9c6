"""`make demo`: open the quickstart notebook in JupyterLab on the offline model,
or (`--headless`) execute it and print where the executed copy is.

Invariant: a demo never writes into the checkout's tracked files nor into the
user's real database. The interactive demo opens a fresh, output-free copy of
the notebook under build/demo/ (git-ignored), so a Run All autosaves there and
never into notebooks/ (whose stored outputs nbval checks); its kernel uses
build/demo/demo.duckdb unless the user set OCW_DB on purpose. The headless run
executes the notebook in memory and writes the executed copy and its own
throwaway database under the --out folder.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: ocw/notebook/demo.py -> ../../..
NOTEBOOK = ROOT / "notebooks" / "01-quickstart.ipynb"
DEMO_DIR = ROOT / "build" / "demo"  # git-ignored (build/)
_DROP = ("JPY_SESSION_NAME", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def run_headless(out_dir: Path) -> Path:
    import nbformat
    from nbclient import NotebookClient

    out_dir.mkdir(parents=True, exist_ok=True)
    db = fresh_db(out_dir / "demo.duckdb")
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


def fresh_db(db: Path) -> Path:
    """`db` with no file (nor its WAL or lock) left from an earlier demo."""
    for f in (db, Path(f"{db}.wal"), Path(f"{db}.ocw-lock")):
        if f.exists():
            f.unlink()
    return db


def demo_env(db: Path | str, base: dict | None = None) -> dict:
    """The demo kernel's environment: the offline model, the database `db`, and
    none of the caller's other OCW_* settings (a model or window from the shell
    would change what the quickstart shows); the language is kept."""
    base = dict(os.environ if base is None else base)
    env = {k: v for k, v in base.items() if not k.startswith("OCW_") and k not in _DROP}
    if base.get("OCW_LANG"):
        env["OCW_LANG"] = base["OCW_LANG"]
    env.update(OCW_DB=str(db), OCW_PROVIDER="offline")
    return env


def interactive_db(demo_dir: Path, env: dict | None = None) -> Path | str:
    """The interactive demo's database: OCW_DB when the user set it on purpose,
    else a fresh demo.duckdb beside the copy (never ~/.local/share/ocw/ocw.duckdb)."""
    env = os.environ if env is None else env
    return env["OCW_DB"] if env.get("OCW_DB") else fresh_db(demo_dir / "demo.duckdb")


def output_free_copy(demo_dir: Path) -> Path:
    """A fresh copy of the quickstart with no outputs, execution counts or saved
    widget state: nothing to distrust, nothing machine-specific, and the file a
    Run All autosaves into is this one, not the tracked notebook."""
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    demo_dir.mkdir(parents=True, exist_ok=True)
    copy = demo_dir / NOTEBOOK.name
    nbformat.write(nb, copy)
    return copy


def lab_command(port: int, root_dir: Path, token: str, notebook: str) -> list[str]:
    """The JupyterLab command line (this interpreter's) that serves `root_dir` and
    opens `notebook` in it. The port must be exactly `port` (no silent retry on
    another one), since the URL printed for the user names it."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--port={port}", "--ServerApp.port_retries=0", "--ip=127.0.0.1",
           f"--ServerApp.root_dir={root_dir}", f"--IdentityProvider.token={token}",
           "--log-level=WARN"]  # its start-up lines (and the Launcher's URL) would bury the notebook's URL
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI machines often run as root
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform in ("darwin", "win32")):
        cmd.append("--no-browser")  # no screen: open the URL the demo prints
    return [*cmd, notebook]


def notebook_url(port: int, notebook: str, token: str) -> str:
    """The notebook's own page (not the Launcher), token included."""
    return f"http://127.0.0.1:{port}/lab/tree/{urllib.parse.quote(notebook)}?token={token}"


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(proc: subprocess.Popen, port: int, token: str, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    return False


def run_interactive(port: int, demo_dir: Path) -> int:
    copy = output_free_copy(demo_dir)
    db = interactive_db(demo_dir)
    if not port_is_free(port):
        taken, port = port, free_port()
        print(f"Port {taken} is taken; using {port}.")
    token = secrets.token_hex(24)
    print(f"Opening a fresh copy of {NOTEBOOK.relative_to(ROOT)} in JupyterLab (offline model; Ctrl-C to stop).\n"
          f"Notebook: {copy}\nDatabase: {db}", flush=True)
    # JupyterLab resolves the file argument against its working directory.
    proc = subprocess.Popen(lab_command(port, demo_dir, token, copy.name),
                            env=demo_env(db), cwd=demo_dir)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())  # stopped: stop JupyterLab too, no orphan
    try:
        if wait_until_up(proc, port, token):
            print(f"\nOpen the notebook: {notebook_url(port, copy.name, token)}\n", flush=True)
        return proc.wait()
    except KeyboardInterrupt:  # JupyterLab got it too and shuts down (or asks first, on a terminal)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                continue


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ocw.notebook.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--headless", action="store_true", help="execute the notebook instead of opening JupyterLab")
    ap.add_argument("--port", type=int, default=8888, help="JupyterLab's port (a free one if it is taken)")
    ap.add_argument("--out", default=None,
                    help=f"where the copy, the executed copy and the demo database go (default {DEMO_DIR})")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else DEMO_DIR
    if not NOTEBOOK.exists():
        print(f"cannot find {NOTEBOOK}; run make demo from an ocw checkout", file=sys.stderr)
        return 2
    if not args.headless:
        return run_interactive(args.port, out)
    from nbclient.exceptions import CellExecutionError

    try:
        executed = run_headless(out)
    except CellExecutionError as e:
        print(f"{NOTEBOOK.name} failed on the offline model:\n{e}\n"
              f"Executed copy (up to the failing cell): {out / '01-quickstart.executed.ipynb'}", file=sys.stderr)
        return 1
    print(f"Executed {NOTEBOOK.name} on the offline model.\nExecuted copy: {executed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
