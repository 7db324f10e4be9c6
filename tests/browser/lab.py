"""A throwaway JupyterLab server and a headless Debian Chromium, for tests/widgets/test_browser.py.

Everything lives in one temporary directory: the server's root (holding a copy of the
notebook, so autosave never writes into the repo), the JupyterLab user settings (news and
update checks off, all cells attached to the DOM), workspaces, runtime and config dirs, and
the DuckDB file the kernel's ocw writes (OCW_DB). The server gets a clean environment: no
OCW_* overrides and no provider keys, so ocw runs on its offline model.

Missing tools FAIL the test with a message saying how to install them; nothing is skipped.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

CHROMIUM_ENV = "CHROMIUM_BIN"  # override the browser's path (default: Debian's /usr/bin/chromium)
CHROMIUM_DEFAULT = "/usr/bin/chromium"
# `playwright install` downloads a browser and cannot work offline: launch Debian's Chromium.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

# JupyterLab user settings, written into the temporary JUPYTERLAB_SETTINGS_DIR.
LAB_SETTINGS = {
    # No news / update toast over the page (both would also try the network).
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # Keep every cell attached to the DOM, so locators never meet a virtualized cell.
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

# Variables that would point the kernel's ocw (or Jupyter) somewhere else than the temp dir.
_DROP_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME", "JUPYTER_TOKEN", "JUPYTER_PATH",
             "JUPYTER_PREFER_ENV_PATH", "PYTHONSTARTUP")


def chromium_path() -> str:
    """The Chromium binary, or a failed test that says how to get one."""
    path = os.environ.get(CHROMIUM_ENV) or CHROMIUM_DEFAULT
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"Chromium not found at {path}: the browser test needs a real Chromium. Install Debian's "
            f"(`apt-get install -y chromium`, as .ci/run does) or set {CHROMIUM_ENV} to a Chromium binary. "
            "(`playwright install` does not work offline.)",
            pytrace=False,
        )
    return path


def require_python_packages() -> None:
    missing = [m for m in ("jupyterlab", "playwright", "anywidget", "ipykernel")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(
            f"the browser test needs {', '.join(missing)} in {sys.executable}: "
            "run `make install` (pip install -e '.[dev]').",
            pytrace=False,
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """`python -m jupyter lab` on 127.0.0.1:<free port>, rooted in `workdir/root`."""

    def __init__(self, notebook: Path, workdir: Path, env: dict[str, str] | None = None):
        self.workdir = Path(workdir)
        self.root = self.workdir / "root"
        self.notebook_name = notebook.name
        self.db = self.workdir / "ocw.duckdb"
        self.log_path = self.workdir / "jupyterlab.log"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.root.mkdir(parents=True)
        shutil.copy2(notebook, self.root / notebook.name)
        self.env = self._environment()
        self.env.update(env or {})  # e.g. a provider at a loopback server the test started

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def notebook_url(self) -> str:
        return f"{self.url}/lab/tree/{self.notebook_name}?reset"

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OCW_") and k not in _DROP_ENV}
        dirs = {name: self.workdir / name for name in ("settings", "workspaces", "runtime", "config", "data", "ipython")}
        for d in dirs.values():
            d.mkdir(exist_ok=True)
        for rel, values in LAB_SETTINGS.items():
            f = dirs["settings"] / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(values, indent=2))
        env.update(
            OCW_DB=str(self.db),
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            IPYTHONDIR=str(dirs["ipython"]),
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, timeout: float = 60.0, attempts: int = 3) -> "JupyterLab":
        """Start the server and wait for /api/status. A port taken between choosing it and
        binding it (another process won the race) means another try on a new port."""
        for attempt in range(1, attempts + 1):
            if self._start_once(timeout):
                return self
            in_use = "already in use" in self.log_tail()
            self.stop()
            if not in_use or attempt == attempts:
                break
        pytest.fail(f"JupyterLab did not start (see its log below):\n{self.log_tail()}", pytrace=False)

    def _start_once(self, timeout: float) -> bool:
        self.port = free_port()
        cmd = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
            "--ServerApp.token=", "--ServerApp.password=", "--ip=127.0.0.1", f"--port={self.port}",
            "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.root}",
        ]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=5) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        return False

    def stop(self) -> None:
        """SIGINT by PID (with no tty there is no confirmation prompt: the server shuts its
        kernels down and exits, ~1-2 s here), a second SIGINT if it is still up after 10 s,
        SIGKILL after 10 s more; then SIGKILL whatever is left of the process group it led
        (it was started in a new session: only its own kernels)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for wait in (10, 10):
                if proc.poll() is not None:
                    break
                try:
                    proc.send_signal(signal.SIGINT)
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    continue
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            try:  # kernels the server may have left behind, same process group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


class Voila(JupyterLab):
    """`voila NOTEBOOK` on 127.0.0.1:<free port> (the same temp dirs and environment as
    JupyterLab): every visit of its page starts a kernel of its own and runs the notebook."""

    @property
    def notebook_url(self) -> str:
        return self.url + "/"

    def _start_once(self, timeout: float) -> bool:
        self.port = free_port()
        cmd = [str(Path(sys.executable).parent / "voila"), self.notebook_name, "--no-browser",
               f"--port={self.port}", "--Voila.ip=127.0.0.1", "--ServerApp.port_retries=0"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:  # the static files answer without starting a kernel (the page would start one)
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                time.sleep(0.25)
        return False


@contextlib.contextmanager
def running_voila(notebook: Path, env: dict[str, str] | None = None):
    """A started Voilà serving a temp copy of `notebook`; stopped, temp dir removed, on exit."""
    workdir = Path(tempfile.mkdtemp(prefix="ocw-voila-"))
    app = Voila(notebook, workdir, env)
    try:
        yield app.start()
    finally:
        app.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def running_lab(notebook: Path, env: dict[str, str] | None = None):
    """A started JupyterLab serving a temp copy of `notebook` (its kernels see `env` on top
    of the clean environment); stopped and its temp dir removed on exit."""
    workdir = Path(tempfile.mkdtemp(prefix="ocw-browser-"))
    lab = JupyterLab(notebook, workdir, env)
    try:
        yield lab.start()
    finally:
        lab.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def launch_chromium(playwright, executable: str):
    try:
        return playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
    except Exception as e:  # a broken install: say so plainly
        pytest.fail(f"could not launch Chromium at {executable}: {e}", pytrace=False)



def cell_tags(notebook: Path) -> dict[str, int]:
    """Cell tag -> the cell's index in `notebook` (an .ipynb file)."""
    cells = json.loads(notebook.read_text())["cells"]
    return {tag: i for i, c in enumerate(cells) for tag in c.get("metadata", {}).get("tags", [])}


@contextlib.contextmanager
def notebook_in_chromium(notebook: Path, tags: dict[str, int], failure_png: Path, *,
                         env: dict[str, str] | None = None, height: int = 1000, console_tail: int = 40):
    """A JupyterLab serving `notebook`, open in headless Chromium with its kernel idle:
    yields the NotebookPage (`nb.context` is the browser context, `nb.console` the page's
    console lines). Checks the tools first, so a missing one is a FAILED test. If the body
    fails: a full-page screenshot at `failure_png`, the page errors, the console's tail and
    JupyterLab's log are printed, and the failure goes on."""
    require_python_packages()
    chromium = chromium_path()
    from playwright.sync_api import sync_playwright

    failure_png.parent.mkdir(parents=True, exist_ok=True)
    failure_png.unlink(missing_ok=True)
    with running_lab(notebook, env) as lab, sync_playwright() as p:
        browser = launch_chromium(p, chromium)
        nb = None
        try:
            context = browser.new_context(viewport={"width": 1280, "height": height})
            page = context.new_page()
            page.set_default_timeout(30_000)
            nb = NotebookPage(page, tags)
            nb.context = context
            page.on("pageerror", lambda e: nb.errors.append(str(e)))
            page.on("console", lambda m: nb.console.append(f"{m.type}: {m.text}"))
            page.goto(lab.notebook_url, wait_until="domcontentloaded", timeout=60_000)
            nb.wait_for_kernel(timeout_ms=90_000)  # ~15 s here idle, 30 s on a loaded 2-core box
            yield nb
        except (Exception, pytest.fail.Exception):
            if nb is not None:
                try:
                    nb.page.screenshot(path=str(failure_png), full_page=True)
                except Exception:
                    pass
                print(f"\n--- page errors ---\n{nb.errors}\n--- console ---\n"
                      + "\n".join(nb.console[-console_tail:]))
            print(f"--- JupyterLab log (tail) ---\n{lab.log_tail()}")
            raise
        finally:
            browser.close()

# -- the notebook in the page ---------------------------------------------------------
PROMPT_DONE = re.compile(r"^\[\d+\]:?$")


class NotebookPage:
    """The notebook open in JupyterLab, addressed by cell index."""

    def __init__(self, page, tags: dict[str, int]):
        self.page = page
        self.tags = tags  # cell tag -> index in the notebook
        self.errors: list[str] = []  # uncaught page errors, printed if the test fails
        self.console: list[str] = []  # the page's console lines ("type: text")
        self.context = None  # the browser context (notebook_in_chromium sets it)

    def cell(self, tag: str):
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(self.tags[tag])

    def wait_for_kernel(self, timeout_ms: int = 60_000) -> None:
        """The status bar names the kernel and says Idle once the kernel exists. (The
        execution indicator reads idle earlier; cells run then would open a dialog.)"""
        from playwright.sync_api import expect

        expect(self.page.locator("#jp-main-statusbar")).to_contain_text("Python 3 (ipykernel) | Idle",
                                                                         timeout=timeout_ms)

    def run_cell(self, tag: str, timeout: float = 90.0, expect_marker: bool = True) -> str:
        """Select the cell (click its prompt: command mode), Ctrl+Enter to run it in place,
        and wait until its prompt shows an execution count. The cell must print
        `OCW-STEP <tag>`; returns that line. A traceback fails the test with its text.
        With expect_marker=False (a magic cell that cannot print one) returns the cell's output text."""
        cell = self.cell(tag)
        cell.scroll_into_view_if_needed()
        cell.locator(".jp-InputPrompt").first.click()
        self.page.keyboard.press("Control+Enter")
        marker = f"OCW-STEP {tag}"
        prompt = cell.locator(".jp-InputArea-prompt").first
        output = cell.locator(".jp-Cell-outputWrapper")
        deadline = time.monotonic() + timeout
        while True:
            done = PROMPT_DONE.match(prompt.inner_text().strip())
            text = output.inner_text() if output.count() else ""
            if done and not expect_marker:
                return text
            if done:
                for line in text.splitlines():
                    if line.startswith(marker):
                        return line.strip()
                pytest.fail(f"cell {tag!r} finished without printing {marker!r}; its output:\n{text}",
                            pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"cell {tag!r} did not finish within {timeout:.0f} s "
                            f"(prompt {prompt.inner_text().strip()!r}); its output so far:\n{text}", pytrace=False)
            self.page.wait_for_timeout(200)

    # -- JupyterLab's own commands, through its menus (issue 12) ----------------------------------
    def menu(self, top: str, command: str, label: str | None = None) -> None:
        """Open the menu bar's `top` menu and click the item running `command` (the one
        showing `label`, for commands that appear with several arguments)."""
        page = self.page
        page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
        item = page.locator(f"li.lm-Menu-item[data-command='{command}']")
        if label is not None:
            item = item.filter(has_text=label)
        item.first.click()

    def restart_kernel(self, timeout_ms: int = 90_000) -> None:
        """Kernel ▸ Restart Kernel…, confirm, and wait until the new kernel is idle."""
        from playwright.sync_api import expect

        self.menu("Kernel", "kernelmenu:restart")
        self.page.locator(".jp-Dialog .jp-mod-accept").click()
        expect(self.page.locator(".jp-Dialog")).to_have_count(0)
        self.wait_for_kernel(timeout_ms)

    def change_theme(self, theme: str, light: bool) -> None:
        """Settings ▸ Theme ▸ `theme`; waits for JupyterLab to mark <body> light or dark."""
        from playwright.sync_api import expect

        page = self.page
        page.locator(".lm-MenuBar-itemLabel", has_text="Settings").first.click()
        page.locator("li.lm-Menu-item[data-type='submenu']", has_text="Theme").first.hover()
        page.locator("li.lm-Menu-item[data-command='apputils:change-theme']", has_text=theme).first.click()
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true" if light else "false",
                                                       timeout=30_000)
