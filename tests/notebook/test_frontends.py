"""Front ends other than JupyterLab (issue 24): which session a cell continues, and
what a front end without display updates shows.

The pure rules (ocw/notebook/frontend.py `detect`) are pinned case by case; then the
real programs run: `jupyter console` (drops update_display_data: the whole reply and
the %context table must still arrive), papermill and `jupyter nbconvert --execute`
(each run a new session unless the notebook names one), and nbconvert's HTML (the
widgets' static snapshot). Each program is the real one, started as a user would, on
a throwaway DuckDB file with the offline model.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import nbformat
import pytest

from ocw.notebook.frontend import Frontend, program_words, detect

BIN = Path(sys.executable).parent
NOW = dt.datetime(2026, 12, 1, 21, 40, 3)
pytestmark = pytest.mark.timeout(300)


# -- the rules -------------------------------------------------------------------------
def test_notebook_front_ends_name_the_notebook():
    f = detect(environ={"JPY_SESSION_NAME": "/home/me/a.ipynb"}, ancestors=[["jupyter-lab"]])
    assert f == Frontend("notebook", "/home/me/a.ipynb") and f.updates
    assert f.session_name({}) == "/home/me/a.ipynb"
    v = detect(environ={}, user_ns={"__vsc_ipynb_file__": "/w/b.ipynb"})
    assert v.kind == "vscode" and v.session_name({}) == "/w/b.ipynb" and v.updates
    # OCW_SESSION wins over the notebook's name.
    assert f.session_name({"OCW_SESSION": "team"}) == "team"


def test_batch_runs_get_a_session_per_run_named_after_the_notebook():
    for cmd in (["/v/bin/papermill", "in.ipynb", "out.ipynb"], ["/v/bin/python", "-m", "papermill", "in.ipynb", "o.ipynb"],
                ["/v/bin/jupyter-nbconvert", "--execute", "--to", "notebook", "--output", "o.ipynb", "in.ipynb"],
                ["/v/bin/jupyter", "nbconvert", "--execute", "in.ipynb"], ["/v/bin/jupyter-execute", "in.ipynb"]):
        f = detect(environ={}, ancestors=[cmd], now=NOW, kernel_id="3f2a1b9c")
        assert f.kind == "batch" and f.updates, cmd
        assert f.session_name({}) == "in (run 2026-12-01 21:40:03 · 3f2a1b9c)", cmd
        assert f.session_name({"OCW_SESSION": "nightly"}) == "nightly"
    # The nearest launcher counts; a grandparent papermill behind a wrapper is still found.
    assert detect(environ={}, ancestors=[["/bin/sh", "-c", "x"], ["papermill", "n.ipynb"]], now=NOW).kind == "batch"


def test_voila_gives_each_kernel_its_own_session():
    env = {"SERVER_SOFTWARE": "voila/0.5.13"}
    a = detect(environ=env, ancestors=[["/v/bin/voila", "app.ipynb"]], kernel_id="aaaa1111")
    b = detect(environ=env, ancestors=[["/v/bin/voila", "app.ipynb"]], kernel_id="bbbb2222")
    assert a.kind == b.kind == "voila"
    assert a.session_name({}) == "app (Voilà aaaa1111)" and b.session_name({}) == "app (Voilà bbbb2222)"
    assert detect(environ={}, ancestors=[["/v/bin/voila", "app.ipynb"]], kernel_id="c").kind == "voila"
    # Found by its launcher alone (no SERVER_SOFTWARE): still the kernel's id, else the time.
    found = detect(environ={}, ancestors=[["/v/bin/voila", "app.ipynb"]], now=NOW, kernel_id="cccc3333")
    assert found.session_name({}) == "app (Voilà cccc3333)"
    found = detect(environ={}, ancestors=[["/v/bin/voila", "app.ipynb"]], now=NOW)
    assert found.session_name({}) == "app (Voilà 2026-12-01 21:40:03)"


def test_console_has_no_display_updates_and_unknown_kernels_stay_default():
    c = detect(environ={}, ancestors=[["/v/bin/python", "/v/bin/jupyter-console", "--simple-prompt"]])
    assert c.kind == "console" and not c.updates and c.session_name({}) == "default"
    assert detect(environ={}, ancestors=[["/v/bin/jupyter", "console"]]).kind == "console"
    k = detect(environ={}, ancestors=[["/v/bin/python", "-m", "pytest", "tests/x.py"]])
    assert k == Frontend("kernel") and k.updates and k.session_name({}) == "default"
    assert detect(environ={}, zmq=False).kind == "terminal" and not Frontend("terminal").updates
    # A notebook's name counts in any shell (the magics decide rich output by the shell).
    assert detect(environ={"JPY_SESSION_NAME": "a.ipynb"}, zmq=False).session_name({}) == "a.ipynb"
    # A notebook path among the arguments does not make an unknown program a batch run.
    assert detect(environ={}, ancestors=[["/usr/bin/vim", "a.ipynb"]]).kind == "kernel"
    assert program_words(["/v/bin/python3.11", "-m", "papermill", "a.ipynb"]) == ["python3.11", "papermill"]
    assert program_words(["/v/bin/python", "/v/bin/voila", "a.ipynb"]) == ["python", "voila"]
    assert program_words(["/v/bin/jupyter", "nbconvert", "a.ipynb"]) == ["jupyter", "jupyter-nbconvert"]


# -- the real programs ---------------------------------------------------------------------
def _env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME")}
    env.update(OCW_DB=str(tmp_path / "ocw.duckdb"), OCW_PROVIDER="offline", **extra)
    return env


def _sessions(db: Path) -> dict[str, int]:
    """name -> stored messages, read from the DuckDB file itself."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT s.name, count(n.id) FROM sessions s LEFT JOIN nodes n ON n.session_id = s.id "
                           "AND n.role IN ('user', 'assistant') GROUP BY s.name").fetchall()
    finally:
        con.close()
    return dict(rows)


MESSAGE = "Which retries does the loader do after a timeout, and how long does it wait between them?"


def test_jupyter_console_gets_the_whole_reply_and_the_context_table(tmp_path):
    """jupyter console renders display_data and stream, never update_display_data: the
    reply must arrive whole (not its first words) and %context must print the table."""
    lines = ["%load_ext ocw", f"get_ipython().run_cell_magic('chat', '', {MESSAGE!r})", "%context", "print('END')"]
    out = subprocess.run([str(BIN / "jupyter-console"), "--simple-prompt"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=120).stdout
    assert "END" in out, out
    # The offline model's whole reply ends with its keywords, the last words of the reply.
    reply = next(line for line in out.splitlines() if "(offline model)" in line)
    assert reply.rstrip().endswith("keywords: retries, loader, after, timeout, long."), out
    assert "context 1 % ·" in out  # the status line after it
    assert "Context — session 'default'" in out and "Free space" in out and "Total" in out, out
    assert "<ocw context:" not in out  # not the widget's one-line text


def _notebook(path: Path, chat_line: str = "%%chat") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext ocw"),
                nbformat.v4.new_code_cell(f"{chat_line}\n{MESSAGE}"),
                nbformat.v4.new_code_cell("%context"),
                nbformat.v4.new_code_cell("%chat")]
    nbformat.write(nb, path)
    return path


def _run_twice(cmd, tmp_path: Path, nb: Path) -> dict[str, int]:
    env = _env(tmp_path)
    for _ in range(2):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
    return _sessions(tmp_path / "ocw.duckdb")


@pytest.mark.parametrize("runner", ["papermill", "nbconvert"])
def test_a_batch_run_twice_is_two_sessions(tmp_path, runner):
    nb = _notebook(tmp_path / "analysis.ipynb")
    cmd = ([str(BIN / "papermill"), "--no-progress-bar", str(nb), str(tmp_path / "out.ipynb")] if runner == "papermill"
           else [str(BIN / "jupyter-nbconvert"), "--execute", "--to", "notebook", "--output", "out.ipynb", str(nb)])
    sessions = _run_twice(cmd, tmp_path, nb)
    assert len(sessions) == 2, sessions
    assert all(n.startswith("analysis (run 20") for n in sessions), sessions
    assert sorted(sessions.values()) == [2, 2], sessions  # neither run continued the other
    out = json.loads((tmp_path / "out.ipynb").read_text())
    text = json.dumps(out["cells"][1]["outputs"])
    assert "keywords: retries, loader, after, timeout, long." in text  # the whole reply, in the saved notebook


def test_a_batch_run_of_a_notebook_that_names_its_session_continues_it(tmp_path):
    nb = _notebook(tmp_path / "analysis.ipynb", "%%chat --session nightly")
    cmd = [str(BIN / "papermill"), "--no-progress-bar", str(nb), str(tmp_path / "out.ipynb")]
    assert _run_twice(cmd, tmp_path, nb) == {"nightly": 4}


def test_nbconvert_html_shows_the_reply_and_the_widgets_snapshots(tmp_path):
    """A notebook saved as JupyterLab saves it (no widget state: the default) and exported
    to HTML shows the reply and each widget's static snapshot instead of an empty output.
    (With widget state stored, nbconvert emits the live view and its widget manager.)"""
    nb = _notebook(tmp_path / "report.ipynb")
    env = _env(tmp_path)
    done = subprocess.run([str(BIN / "jupyter-nbconvert"), "--execute", "--to", "notebook", "--inplace",
                           "--ExecutePreprocessor.store_widget_state=False", str(nb)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([str(BIN / "jupyter-nbconvert"), "--to", "html", str(nb)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "report.html").read_text()
    assert "keywords: retries, loader, after, timeout, long." in page
    assert "<b>ocw context</b> · report (run 20" in page  # %context's ring, as a snapshot
    assert "<b>ocw chat</b> · report (run 20" in page and "Which retries does the loader do" in page


# -- names as a reader sees them ----------------------------------------------------------
def test_shown_name_is_relative_to_the_working_directory_only_under_it():
    from ocw.notebook.frontend import shown_name, stored_names

    assert shown_name("/home/me/work/notebooks/a.ipynb", "/home/me/work") == "notebooks/a.ipynb"
    assert shown_name("/elsewhere/a.ipynb", "/home/me/work") == "/elsewhere/a.ipynb"  # not under it: whole
    assert shown_name("/home/me/workshop/a.ipynb", "/home/me/work") == "/home/me/workshop/a.ipynb"  # a prefix only
    assert shown_name("default", "/home/me/work") == "default"
    assert shown_name("in (run 2026-12-01 21:40:03 · 3f2a)", "/w") == "in (run 2026-12-01 21:40:03 · 3f2a)"
    assert stored_names("notebooks/a.ipynb", "/home/me/work") == ["notebooks/a.ipynb",
                                                                  "/home/me/work/notebooks/a.ipynb"]
    assert stored_names("team", "/home/me/work") == ["team"]


def test_sessions_context_and_doctor_show_the_notebook_relative_and_session_finds_it(ip, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    (work / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(work)
    absolute = str(work / "notebooks" / "analysis.ipynb")
    monkeypatch.setenv("JPY_SESSION_NAME", absolute)
    assert ip.run_cell("%%chat\nhello").error_in_exec is None
    import ocw

    assert ocw.current_session().name == absolute  # stored whole: two folders never share one
    capsys.readouterr()
    for cell in ("%sessions", "%context --text", "%ocw doctor"):
        res = ip.run_cell(cell)
        out = capsys.readouterr().out
        assert res.error_in_exec is None and "notebooks/analysis.ipynb" in out, cell
        assert absolute not in out, (cell, out)
    # The name as shown is a name %session and %sessions --delete accept.
    ip.run_line_magic("new", "--name other")
    res = ip.run_cell("%session notebooks/analysis.ipynb")
    assert res.error_in_exec is None and ocw.current_session().name == absolute
    capsys.readouterr()
    ip.run_cell("%session notebooks/nothing.ipynb")
    err = capsys.readouterr().err
    assert "'notebooks/nothing.ipynb'" in err and str(work) not in err  # the error names what was typed


def test_two_voila_visitors_at_once_each_get_their_own_session(tmp_path):
    """Voilà serves one notebook to many visitors, a kernel each: two pages requested at
    the same time run two conversations, each in a session of its own, neither seeing
    the other's (Voilà renders the executed notebook into the page it answers)."""
    import re
    import socket
    import threading
    import time
    import urllib.request

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext ocw"),
                nbformat.v4.new_code_cell(f"%%chat\n{MESSAGE}"),
                nbformat.v4.new_code_cell("import ocw\ns = ocw.current_session()\n"
                                          "print('SESSION', s.name, '|', len(s.branch()), 'messages')")]
    nbformat.write(nb, tmp_path / "app.ipynb")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    voila = subprocess.Popen([str(BIN / "voila"), "app.ipynb", "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"],
                             env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline and voila.poll() is None, "voila did not start"
                time.sleep(0.2)
        pages: list[str] = []

        def visit() -> None:
            with urllib.request.urlopen(url, timeout=120) as r:
                pages.append(r.read().decode("utf-8"))

        visitors = [threading.Thread(target=visit) for _ in range(2)]
        for v in visitors:
            v.start()
        for v in visitors:
            v.join(timeout=150)
        assert len(pages) == 2
        seen = [re.findall(r"SESSION (app \(Voilà [0-9a-f]{8}\)) \| (\d+) messages", p) for p in pages]
        assert all(len(s) == 1 for s in seen), seen
        (a, na), (b, nb_) = seen[0][0], seen[1][0]
        assert a != b and (na, nb_) == ("2", "2")  # two sessions, each with its own question and reply only
        assert all("keywords: retries, loader, after, timeout, long." in p for p in pages)  # the whole reply
    finally:
        voila.terminate()
        try:
            voila.wait(timeout=30)
        except subprocess.TimeoutExpired:
            voila.kill()
            voila.wait(timeout=10)
    sessions = _sessions(tmp_path / "ocw.duckdb")
    assert sessions == {a: 2, b: 2}, sessions


def test_a_launcher_counts_up_to_three_processes_up(tmp_path):
    """A real process chain: a program named papermill runs wrappers that run the kernel.
    Its parent, grandparent and great-grandparent count; one further up does not."""
    import shlex

    detect_cmd = [sys.executable, "-c", "from ocw.notebook import frontend as f; "
                  "print(f.detect(environ={}, ancestors=f.ancestors(), zmq=True).kind)"]
    launcher = tmp_path / "papermill"
    launcher.write_text("import subprocess, sys\nsys.exit(subprocess.run(sys.argv[1:]).returncode)\n")

    odd = tmp_path / "w) S 1 (x"  # a wrapper whose name holds ") ": /proc/<pid>/stat must still be read right
    odd.symlink_to("/bin/sh")

    def kind_under(wrappers: int, shell: str = "sh") -> str:
        cmd = shlex.join(detect_cmd)
        for _ in range(wrappers):
            cmd = shlex.join([shell, "-c", f"{cmd}; true"])  # `; true`: the shell stays, it does not exec
        out = subprocess.run([sys.executable, str(launcher), *shlex.split(cmd)], capture_output=True, text=True,
                             timeout=60, env={k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"})
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert kind_under(2) == "batch"  # papermill is the third process up
    assert kind_under(3) == "kernel"  # the fourth: not looked at
    assert kind_under(2, str(odd)) == "batch"
