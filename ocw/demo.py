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
    os.environ.update(OCW_DB=str(db), OCW_PROVIDER="offline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    out = out_dir / "01-quickstart.executed.ipynb"
    nbformat.write(nb, out)
    return out


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
        out = run_headless(Path(args.out))
        print(f"Executed {NOTEBOOK.name} on the offline model.\nExecuted copy: {out}")
        return 0
    env = {**os.environ, "OCW_PROVIDER": os.environ.get("OCW_PROVIDER", "offline")}
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    print(f"Opening {NOTEBOOK.relative_to(ROOT)} in JupyterLab (offline model; Ctrl-C to stop)…")
    return subprocess.call([jupyter, "lab", f"--port={args.port}", f"--ServerApp.root_dir={ROOT / 'notebooks'}",
                            NOTEBOOK.name], env=env)


if __name__ == "__main__":
    sys.exit(main())
