"""`make demo` (issues 5 and 12).

Headless: `python -m ocw.notebook.demo --headless --out DIR` executes the quickstart notebook in a
real kernel on the offline model and prints where the executed copy is.

Interactive (issue 12, item 2): `make demo` opens a fresh, output-free copy of the notebook
under build/demo/ (git-ignored), never the tracked file; its kernel's database is
build/demo/demo.duckdb unless the user set OCW_DB, never ~/.local/share/ocw/ocw.duckdb; it
prints the notebook's own URL (/lab/tree/<file> with the token). The real `make demo` and
`make demo HEADLESS=1` run in a fresh clone of this checkout's HEAD, which must have a clean
`git status --porcelain` afterwards.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import nbformat

from ocw.notebook import demo

ROOT = Path(__file__).resolve().parents[2]


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
    assert re.search(r"Context compacted: covered \d+ older messages?, [\d,]+ → [\d,]+ tokens", shown)
    assert "Context is already compacted; no older messages to fold." in shown
    # The replies streamed into the notebook (as text too, not "<Markdown object>").
    chats = [t for src, t in cells if src.startswith("%%chat")]
    assert chats and all(t.strip() and "Markdown object" not in t for t in chats)
    assert "sk-test-SECRET-abc123456" not in executed.read_text()
    # Its own database, not the caller's.
    assert (out_dir / "demo.duckdb").exists() and not Path(ocw_env).exists()


def test_lab_command_serves_the_copy_on_exactly_the_port_and_starts_as_root(monkeypatch, tmp_path):
    """JupyterLab must accept being root here (it refuses otherwise), serve the demo folder,
    open the copy, and fail rather than move to another port than the URL names."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    cmd = demo.lab_command(8899, tmp_path, "tok123", "01-quickstart.ipynb")
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"] and "--port=8899" in cmd
    assert "--ServerApp.port_retries=0" in cmd
    assert cmd[-1] == "01-quickstart.ipynb"
    assert f"--ServerApp.root_dir={tmp_path}" in cmd and "--IdentityProvider.token=tok123" in cmd
    assert ("--allow-root" in cmd) == (os.geteuid() == 0)
    assert "--no-browser" in cmd
    assert demo.notebook_url(8899, "01-quickstart.ipynb", "tok123") == \
        "http://127.0.0.1:8899/lab/tree/01-quickstart.ipynb?token=tok123"


def test_the_copy_is_output_free_and_the_database_is_the_demos_unless_ocw_db_is_set(tmp_path):
    import nbformat

    tracked = nbformat.read(demo.NOTEBOOK, as_version=4)
    assert any(c.get("outputs") for c in tracked.cells)  # the tracked notebook has outputs (nbval)
    copy = demo.output_free_copy(tmp_path / "d")
    assert copy == tmp_path / "d" / "01-quickstart.ipynb"
    nb = nbformat.read(copy, as_version=4)
    assert [c.source for c in nb.cells] == [c.source for c in tracked.cells]
    assert all(c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code")
    assert "widgets" not in nb.metadata
    assert tracked == nbformat.read(demo.NOTEBOOK, as_version=4)  # the original is untouched

    (tmp_path / "d" / "demo.duckdb").write_text("old")
    assert demo.interactive_db(tmp_path / "d", {}) == tmp_path / "d" / "demo.duckdb"
    assert not (tmp_path / "d" / "demo.duckdb").exists()  # a fresh demo database
    assert demo.interactive_db(tmp_path / "d", {"OCW_DB": "/data/mine.duckdb"}) == "/data/mine.duckdb"
    env = demo.demo_env("/x/demo.duckdb", {"OCW_MODEL": "gpt-4o", "OCW_LANG": "zh", "OPENAI_API_KEY": "sk-1",
                                           "JPY_SESSION_NAME": "a.ipynb", "PATH": "/bin"})
    assert env == {"OCW_DB": "/x/demo.duckdb", "OCW_PROVIDER": "offline", "OCW_LANG": "zh", "PATH": "/bin"}


def test_a_screen_opens_the_browser_and_no_screen_prints_the_url_only(monkeypatch, tmp_path):
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(demo.sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    assert "--no-browser" not in demo.lab_command(8899, tmp_path, "t", "a.ipynb")  # X11: JupyterLab opens it
    monkeypatch.delenv("DISPLAY")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert "--no-browser" not in demo.lab_command(8899, tmp_path, "t", "a.ipynb")
    monkeypatch.delenv("WAYLAND_DISPLAY")
    assert "--no-browser" in demo.lab_command(8899, tmp_path, "t", "a.ipynb")  # a server: the URL is printed


def test_only_root_gets_allow_root(monkeypatch, tmp_path):
    """JupyterLab refuses root without --allow-root, and a user's JupyterLab need not be told:
    the flag follows the effective uid. (This machine runs as root: a user's uid is stood in.)"""
    monkeypatch.setattr(demo.os, "geteuid", lambda: 1000)
    assert "--allow-root" not in demo.lab_command(8899, tmp_path, "t", "a.ipynb")
    monkeypatch.setattr(demo.os, "geteuid", lambda: 0)
    assert "--allow-root" in demo.lab_command(8899, tmp_path, "t", "a.ipynb")


def test_the_copy_drops_saved_widget_state(monkeypatch, tmp_path):
    nb = nbformat.read(demo.NOTEBOOK, as_version=4)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m1": {}}}}
    saved = tmp_path / "01-quickstart.ipynb"
    nbformat.write(nb, saved)
    monkeypatch.setattr(demo, "NOTEBOOK", saved)  # a notebook saved with its widgets' state
    copy = nbformat.read(demo.output_free_copy(tmp_path / "d"), as_version=4)
    assert "widgets" not in copy.metadata and "widgets" in nbformat.read(saved, as_version=4).metadata


def test_a_taken_port_is_replaced_by_a_free_one():
    import socket

    port = demo.free_port()
    assert 1024 <= port <= 65535 and demo.port_is_free(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        assert not demo.port_is_free(port)
        other = demo.free_port()  # while `port` is held, another one is given
        assert other != port and demo.port_is_free(other)


def test_help_says_what_the_demo_does(capsys):
    with pytest.raises(SystemExit) as e:
        demo.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: python -m ocw.notebook.demo")
    assert "`make demo`: open the quickstart notebook in JupyterLab on the offline model," in " ".join(out.split())


def git(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_the_default_demo_folder_is_ignored_and_untracked():
    rel = demo.DEMO_DIR.relative_to(ROOT)
    for name in ("01-quickstart.ipynb", "demo.duckdb", "demo.duckdb.wal", "01-quickstart.executed.ipynb"):
        assert git("check-ignore", "-q", str(rel / name), cwd=ROOT).returncode == 0, name
        assert git("ls-files", "--error-unmatch", str(rel / name), cwd=ROOT).returncode != 0, name


# -- the real `make demo`, in a fresh clone ------------------------------------------------------


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this checkout's HEAD with a .venv that make accepts as installed: it
    sees this interpreter's packages and the clone's own ocw (what `pip install -e .` gives),
    so `make demo` runs the clone's code without a network install."""
    base = tmp_path_factory.mktemp("demo-clone")
    path = base / "ocw"
    r = subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    venv = path / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "ocw_demo_test.pth").write_text("\n".join([str(path), *ours]) + "\n")
    stamp = venv / ".ocw-installed"
    stamp.touch()
    later = time.time() + 60  # newer than .venv/bin/python, pyproject.toml and hatch_build.py: no reinstall
    os.utime(stamp, (later, later))
    home = base / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCW_", "JUPYTER", "JPY_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY",
                                                                          "IPYTHONDIR", "OPENAI_API_KEY")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    assert git("status", "--porcelain", cwd=path).stdout == ""
    return {"path": path, "home": home, "env": env}


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def server_environ(pid: int) -> dict:
    """The environment of the JupyterLab process started under `pid` (its kernels inherit it)."""
    for p in descendants(pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"jupyterlab" in cmd:
            raw = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
            return dict(x.decode().split("=", 1) for x in raw if b"=" in x)
    raise AssertionError("no JupyterLab process under the demo")


class RunningDemo:
    """`make demo PORT=P` (or any command) started in its own process group; the lines it
    printed up to the notebook's URL."""

    def __init__(self, cmd, cwd, env):
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Open the notebook: "):
                return
        self.stop()
        raise AssertionError("the demo printed no notebook URL:\n" + "\n".join(self.lines))

    def value(self, label: str) -> str:
        (v,) = [ln[len(label):].strip() for ln in self.lines if ln.startswith(label)]
        return v

    def stop(self) -> None:
        """SIGINT to the group this test started (make, the demo, JupyterLab), as Ctrl-C would."""
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass


def get(url: str) -> tuple[int, str]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_make_demo_opens_a_copy_and_a_demo_database_and_prints_the_notebooks_url(clone):
    path, home = clone["path"], clone["home"]
    port = demo.free_port()
    run = RunningDemo(["make", "demo", f"PORT={port}"], path, clone["env"])
    try:
        url = run.value("Open the notebook:")
        m = re.fullmatch(rf"http://127\.0\.0\.1:{port}/lab/tree/01-quickstart\.ipynb\?token=(\w{{16,}})", url)
        assert m, url  # the notebook's page, not the Launcher's /lab
        token = m[1]
        status, page = get(url)
        assert status == 200 and "jupyter-config-data" in page
        assert get(url.split("?")[0])[0] in (302, 403)  # without the token: not in

        notebook = Path(run.value("Notebook:"))
        assert notebook == path / "build" / "demo" / "01-quickstart.ipynb"
        assert git("ls-files", "--error-unmatch", str(notebook), cwd=path).returncode != 0  # not a tracked file
        status, body = get(f"http://127.0.0.1:{port}/api/contents/01-quickstart.ipynb?token={token}")
        served = json.loads(body)["content"]
        tracked = nbformat.read(path / "notebooks" / "01-quickstart.ipynb", as_version=4)
        assert [c["source"] for c in served["cells"]] == [c.source for c in tracked.cells]
        assert all(c.get("outputs") == [] for c in served["cells"] if c["cell_type"] == "code")

        db = run.value("Database:")
        assert db == str(path / "build" / "demo" / "demo.duckdb")
        assert db != str(home / ".local" / "share" / "ocw" / "ocw.duckdb")
        env = server_environ(run.proc.pid)  # what the notebook's kernel inherits
        assert env["OCW_DB"] == db and env["OCW_PROVIDER"] == "offline"
    finally:
        run.stop()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=path).stdout == ""


def test_make_demo_uses_ocw_db_when_the_user_set_it(clone, tmp_path):
    mine = tmp_path / "mine.duckdb"
    env = {**clone["env"], "OCW_DB": str(mine)}
    run = RunningDemo(["make", "demo", f"PORT={demo.free_port()}"], clone["path"], env)
    try:
        assert run.value("Database:") == str(mine)
        assert server_environ(run.proc.pid)["OCW_DB"] == str(mine)
    finally:
        run.stop()


def test_make_demo_headless_leaves_the_clone_clean(clone):
    path = clone["path"]
    r = subprocess.run(["make", "demo", "HEADLESS=1"], cwd=path, env=clone["env"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^Executed copy: (.+)$", r.stdout, re.M)
    assert m and Path(m[1]) == path / "build" / "demo" / "01-quickstart.executed.ipynb" and Path(m[1]).exists()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=path).stdout == ""
