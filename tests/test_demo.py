"""Issue 5: `make demo HEADLESS=1` — `python -m ocw.demo --headless --out DIR` executes
the quickstart notebook in a real kernel on the offline model and prints where the
executed copy is. Driven through the module's main(), as make does."""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat

from ocw import demo


def outputs_text(nb) -> list[tuple[str, str]]:
    """(cell source, all text its outputs show) per code cell."""
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        parts = []
        for o in c.get("outputs", []):
            if o.output_type == "stream":
                parts.append(o.text)
            elif o.output_type in ("display_data", "execute_result"):
                parts.append(o.data.get("text/plain", ""))
            elif o.output_type == "error":
                parts.append(f"ERROR {o.ename}: {o.evalue}")
        out.append((c.source, "".join(parts)))
    return out


def test_headless_demo_executes_the_quickstart(tmp_path, monkeypatch, ocw_env, capsys):
    # Settings in the caller's shell must not change what the demo shows, nor leak out of it.
    monkeypatch.setenv("OCW_MODEL", "gpt-4o")
    monkeypatch.setenv("OCW_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-abc123456")
    env_before = dict(os.environ)
    out_dir = tmp_path / "demo-out"

    assert demo.main(["--headless", "--out", str(out_dir)]) == 0

    printed = capsys.readouterr().out
    m = re.search(r"^Executed copy: (.+)$", printed, re.M)
    assert m, printed
    executed = Path(m.group(1).strip())
    assert executed == out_dir / "01-quickstart.executed.ipynb" and executed.exists()
    assert dict(os.environ) == env_before  # the caller's environment is untouched

    nb = nbformat.read(executed, as_version=4)
    cells = outputs_text(nb)
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    assert not [t for _, t in cells if "ERROR " in t or "Traceback" in t]
    shown = "\n".join(t for _, t in cells)
    assert "model ocw-offline" in shown  # the offline model, whatever the shell said
    assert re.search(r"Context compacted: covered \d+ older messages, [\d,]+ → [\d,]+ tokens", shown)
    assert "Context is already compacted; no older messages to fold." in shown
    # The replies streamed into the notebook (as text too, not "<Markdown object>").
    chats = [t for src, t in cells if src.startswith("%%chat")]
    assert chats and all(t.strip() and "Markdown object" not in t for t in chats)
    assert "sk-test-SECRET-abc123456" not in executed.read_text()
    # Its own database, not the caller's.
    assert (out_dir / "demo.duckdb").exists() and not Path(ocw_env).exists()


def test_lab_command_opens_the_quickstart_and_starts_as_root(monkeypatch):
    """`make demo` (not headless): JupyterLab must accept being root here (it refuses
    otherwise) and find the notebook relative to the notebooks folder it runs in."""
    from ocw import demo

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    cmd = demo.lab_command("jupyter", 8899)
    assert cmd[:2] == ["jupyter", "lab"] and "--port=8899" in cmd
    assert cmd[-1] == "01-quickstart.ipynb" and (demo.NOTEBOOK.parent / cmd[-1]).exists()
    assert f"--ServerApp.root_dir={demo.NOTEBOOK.parent}" in cmd
    assert ("--allow-root" in cmd) == (os.geteuid() == 0)
    assert "--no-browser" in cmd
